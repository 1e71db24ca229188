"""``python -m trio_batch.http``: ``trio-batch serve`` as a stand-alone command."""

import sys

from ._serve import serve_main

sys.exit(serve_main())
