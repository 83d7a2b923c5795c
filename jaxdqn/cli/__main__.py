"""``python -m jaxdqn.cli``: the ``jaxdqn`` command."""

from jaxdqn.cli import console

console()
