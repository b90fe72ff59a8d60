"""``python -m pivotgym.cli``: the ``pivotgym`` command (also under ``accelerate launch -m pivotgym.cli``)."""

import sys

from pivotgym.cli.app import main

sys.exit(main())
