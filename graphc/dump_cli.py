"""graphc-dump: shows a graph before and after the compiler's passes.

Not built yet: it needs the compiled-file format (a later issue). Until then it says so.
"""
import sys


def main(argv=None):
    print("graphc-dump: not built yet; it arrives with the compiled graph file format.",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
