"""The in-process claims at the quick size, measured once per test session: what the session
fixture `quick_claims` (tests/conftest.py) returns to the test files about the claims.

One measurement, like `python -m harness.claims --quick --only <IN_PROCESS>`: every claim on one
Context (a run is made once, so claim 16 reads claim 3's arms) and claims.csv / claims.md written.
Before, three of the four files measured their claims again on their own Context (claim 24,
claims 25-28, the article's five): 178 s of setup beside the whole measurement's 880 s in a CI run
under load; 88 s beside 301 s measured side by side on the busy 2-core box (2026-12-07). Each
claim's row and finding were the same on the shared Context as on its own, field for field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.claims.__main__ import claims_context, measure_claims, write_claims
from harness.claims.record import Checked, Finding, Row
from harness.claims.registry import CLAIMS, ordered
from harness.config.schema import register_configs

# Claims 1 and 21 measure CPU time in fresh processes (their spread between invocations), which
# tests/run may not start: tests/live/test_claims_reproduce.py runs them.
IN_FRESH_PROCESSES = ("zero_hit", "hash_algos")
IN_PROCESS = [c.key for c in ordered() if c.key not in IN_FRESH_PROCESSES]


@dataclass(frozen=True)
class QuickClaims:
    """The measurement: its output folder, the rows as written, and each claim as checked."""

    out: Path  # claims.csv, claims.md, figures/ and runs/
    rows: list[Row]  # as in claims.csv (the real-server column says "not run")
    checked: dict[str, Checked]  # by claim key

    def row(self, key: str) -> Row:
        """The claim's row as written."""
        number = CLAIMS.get(key).number
        return next(r for r in self.rows if r.number == number)

    def finding(self, key: str) -> Finding:
        """What the claim found; its experiment crashing fails the test asking, with its row."""
        checked = self.checked[key]
        assert checked.finding is not None, checked.row.verdict
        return checked.finding


def measure_quick_claims(out: Path) -> QuickClaims:
    """The IN_PROCESS claims at the quick size into `out`, files written."""
    register_configs()  # the schemas Hydra composes against
    checked = measure_claims([CLAIMS.get(k) for k in IN_PROCESS], claims_context(out, quick=True))
    rows = write_claims(out, checked, quick=True, only=IN_PROCESS)
    return QuickClaims(out, rows, {c.claim.key: c for c in checked})
