"""``python -m ragmon``."""

import sys

from ragmon.cli import main

sys.exit(main())
