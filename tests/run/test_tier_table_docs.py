"""docs/tiers.md §8.3's multiturn table is what `tiers_multiturn` gives today.

The suite's numbers live in the docs; its apc rows once drifted from the code for a whole stop
with no test noticing. This reruns the suite's four runs (apc and radix, tier off and on;
simulated time, so the numbers are exact on any machine) in this process, renders them with the
report's tier table (harness/report/tier_table.py) and finds each row verbatim in the docs.
"""

from __future__ import annotations

import re

from harness.report.build import load
from harness.report.tier_table import markdown_rows, tier_table
from tests.harness_util import ROOT, run_harness

ARMS = [("apc", 0), ("apc", 262144), ("radix", 0), ("radix", 262144)]


def _docs_table() -> list[str]:
    """The rows of §8.3's multiturn table, as committed."""
    text = (ROOT / "docs" / "tiers.md").read_text()
    start = text.index("**multiturn** (`tiers_multiturn`")
    block = text[start : text.index("All four rows regenerated", start)]
    return [line for line in block.splitlines() if re.match(r"\| (apc|radix)[ ,]", line)]


def test_the_docs_multiturn_tier_table_is_what_the_suite_gives(tmp_path):
    for i, (arm, tokens) in enumerate(ARMS):
        overrides = ["+suite=tiers_multiturn", f"+suite/arm={arm}"]
        overrides.append(f"engine.host_tier.tokens={tokens}")
        run = run_harness(overrides, tmp_path / f"{i}-{arm}-host{tokens}")
        assert run.returncode == 0, run.stderr[-2000:]
    runs, _ = load(tmp_path)
    assert markdown_rows(tier_table(runs)) == _docs_table()
