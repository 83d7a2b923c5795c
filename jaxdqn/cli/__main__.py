"""``python -m jaxdqn.cli``: the ``jaxdqn`` command."""

import sys

from jaxdqn.cli import main

sys.exit(main())
