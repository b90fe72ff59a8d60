import sys

from pivotgym_swe.commands import main

sys.exit(main())
