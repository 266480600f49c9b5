"""docs/tiers.md §8.3's two tables of vLLM's offloading-blog shape are what the script gives today.

scripts/tiers_single_request.py runs one request cold and then as a host-tier hit, for each design
and prompt length, on the H100 preset (PCIe, vLLM's measured ~50 GB/s) and the GH200 preset
(NVLink-C2C). Simulated time, so the numbers are exact on any machine: each row is rendered as the
docs write it and found verbatim in its table.
"""

from __future__ import annotations

import sys

import pytest

from tests.harness_util import ROOT

sys.path.insert(0, str(ROOT / "scripts"))  # scripts/ is a folder of programs, imported by name

from tiers_single_request import Shape, measure  # noqa: E402

TABLES = {  # preset -> the line that opens its table's header
    "h100_llama3_8b_bf16": "| prompt tokens | computed TTFT ms |",
    "gh200_llama3_8b_bf16": "| prompt tokens (GH200) | computed TTFT ms |",
}


def _docs_rows(header: str) -> list[str]:
    lines = (ROOT / "docs" / "tiers.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows: list[str] = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            return rows
        rows.append(line)
    return rows


def _cell(s: Shape) -> str:
    return f"{s.hit_s * 1e3:.1f} ({s.load_s * 1e3:.1f}) | {s.computed_s / s.hit_s:.1f}x"


def _rows(shapes: list[Shape]) -> list[str]:
    by = {(s.cache, s.tokens): s for s in shapes}
    rows: list[str] = []
    for n in sorted({s.tokens for s in shapes}):
        apc, radix = by["apc", n], by["radix", n]
        assert apc.computed_s == radix.computed_s  # one cold cost: the designs differ in the hit
        rows.append(f"| {n:,} | {apc.computed_s * 1e3:,.1f} | {_cell(apc)} | {_cell(radix)} |")
    return rows


@pytest.mark.parametrize("hardware", sorted(TABLES))
def test_the_docs_blog_shape_table_is_what_the_script_gives(hardware):
    assert _rows(measure(hardware)) == _docs_rows(TABLES[hardware])
