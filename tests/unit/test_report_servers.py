"""Live-server runs in the report: one platform per server identity, never per start.

Each launcher start serves `llama-rand-smollm2-<nonce>`, and the report used to name the platform
after the served name, so two starts of one vLLM got two figure sets; the legend carried the URL
and nonce and called a block-32 server "(block 16, fcfs)" (the twin config's default); the
`server_twin` bars took the designs' first two colours for measured and twin.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import to_hex

from harness.report import build_report
from harness.report.figstyle import platforms
from harness.report.palette import ARM_COLOURS
from harness.report.plots import arm_label
from harness.report.plots_server import group_label
from tests.report_support import write_run, write_server_run

HIT: dict[str, Any] = {"hit_rate": 0.5, "ideal": 0.6, "belady": 0.55}


@pytest.fixture
def report(tmp_path):
    write_server_run(tmp_path, "vllm-a", "50914c48", 8421)
    write_server_run(tmp_path, "vllm-b", "82245d50", 41733)
    write_run(tmp_path, "apc", engine="apc", workload="multiturn", **HIT)
    write_run(tmp_path, "radix", engine="radix", workload="multiturn", **HIT)
    yield build_report(tmp_path, out_dir=tmp_path, keep_figures=True)
    plt.close("all")


def test_two_starts_of_one_server_are_one_platform_and_one_figure_set(report):
    served = report.runs[report.runs["engine"] == "vllm-server"]
    assert len(served) == 2
    groups = [group for _, group in platforms(report.runs) if "vllm-server" in set(group["engine"])]
    assert len(groups) == 1 and len(groups[0]) == 2
    assert set(served["model"]) == {"llama-rand-smollm2"}
    assert not [s for s in report.figures if "50914c48" in s or "82245d50" in s]
    assert len([s for s in report.figures if s.startswith("hit_rate") and "llama" in s]) == 1
    rows = report.summary[report.summary["arm"] == "vllm-server"]
    assert len(rows) == 2  # one summary row per server run, side by side


def test_the_legend_is_short_with_the_servers_own_block_size(report):
    runs = report.runs
    assert arm_label(runs, "vllm-server") == "vllm-server 0.32.0 (block 32, fcfs)"
    assert set(runs.loc[runs["engine"] == "vllm-server", "series"]) == {"vllm-server"}  # no URL
    row = runs[runs["engine"] == "vllm-server"].iloc[0]
    assert group_label(row) == "multiturn\nburst\nvllm 0.32.0, block 32"


def test_measured_and_twin_are_one_colour_filled_and_hatched_never_the_designs(report):
    fig = report.drawn["server_twin"]
    bars = list(fig.axes[0].patches)  # bar kinds in order, one bar per run each
    measured = {bars[i].get_facecolor() for i in range(0, 2)}
    twin = bars[2:4]
    assert len(measured) == 1 and all(b.get_hatch() for b in twin)
    designs = {to_hex(c) for c in ARM_COLOURS.values()}
    assert to_hex(bars[0].get_facecolor()) not in designs
    assert to_hex(twin[0].get_edgecolor()) == to_hex(bars[0].get_facecolor())
