"""Entry point of the `graphc-dump` console script (see graphc/dump/)."""
import sys

from graphc.dump.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
