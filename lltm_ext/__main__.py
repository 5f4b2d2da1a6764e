"""`python -m lltm_ext ...`: the command line of :mod:`lltm_ext.cli` (the same as `lltm-ext`)."""

import sys

from lltm_ext.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
