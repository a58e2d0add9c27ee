import sys

from graphc.dump.cli import main

sys.exit(main())
