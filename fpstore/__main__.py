"""``python -m fpstore`` is ``fpstore-admin``."""

import sys

from fpstore.cli import main

sys.exit(main())
