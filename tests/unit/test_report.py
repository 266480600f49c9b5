"""`python -m harness.report`: tidy tables, summary.csv, the overhead interval, figures, partial trees."""

from __future__ import annotations

import json
import logging
import math
import statistics

import pandas as pd
import pytest

from harness.report import FIGURE_DIR, build_report, describe, main
from harness.report.plots_sim import capacity_points
from harness.report.stats import mean_ci, t_quantile_975
from tests.report_support import (
    APC_PAIRS,
    RADIX_PAIRS,
    TRACE_HW,
    TRACE_POINTS,
    UNIQUE_SIM,
    write_failed,
    write_results_tree,
    write_run,
    write_sim_tree,
)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = write_results_tree(tmp_path_factory.mktemp("results"))
    return build_report(root, out_dir=root)


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
    share = csv[(csv["workload"] == "unique") & (csv["arm"] == "radix")]["bookkeeping_share"].iloc[
        0
    ]
    assert share == pytest.approx(5.0 / 1000.0)  # 5 ms of bookkeeping in a 1 s run


def test_overhead_ratio_and_interval(report):
    table = pd.read_csv(report.root / "overhead.csv")
    tput = table[table["metric"] == "total_token_throughput"].set_index("engine")
    for engine, pairs in (("apc", APC_PAIRS), ("radix", RADIX_PAIRS)):
        logs = [math.log(on / off) for on, off in pairs]  # the interval is taken on the log scale
        half = 2.776 * statistics.stdev(logs) / math.sqrt(5)
        row = tput.loc[engine]
        assert row["n_pairs"] == 5
        assert row["ratio"] == pytest.approx(math.exp(statistics.mean(logs)))
        assert row["ci_low"] == pytest.approx(math.exp(statistics.mean(logs) - half))
        assert row["ci_high"] == pytest.approx(math.exp(statistics.mean(logs) + half))
    # PR #2762's pair alone: 8.55 / 8.71 req/s with APC on / off is a 1.84% loss.
    assert APC_PAIRS[0][0] / APC_PAIRS[0][1] == pytest.approx(1 - 0.0184, abs=1e-4)


def test_every_figure_written_as_png_and_svg(report):
    figures = report.root / FIGURE_DIR
    expected = {
        "ttft_cdf_unique_tiny_real",
        "ttft_cdf_system_prompt_tiny_real",
        "latency_throughput_tiny_real",
        "hit_rate_tiny_real",
        "capacity_system_prompt_tiny_real",
        "overhead",
        "bookkeeping_tiny_real",
        "speedup_tiny_real",
        "ttft_hit_miss_tiny_real",
    }
    assert set(report.figures) == expected
    # no simulated runs, no load sweep, no scheduler x cache square and no live server here
    assert set(report.skipped) == {
        "server_twin",
        "trace_capacity",
        "projected_overhead",
        "metric_vs_load",
        "decomposition",
        "fleet_routers",
    }
    for stem in expected:
        assert (figures / f"{stem}.png").stat().st_size > 1000
        assert (figures / f"{stem}.svg").read_text().lstrip().startswith("<?xml")


def test_figure_text_names_configuration(report):
    """Titles, units, legends and the footnote are readable without the code."""
    svg = (report.root / FIGURE_DIR / "overhead.svg").read_text()
    for needle in (
        "0%-hit throughput ratio",
        "cache on / cache off",
        "apc on/off (unique, n=5 pairs, model tiny)",
        "model tiny",
        "KV capacity 4,096 tokens",
        "n = 20 runs (5 seeds)",
        "log scale",
    ):
        assert needle in svg, needle
    cap = (report.root / FIGURE_DIR / "capacity_system_prompt_tiny_real.svg").read_text()
    for needle in (
        "KV capacity (tokens)",
        "hit rate (%)",
        "TTFT (ms)",
        "radix-lpm (page 1, lpm)",
        "apc (block 16, fcfs)",
        "Belady",
        "KV capacity 256, 1,024, 4,096 tokens",
    ):
        assert needle in cap, needle


