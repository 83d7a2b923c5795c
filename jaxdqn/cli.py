"""The ``jaxdqn`` command (shell layer)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


def info() -> int:
    """Print the version, the JAX backend and its devices: the first check on a new machine."""
    import jax

    import jaxdqn

    print(f"jaxdqn {jaxdqn.__version__}")
    print(f"jax {jax.__version__}, backend {jax.default_backend()}")
    for device in jax.devices():
        print(f"  {device.id}: {device.device_kind} ({device.platform})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``jaxdqn`` console script."""
    parser = argparse.ArgumentParser(prog="jaxdqn", description="DQN-family agents in JAX.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("info", help="version, JAX backend and devices")
    args = parser.parse_args(argv)
    if args.version:
        import jaxdqn

        print(jaxdqn.__version__)
        return 0
    if args.command == "info":
        return info()
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
