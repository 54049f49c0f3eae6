"""``python -m fpstore`` is ``fpstore-admin``."""

import sys

from fpstore.admin.cli import main

sys.exit(main())