def test_partial_trees_never_crash(tmp_path, caplog):
    empty = tmp_path / "empty"
    empty.mkdir()
    rep = build_report(empty, out_dir=empty)
    assert rep.figures == [] and set(rep.skipped) >= {"overhead", "ttft_cdf", "capacity"}
    assert (empty / "summary.csv").read_text().startswith("workload,arm")

    only_failed = tmp_path / "failed"
    write_failed(only_failed, "a")
    rep = build_report(only_failed, out_dir=only_failed)
    assert rep.figures == [] and pd.read_csv(only_failed / "summary.csv")["n_not_ok"].tolist() == [
        1
    ]

    partial = tmp_path / "partial"
    write_run(partial, "one", engine="radix", workload="rag", hit_rate=0.5, ideal=0.6, belady=0.55)
    (partial / "garbage").mkdir()
    (partial / "garbage" / "summary.json").write_text("{not json")
    with caplog.at_level(logging.INFO, logger="harness.report"):
        rep = build_report(partial, out_dir=partial)
    assert "overhead" in rep.skipped and "capacity" in rep.skipped
    assert {
        "ttft_cdf_rag_tiny_real",
        "hit_rate_tiny_real",
        "latency_throughput_tiny_real",
        "bookkeeping_tiny_real",
    } <= set(rep.figures)
    assert "skipped figure overhead" in caplog.text and "unreadable" in caplog.text


