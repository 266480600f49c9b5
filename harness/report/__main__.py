"""`python -m harness.report [RESULTS_DIR]`: see harness/report/build.py."""

import sys

from harness.report.build import main

sys.exit(main())
