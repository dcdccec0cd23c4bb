"""``python -m lipsweep``: runs the command line, :func:`lipsweep.cli.main` (the CLI lives in
:mod:`lipsweep.cli`; ``main``, ``build_parser`` and ``COMMANDS`` stay importable from here)."""

import sys

from lipsweep.cli import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