def test_cli(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2
    write_results_tree(tmp_path / "r")
    assert main([str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert (
        "30 runs (29 ok, 0 incomplete, 1 failed or interrupted)" in out
        and "0%-hit throughput ratio apc on/off" in out
    )


def test_a_folder_without_runs_is_never_written_unless_asked(tmp_path, capsys):
    """`python -m harness.report results/reference` used to replace the committed CSVs with
    empty ones: a folder holding no runs is refused, and --out writes where it is told."""
    committed = tmp_path / "reference"
    committed.mkdir()
    (committed / "summary.csv").write_text("workload,arm\nrag,apc\n")
    (committed / "overhead.csv").write_text("metric,ratio\nx,1.0\n")
    before = {p.name: p.read_bytes() for p in committed.iterdir()}
    assert main([str(committed)]) == 2
    assert "holds no run directories; nothing was written" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in committed.iterdir()} == before
    assert main([str(committed), "--out", str(tmp_path / "elsewhere")]) == 0
    assert {p.name: p.read_bytes() for p in committed.iterdir()} == before
    assert (tmp_path / "elsewhere" / "summary.csv").is_file()


def test_a_table_without_rows_never_replaces_a_non_empty_file(tmp_path):
    root = tmp_path / "runs"
    write_failed(root, "a")  # one run, no ok one: no overhead pairs
    (root / "overhead.csv").write_text("metric,ratio\nkept,1.0\n")
    build_report(root, figures=False, out_dir=root)
    assert (root / "overhead.csv").read_text() == "metric,ratio\nkept,1.0\n"
    assert pd.read_csv(root / "summary.csv")["n_not_ok"].tolist() == [1]


def test_the_report_writes_into_another_folder_with_out(tmp_path):
    write_results_tree(tmp_path / "r")
    assert main([str(tmp_path / "r"), "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "summary.csv").is_file() and (tmp_path / "o" / FIGURE_DIR).is_dir()
    assert not (tmp_path / "r" / "summary.csv").exists()


def test_pairs_stay_within_a_sweep_and_pool_across_sweeps(tmp_path):
    # Two suite runs with the same seed: each on run pairs with the off run of its own sweep.
    for sweep, (on, off) in (("s1", (990.0, 1000.0)), ("s2", (2020.0, 2000.0))):
        write_run(tmp_path, f"{sweep}/0-apc", seed=0, throughput=on)
        write_run(tmp_path, f"{sweep}/1-apc_off", seed=0, cache=False, throughput=off)
    table = build_report(tmp_path, figures=False).overhead
    row = table[table["metric"] == "total_token_throughput"].iloc[0]
    assert row["n_pairs"] == 2 and row["ratio"] == pytest.approx(
        math.sqrt(0.99 * 1.01)
    )  # geometric mean


@pytest.fixture(scope="module")
def sim_report(tmp_path_factory):
    root = write_sim_tree(tmp_path_factory.mktemp("sim"))
    return build_report(root, out_dir=root)


def test_trace_capacity_points_and_figure(sim_report):
    points = capacity_points(sim_report.runs[sim_report.runs["ok"]]).set_index(
        ["arm", "kv_capacity_tokens"]
    )
    assert len(points) == 6 and set(points["hardware"]) == {TRACE_HW}
    for capacity, engines in TRACE_POINTS.items():
        for engine, (hit, ttfts) in engines.items():
            row = points.loc[(engine, capacity)]
            assert row["hit_rate"] == pytest.approx(hit)
            assert (row["median_ttft_ms"], row["p99_ttft_ms"]) == (
                pytest.approx(ttfts[1]),
                pytest.approx(ttfts[2]),
            )
    stem = f"trace_capacity_mooncake_conversation_{TRACE_HW}"
    assert stem in sim_report.figures
    # The generic capacity figure leaves preset runs to this one (one figure per preset).
    assert not any(f.startswith("capacity_") for f in sim_report.figures)
    svg = (sim_report.root / FIGURE_DIR / f"{stem}.svg").read_text()
    for needle in (
        f"on {TRACE_HW}",
        "12,031 requests",
        "TTFT p50 / p99 against KV capacity",
        "TTFT (s, virtual clock)",
        "apc (block 16, fcfs) p50",
        "radix p99",
        f"hardware {TRACE_HW}",
        "trace timestamps x 8x",
        "KV capacity 447,488, 1,791,488, 7,167,488 tokens",
    ):
        assert needle in svg, needle


def test_projected_overhead_table_subtracts_cache_off(sim_report):
    csv = pd.read_csv(sim_report.root / "projected_overhead.csv").set_index(["hardware", "engine"])
    assert set(csv.index) == set(UNIQUE_SIM)
    for key, seeds in UNIQUE_SIM.items():
        net = [(on - off) / (dur * 1e3) for on, off, dur in seeds]
        row = csv.loc[key]
        assert (row["n_runs"], row["n_off_pairs"]) == (2, 2)
        assert row["overhead_share"] == pytest.approx(statistics.mean(net))
        assert row["gross_share"] == pytest.approx(
            statistics.mean(on / (dur * 1e3) for on, _, dur in seeds)
        )
        half = 12.706 * statistics.stdev(net) / math.sqrt(2)
        assert (row["ci_low"], row["ci_high"]) == (
            pytest.approx(statistics.mean(net) - half),
            pytest.approx(statistics.mean(net) + half),
        )
        assert row["claim_share"] == 0.01
    # h100 8B apc: (30 - 5) ms of a 2.5 s run and (34 - 6) of 2.5 s: 1.0% and 1.12%.
    assert csv.loc[("h100_llama3_8b_bf16", "apc"), "overhead_share"] == pytest.approx(
        (0.010 + 0.0112) / 2
    )
    assert "projected_overhead" in sim_report.figures
    svg = (sim_report.root / FIGURE_DIR / "projected_overhead.svg").read_text()
    for needle in (
        "1% (vLLM V1: &lt; 1% at a 0% hit)",
        "h200_llama3_70b_fp8",
        "cache bookkeeping / run duration (%)",
        "Projected 0%-hit overhead per hardware preset",
    ):
        assert needle in svg, needle
    assert "projected 0%-hit overhead radix on h200_llama3_70b_fp8" in describe(sim_report)
    # Their virtual throughput is blind to bookkeeping: no wall-clock on/off ratio from them.
    assert sim_report.overhead.empty and "overhead" in sim_report.skipped


def test_projected_overhead_without_cache_off_is_gross(tmp_path):
    write_run(
        tmp_path,
        "on",
        engine="radix",
        bookkeeping_ms=12.0,
        duration_s=3.0,
        executor="simulated",
        hardware="h200_llama3_8b_bf16",
    )
    write_run(tmp_path, "real", engine="radix", bookkeeping_ms=12.0)  # real executor: not projected
    row = build_report(tmp_path, figures=False).projected.iloc[0]
    assert (row["hardware"], row["n_runs"], row["n_off_pairs"]) == ("h200_llama3_8b_bf16", 1, 0)
    assert row["overhead_share"] == row["gross_share"] == pytest.approx(12.0 / 3000.0)
    assert pd.isna(row["ci_low"])


# ------------------------------------------------------------------ grouping, names, incomplete runs


def test_a_rate_sweep_gives_one_summary_row_per_rate_and_a_load_figure(tmp_path):
    for rate in (2.0, 8.0, 32.0):
        for engine in ("apc", "radix"):
            for seed in (0, 1):
                ttft = 10.0 * rate  # latency grows with load
                write_run(
                    tmp_path,
                    f"rate/{engine}-r{rate:g}-s{seed}",
                    engine=engine,
                    seed=seed,
                    rate=rate,
                    ttfts_ms=(ttft, ttft + 1, ttft + 2),
                )
    report = build_report(tmp_path, out_dir=tmp_path)
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert len(summary) == 6 and set(summary["n_ok"]) == {2}
    assert "load.rate" in summary.columns and all("load.rate" in v for v in summary["varies"])
    apc = summary[summary["arm"] == "apc"].sort_values("load.rate")
    assert list(apc["load.rate"]) == [2.0, 8.0, 32.0]
    assert list(apc["median_ttft_ms"]) == [21.0, 81.0, 321.0]  # never averaged across rates
    assert "metric_vs_load_unique_tiny_real" in report.figures
    svg = (tmp_path / FIGURE_DIR / "metric_vs_load_unique_tiny_real.svg").read_text()
    assert "load.rate (req/s)" in svg and "apc (block 16, fcfs)" in svg


def test_runs_of_two_models_never_share_a_figure(tmp_path):
    write_run(tmp_path, "a/apc", engine="apc")
    run = write_run(tmp_path, "b/apc", engine="apc")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["model"]["name"] = "s"
    (run / "manifest.json").write_text(json.dumps(manifest))
    report = build_report(tmp_path, out_dir=tmp_path)
    assert {"latency_throughput_s_real", "latency_throughput_tiny_real"} <= set(report.figures)
    assert len(pd.read_csv(tmp_path / "summary.csv")) == 2


def test_names_from_results_never_leave_the_results_folder(tmp_path):
    root = tmp_path / "deep" / "results"
    write_run(root, "x/evil", workload="../../../escaped")
    write_run(root, "x/slash", workload="a/b")
    before = {p for p in tmp_path.rglob("*") if p.is_file() and root not in p.parents}
    report = build_report(root, out_dir=root)
    after = {p for p in tmp_path.rglob("*") if p.is_file() and root not in p.parents}
    assert after == before  # nothing written outside root
    figures = {p.name for p in (root / FIGURE_DIR).iterdir()}
    assert "ttft_cdf_escaped_tiny_real.png" in figures and "ttft_cdf_a-b_tiny_real.png" in figures
    assert all("/" not in stem and not stem.startswith(".") for stem in report.figures)


def test_killed_runs_are_listed_as_incomplete_with_their_rows(tmp_path):
    write_run(tmp_path, "s/0-apc", engine="apc")
    killed = tmp_path / "s" / "1-radix"
    killed.mkdir(parents=True)
    (killed / "manifest.json").write_text(
        json.dumps({"config": {"engine": {"cache": "radix"}, "workload": {"name": "unique"}}})
    )
    (killed / "rows.jsonl").write_text(
        '{"request_id": "a"}\n{"request_id": "b"}\n{"request_id": "c", "trunc'
    )
    report = build_report(tmp_path, out_dir=tmp_path)
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert summary["n_incomplete"].sum() == 1 and summary["n_ok"].sum() == 1
    assert "incomplete: s/1-radix (2 finished rows, no summary: killed?)" in describe(report)


def test_arm_colours_are_fixed_across_figures(report):
    from harness.report.palette import ARM_COLOURS

    for stem in ("latency_throughput_tiny_real", "overhead", "bookkeeping_tiny_real"):
        svg = (report.root / FIGURE_DIR / f"{stem}.svg").read_text()
        assert ARM_COLOURS["apc"] in svg and ARM_COLOURS["radix"] in svg, stem


def test_intervals_never_go_below_zero_and_single_runs_get_none():
    from harness.report.stats import bounded_ci, ratio_ci

    assert bounded_ci([0.1, 5.0, 0.2], non_negative=True).low == 0.0
    assert bounded_ci([3.0], non_negative=True)[1:] == (None, None, 1)
    ci = ratio_ci([0.5, 2.0, 1.0])
    assert ci.mean == pytest.approx(1.0) and 0 < ci.low < 1 < ci.high
    assert ci.low * ci.high == pytest.approx(1.0)  # r and 1/r: mirror images on the log scale


def test_bookkeeping_of_macro_stepped_runs_is_not_a_per_step_share():
    """A simulated run with decode runs replays its decode stretches' bookkeeping in bulk: its
    share is left out of the bookkeeping figure and the projected overhead; stepped runs, runs
    that charge host time (never macro-stepped), real runs and older runs keep theirs."""
    from harness.report.tables import tidy_runs

    base = {"duration": 10.0, "cache_bookkeeping_ms": 50.0, "status": "ok"}
    runs = pd.DataFrame(
        [
            {"config.executor": "simulated", "config.engine.decode_runs": True, **base},
            {"config.executor": "simulated", "config.engine.decode_runs": False, **base},
            {
                "config.executor": "simulated",
                "config.engine.decode_runs": True,
                "config.hardware.charge_host_time": True,
                **base,
            },
            {"config.executor": "real", "config.engine.decode_runs": True, **base},
            {"executor": "simulated", **base},  # recorded before decode runs existed
        ]
    )
    tidy = tidy_runs(runs)
    assert tidy["per_step_bookkeeping"].tolist() == [False, True, True, True, True]
    assert math.isnan(tidy["bookkeeping_share"].iloc[0])
    assert tidy["bookkeeping_share"].iloc[1:].tolist() == [0.005] * 4
