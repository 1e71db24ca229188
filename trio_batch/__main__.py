"""``python -m trio_batch``: the ``trio-batch`` command line."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
