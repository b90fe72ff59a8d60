import sys

from pivotgym_swe.cli import main

sys.exit(main())
