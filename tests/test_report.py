"""`python -m harness.report`: tidy tables, summary.csv, the overhead interval, figures, partial trees."""

from __future__ import annotations

import logging
import math
import statistics

import pandas as pd
import pytest

from harness.report import FIGURE_DIR, build_report, main
from harness.stats import mean_ci, t_quantile_975
from tests.report_support import APC_PAIRS, RADIX_PAIRS, write_failed, write_results_tree, write_run


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = write_results_tree(tmp_path_factory.mktemp("results"))
    return build_report(root)


def test_t_quantiles():
    assert t_quantile_975(4) == 2.776 and t_quantile_975(30) == 2.042
    assert t_quantile_975(31) == pytest.approx(2.040, abs=1e-3)  # continuous across the table's end
    assert t_quantile_975(10_000) == pytest.approx(1.960, abs=1e-3)
    with pytest.raises(ValueError):
        t_quantile_975(0)


def test_mean_ci_is_student_t():
    ci = mean_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    half = 2.776 * statistics.stdev([1, 2, 3, 4, 5]) / math.sqrt(5)
    assert (ci.mean, ci.n) == (3.0, 5)
    assert ci.low == pytest.approx(3.0 - half) and ci.high == pytest.approx(3.0 + half)
    assert mean_ci([7.0]) == (7.0, None, None, 1)


def test_arms_and_status_counts(report):
    runs = report.runs
    assert set(runs["arm"]) == {"apc", "apc-off", "radix", "radix-off", "radix-lpm"}
    assert len(runs) == 20 + 9 + 1 and int((~runs["ok"]).sum()) == 1
    failed = runs[~runs["ok"]].iloc[0]
    assert (failed["workload"], failed["engine"], failed["arm"]) == ("system_prompt", "apc", "apc")


def test_summary_csv_counts_failed_runs(report):
    csv = pd.read_csv(report.root / "summary.csv")
    assert csv["n_runs"].sum() == 30 and csv["n_not_ok"].sum() == 1
    ov = csv[(csv["workload"] == "unique") & (csv["arm"] == "apc")].iloc[0]
    assert ov["n_ok"] == 5
    assert ov["total_token_throughput"] == pytest.approx(statistics.mean(on for on, _ in APC_PAIRS))
    failed_row = csv[csv["n_not_ok"] == 1].iloc[0]
    assert failed_row["n_ok"] == 0 and pd.isna(failed_row["median_ttft_ms"])
    share = csv[(csv["workload"] == "unique") & (csv["arm"] == "radix")]["bookkeeping_share"].iloc[0]
    assert share == pytest.approx(5.0 / 1000.0)  # 5 ms of bookkeeping in a 1 s run


def test_overhead_ratio_and_interval(report):
    table = pd.read_csv(report.root / "overhead.csv")
    tput = table[table["metric"] == "total_token_throughput"].set_index("engine")
    for engine, pairs in (("apc", APC_PAIRS), ("radix", RADIX_PAIRS)):
        ratios = [on / off for on, off in pairs]
        half = 2.776 * statistics.stdev(ratios) / math.sqrt(5)
        row = tput.loc[engine]
        assert row["n_pairs"] == 5
        assert row["ratio"] == pytest.approx(statistics.mean(ratios))
        assert row["ci_low"] == pytest.approx(statistics.mean(ratios) - half)
        assert row["ci_high"] == pytest.approx(statistics.mean(ratios) + half)
    # PR #2762's pair alone: 8.55 / 8.71 req/s with APC on / off is a 1.84% loss.
    assert APC_PAIRS[0][0] / APC_PAIRS[0][1] == pytest.approx(1 - 0.0184, abs=1e-4)


def test_every_figure_written_as_png_and_svg(report):
    figures = report.root / FIGURE_DIR
    expected = {"ttft_cdf_unique", "ttft_cdf_system_prompt", "latency_throughput", "hit_rate",
                "capacity_system_prompt_tiny_real", "overhead", "bookkeeping"}  # fmt: skip
    assert set(report.figures) == expected and report.skipped == {}
    for stem in expected:
        assert (figures / f"{stem}.png").stat().st_size > 1000
        assert (figures / f"{stem}.svg").read_text().lstrip().startswith("<?xml")


def test_figure_text_names_configuration(report):
    """Titles, units, legends and the footnote are readable without the code."""
    svg = (report.root / FIGURE_DIR / "overhead.svg").read_text()
    for needle in ("0%-hit throughput ratio", "cache on / cache off", "apc on/off (unique, n=5 pairs)",
                   "model tiny", "KV capacity 4,096 tokens", "n = 20 runs (5 seeds)", "Student-t"):  # fmt: skip
        assert needle in svg, needle
    cap = (report.root / FIGURE_DIR / "capacity_system_prompt_tiny_real.svg").read_text()
    for needle in ("KV capacity (tokens)", "hit rate (%)", "TTFT (ms)", "radix-lpm (page 1, lpm)",
                   "apc (block 16, fcfs)", "Belady", "KV capacity 256, 1,024, 4,096 tokens"):  # fmt: skip
        assert needle in cap, needle


def test_partial_trees_never_crash(tmp_path, caplog):
    empty = tmp_path / "empty"
    empty.mkdir()
    rep = build_report(empty)
    assert rep.figures == [] and set(rep.skipped) >= {"overhead", "ttft_cdf", "capacity"}
    assert (empty / "summary.csv").read_text().startswith("workload,arm")

    only_failed = tmp_path / "failed"
    write_failed(only_failed, "a")
    rep = build_report(only_failed)
    assert rep.figures == [] and pd.read_csv(only_failed / "summary.csv")["n_not_ok"].tolist() == [1]

    partial = tmp_path / "partial"
    write_run(partial, "one", engine="radix", workload="rag", hit_rate=0.5, ideal=0.6, belady=0.55)
    (partial / "garbage").mkdir()
    (partial / "garbage" / "summary.json").write_text("{not json")
    with caplog.at_level(logging.INFO, logger="harness.report"):
        rep = build_report(partial)
    assert "overhead" in rep.skipped and "capacity" in rep.skipped
    assert {"ttft_cdf_rag", "hit_rate", "latency_throughput", "bookkeeping"} <= set(rep.figures)
    assert "skipped figure overhead" in caplog.text and "unreadable" in caplog.text


def test_cli(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2
    write_results_tree(tmp_path / "r")
    assert main([str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "30 runs (29 ok, 1 not ok)" in out and "0%-hit throughput ratio apc on/off" in out


def test_pairs_stay_within_a_sweep_and_pool_across_sweeps(tmp_path):
    # Two suite runs with the same seed: each on run pairs with the off run of its own sweep.
    for sweep, (on, off) in (("s1", (990.0, 1000.0)), ("s2", (2020.0, 2000.0))):
        write_run(tmp_path, f"{sweep}/0-apc", seed=0, throughput=on)
        write_run(tmp_path, f"{sweep}/1-apc_off", seed=0, cache=False, throughput=off)
    table = build_report(tmp_path, figures=False).overhead
    row = table[table["metric"] == "total_token_throughput"].iloc[0]
    assert row["n_pairs"] == 2 and row["ratio"] == pytest.approx((0.99 + 1.01) / 2)
