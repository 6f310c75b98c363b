"""``python -m tgsuite`` (and ``torchrun ... -m tgsuite``) is the ``tgsuite`` console script.

A torchrun worker (``WORLD_SIZE`` > 1) ends through ``repro.distributed.exit_process``: its work is done and its
process group closed by then, and skipping C++ static destructors avoids a gloo teardown abort that would make
torchrun report a finished run as failed."""

import os
import sys

from tgsuite.cli import main

rc = main()
if int(os.environ.get("WORLD_SIZE", "1")) > 1 and "LOCAL_RANK" in os.environ:
    from repro.distributed import exit_process

    exit_process(rc)
sys.exit(rc)
