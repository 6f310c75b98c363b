"""``python -m tgsuite`` (and ``torchrun ... -m tgsuite``) is the ``tgsuite`` console script."""

import sys

from tgsuite.cli import main

sys.exit(main())
