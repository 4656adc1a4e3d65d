"""python -m pytest_triton: the commands on saved runs (regress/cli.py holds them)."""

import sys

from .regress.cli import main

if __name__ == "__main__":
    sys.exit(main())
