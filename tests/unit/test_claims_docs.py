"""docs/claims.md's account of the reference run cannot contradict the reference (issue 47,
item 4): its verdict table repeats results/reference/claims.csv's verdicts, and each reading
bullet starts with its claim's verdict label and quotes only numbers the claim's reference row
holds (to the digits the bullet prints)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "claims.md").read_text(encoding="utf-8")
REFERENCE = pd.read_csv(ROOT / "results" / "reference" / "claims.csv").set_index("number")
DECIMAL = re.compile(
    r"\d[\d,]*\.\d+"
)  # a quoted measurement; counts and claim numbers are integers
LABELS = ("holds", "does not hold", "depends on", "undecided", "not measurable here")


def _section_two() -> str:
    return DOC.split("## 2.", 1)[1].split("## 3.", 1)[0]


def _table() -> dict[int, str]:
    rows = re.findall(r"^\| (\d+) \| .*? \| \*\*(.+?)\*\*", _section_two(), flags=re.M)
    return {int(n): verdict for n, verdict in rows}


def _bullets() -> dict[int, str]:
    reading = _section_two().split("Reading it", 1)[1].split("Reproduce:", 1)[0]
    found = re.findall(r"^- (\d+): (.+?)(?=^- |\Z)", reading, flags=re.M | re.S)
    return {int(n): " ".join(text.split()) for n, text in found}


def _row_text(number: int) -> str:
    row = REFERENCE.loc[number]
    return " ".join(str(row[c]) for c in ("setup", "result", "verdict", "evidence", "threshold"))


def _matches(quoted: str, reference: list[str]) -> bool:
    digits = len(quoted.split(".")[1])
    value = float(quoted.replace(",", ""))
    return any(abs(round(float(r.replace(",", "")), digits) - value) < 1e-9 for r in reference)


def test_the_table_repeats_the_reference_verdicts():
    table = _table()
    assert set(table) == set(REFERENCE.index)
    for number, verdict in table.items():
        assert verdict == REFERENCE.loc[number, "verdict"], number


def test_each_reading_starts_with_its_verdict_and_quotes_reference_numbers():
    bullets = _bullets()
    assert bullets
    for number, text in bullets.items():
        verdict = REFERENCE.loc[number, "verdict"]
        label = next(lb for lb in LABELS if verdict.startswith(lb))
        assert text.startswith(label), (number, text[:60], verdict[:60])
        reference = DECIMAL.findall(_row_text(number))
        for quoted in DECIMAL.findall(text):
            assert _matches(quoted, reference), (number, quoted)
