"""`python -m harness.export --format br0.2|mooncake|bailian RUN_DIR... --out DIR`."""

import sys

from harness.export.cli import main

sys.exit(main())
