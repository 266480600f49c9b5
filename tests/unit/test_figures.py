"""What the report's figures draw, read from the matplotlib artists of constructed result folders:
which runs share a panel and a line, points (never bars) on log axes, intervals only from three
runs on, virtual-clock labels on simulated runs, and file names that never depend on the rest
of the results folder."""

from __future__ import annotations

import shutil

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer, ErrorbarContainer

from harness.report import FIGURE_DIR, build_report
from harness.report.build import WRITTEN
from tests.report_support import write_results_tree, write_run


@pytest.fixture
def drawn():
    """build_report with the figures kept open; closed after the test."""
    reports = []

    def build(root):
        report = build_report(root, out_dir=root, keep_figures=True)
        reports.append(report)
        return report

    yield build
    for report in reports:
        for fig in report.drawn.values():
            plt.close(fig)


def legend_texts(ax) -> list[str]:
    legend = ax.get_legend()
    return [] if legend is None else [t.get_text() for t in legend.get_texts()]


def whisker_lengths(ax) -> list[float]:
    """Vertical extent of every error-bar segment drawn in the axes."""
    out = []
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer) and c.has_yerr:
            for coll in c.lines[2]:
                out += [abs(seg[1][1] - seg[0][1]) for seg in coll.get_segments()]
    return out


def capacity_sweep(root, executor="real", hardware=None):
    """apc and radix at 1,024 and 4,096 KV tokens with 8 requests, and apc alone at the same two
    capacities with 200: two configurations that must never share a panel."""
    for requests, engines in ((8, ("apc", "radix")), (200, ("apc",))):
        for capacity in (1024, 4096):
            for engine in engines:
                write_run(
                    root,
                    f"cap/{requests}-{capacity}-{engine}",
                    engine=engine,
                    workload="system_prompt",
                    capacity=capacity,
                    hit_rate=0.5,
                    executor=executor,
                    hardware=hardware,
                    extra={"workload": {"name": "system_prompt", "max_requests": requests}},
                )


def test_capacity_panels_never_join_runs_of_different_configurations(tmp_path, drawn):
    capacity_sweep(tmp_path)
    report = drawn(tmp_path)
    fig = report.drawn["capacity_system_prompt_tiny_real"]
    assert len(fig.axes) == 4  # two rows (one per configuration) of hit rate + TTFT
    by_title = {ax.get_title(): ax for ax in fig.axes}
    eight = [t for t in by_title if "workload.max_requests=8" in t]
    many = [t for t in by_title if "workload.max_requests=200" in t]
    assert len(eight) == 2 and len(many) == 2
    for title in many:  # only apc ran with 200 requests: no radix line there
        texts = legend_texts(by_title[title])
        assert texts and all(t.startswith("apc") for t in texts), texts
    for title in eight:
        assert any(t.startswith("radix") for t in legend_texts(by_title[title]))
    assert "Capacity sweep: system_prompt (model tiny, executor real)" in fig._suptitle.get_text()


def test_trace_capacity_groups_the_same_way_and_says_the_clock_is_virtual(tmp_path, drawn):
    capacity_sweep(tmp_path, executor="simulated", hardware="h100_llama3_8b_bf16")
    report = drawn(tmp_path)
    fig = report.drawn["trace_capacity_system_prompt_h100_llama3_8b_bf16"]
    assert len(fig.axes) == 4
    ttft_axes = [ax for ax in fig.axes if ax.get_yscale() == "log"]
    assert len(ttft_axes) == 2
    assert all(ax.get_ylabel() == "TTFT (s, virtual clock)" for ax in ttft_axes)
    titles = " | ".join(ax.get_title() for ax in fig.axes)
    assert "workload.max_requests=8" in titles and "workload.max_requests=200" in titles


def test_no_bars_on_log_axes_and_intervals_from_three_runs_on(tmp_path, drawn):
    # latency_throughput with two seeds per arm (no interval) and ttft_cdf etc. from the tree.
    report = drawn(write_results_tree(tmp_path))
    log_axes = [
        (stem, ax)
        for stem, fig in report.drawn.items()
        for ax in fig.axes
        if ax.get_yscale() == "log"
    ]
    assert {stem for stem, _ in log_axes} >= {
        "latency_throughput_tiny_real",
        "speedup_tiny_real",
        "ttft_hit_miss_tiny_real",
        "capacity_system_prompt_tiny_real",
    }
    for stem, ax in log_axes:
        assert not any(isinstance(c, BarContainer) for c in ax.containers), stem
        assert not [p for p in ax.patches if p.get_width() > 0 and p.get_height() > 0], stem
    # Five seeds of the unique workload per arm: TTFT p50 points with whiskers (n >= 3).
    p50 = next(
        ax
        for ax in report.drawn["latency_throughput_tiny_real"].axes
        if ax.get_title().startswith("TTFT p50")
    )
    assert any(isinstance(c, ErrorbarContainer) for c in p50.containers)


def test_two_runs_get_points_not_an_interval(tmp_path, drawn):
    for seed, tput in ((0, 1000.0), (1, 3000.0)):
        write_run(tmp_path, f"s/{seed}", seed=seed, throughput=tput, ttfts_ms=(5.0, 10.0, 900.0))
    report = drawn(tmp_path)
    fig = report.drawn["latency_throughput_tiny_real"]
    tput = next(ax for ax in fig.axes if ax.get_title().startswith("throughput (tok/s"))
    assert whisker_lengths(tput) in ([], [0.0])  # no interval from two runs
    points = [c for c in tput.collections if isinstance(c, PathCollection)]
    assert sorted(np.asarray(points[0].get_offsets())[:, 1]) == [1000.0, 3000.0]
    # three runs: a 95% t-interval
    write_run(tmp_path, "s/2", seed=2, throughput=2000.0)
    fig = drawn(tmp_path).drawn["latency_throughput_tiny_real"]
    tput = next(ax for ax in fig.axes if ax.get_title().startswith("throughput (tok/s"))
    assert max(whisker_lengths(tput)) > 0


def test_engine_colours_are_the_same_in_every_figure(tmp_path, drawn):
    from harness.report.palette import ARM_COLOURS

    report = drawn(write_results_tree(tmp_path))
    seen: dict[str, set[str]] = {}
    for fig in report.drawn.values():
        for ax in fig.axes:
            handles, labels = ax.get_legend_handles_labels()
            for handle, label in zip(handles, labels):
                arm = label.split(" ")[0]
                if arm in ("apc", "radix") and hasattr(handle, "get_color"):
                    seen.setdefault(arm, set()).add(str(handle.get_color()))
    assert seen["apc"] == {ARM_COLOURS["apc"]} and seen["radix"] == {ARM_COLOURS["radix"]}


def test_adding_a_simulated_run_renames_no_figure(tmp_path):
    root = write_results_tree(tmp_path / "r")
    first = set(build_report(root, out_dir=root).figures)
    files = {p.name for p in (root / FIGURE_DIR).iterdir()}
    write_run(root, "sim/0", executor="simulated", hardware="h100_llama3_8b_bf16")
    second = set(build_report(root, out_dir=root).figures)
    assert first <= second and second - first  # new figures beside the old, none renamed
    assert files - {WRITTEN} <= {p.name for p in (root / FIGURE_DIR).iterdir()}
    new = second - first - {"projected_overhead"}  # a simulated 0%-hit run: its own figure
    assert all(s.endswith("_tiny_simulated_h100_llama3_8b_bf16") for s in new), new


def test_a_report_replaces_only_the_figures_it_wrote(tmp_path):
    root = write_results_tree(tmp_path / "r")
    folder = root / FIGURE_DIR
    build_report(root, out_dir=root)
    (folder / "claim1-zero_hit.png").write_bytes(b"not ours")
    assert (folder / "capacity_system_prompt_tiny_real.png").exists()
    shutil.rmtree(root / "cap")  # the capacity sweep is gone from the results
    report = build_report(root, out_dir=root)
    names = {p.name for p in folder.iterdir()}
    assert "capacity_system_prompt_tiny_real.png" not in names  # stale: removed
    assert "claim1-zero_hit.png" in names  # not the report's: kept
    listed = set((folder / WRITTEN).read_text().split())
    assert listed == {f"{s}.{x}" for s in report.figures for x in ("png", "svg")}
    assert names == listed | {WRITTEN, "claim1-zero_hit.png"}


def factorial_square(root, sweep, executor="real", hardware=None, hit=0.5, seeds=3):
    """The four scheduler x cache arms of the fewshot workload in one sweep folder."""
    for seed in range(seeds):
        for cache, scheduler in (
            ("apc", "vllm"),
            ("radix", "vllm"),
            ("apc", "sglang"),
            ("radix", "sglang"),
        ):
            cross = {"apc": "vllm", "radix": "sglang"}[cache] != scheduler
            write_run(
                root,
                f"{sweep}/{seed}-{cache}-{scheduler}",
                engine=cache,
                workload="fewshot",
                seed=seed,
                hit_rate=hit / 2 if cross else hit,
                executor=executor,
                hardware=hardware,
                extra={"engine": {"scheduler": scheduler}},
            )


def test_decomposition_keeps_arm_colours_and_never_joins_platforms_or_suites(tmp_path, drawn):
    from matplotlib.colors import to_hex

    from harness.report.palette import ARM_COLOURS, colour

    factorial_square(tmp_path, "fact", hit=0.5)
    factorial_square(tmp_path, "fact_sim", "simulated", "h100_llama3_8b_bf16", hit=0.8)
    for seed in range(3):  # another suite's apc runs (main, say): not part of the square
        write_run(tmp_path, f"main/{seed}-apc", workload="fewshot", seed=seed, hit_rate=0.1)
    report = drawn(tmp_path)
    table = report.decomposition[report.decomposition["metric"] == "hit_rate"]
    by_platform = table.set_index("executor")
    assert len(table) == 2  # one row per platform, never a mean of real and simulated runs
    assert by_platform.loc["real", "apc+vllm"] == pytest.approx(0.5)  # main's 0.1 left out
    assert by_platform.loc["real", "n_runs_per_arm"] == 3
    assert by_platform.loc["simulated", "apc+vllm"] == pytest.approx(0.8)
    assert by_platform.loc["simulated", "hardware"] == "h100_llama3_8b_bf16"
    fig = report.drawn["decomposition_tiny_simulated_h100_llama3_8b_bf16"]
    assert "hardware h100_llama3_8b_bf16" in fig._suptitle.get_text()
    arms, effects = {}, set()
    names = {"apc", "radix", "apc-sglang", "radix-vllm"}
    for ax in fig.axes:
        for drawn_ in ax.containers:
            name = drawn_.get_label()
            if isinstance(drawn_, BarContainer):
                shades = {to_hex(p.get_facecolor()) for p in drawn_.patches}
            elif isinstance(drawn_, ErrorbarContainer) and ax.get_yscale() == "log":
                shades = {to_hex(drawn_.lines[0].get_color())}
            else:
                continue
            if name.split(" ")[0] in names:  # `radix-vllm (page 1, fcfs)`; TTFT: points
                arms.setdefault(name.split(" ")[0], set()).update(shades)
            else:
                effects |= shades
    assert set(arms) == {"apc", "radix", "apc-sglang", "radix-vllm"}
    assert all(shades == {colour(arm)} for arm, shades in arms.items()), arms
    assert effects and not effects & {*ARM_COLOURS.values(), *(colour(a) for a in arms)}


def test_overhead_ratios_are_points_on_a_log_axis_with_intervals_from_three_pairs(tmp_path, drawn):
    # apc: five pairs (an interval); radix: two pairs (each pair a point, no whisker).
    for seed in range(5):
        for engine in ("apc", "radix") if seed < 2 else ("apc",):
            for cache, tput in ((True, 990.0 + 10 * seed), (False, 1000.0)):
                write_run(
                    tmp_path,
                    f"ov/{seed}-{engine}-{cache}",
                    engine=engine,
                    seed=seed,
                    cache=cache,
                    throughput=tput,
                )
    fig = drawn(tmp_path).drawn["overhead"]
    for ax in fig.axes:
        assert ax.get_yscale() == "log"
        assert not any(isinstance(c, BarContainer) for c in ax.containers)
        assert not [p for p in ax.patches if p.get_width() > 0 and p.get_height() > 0]
    tput = fig.axes[0]
    points = {
        c.get_label().split(" ")[0]: c for c in tput.containers if isinstance(c, ErrorbarContainer)
    }
    assert set(points) == {"apc", "radix"}
    apc_whisker = [s for coll in points["apc"].lines[2] for s in coll.get_segments()]
    assert apc_whisker and abs(apc_whisker[0][1][1] - apc_whisker[0][0][1]) > 0
    radix_whisker = [s for coll in points["radix"].lines[2] for s in coll.get_segments()]
    assert all(abs(s[1][1] - s[0][1]) == 0 for s in radix_whisker)
    pairs = [c for c in tput.collections if isinstance(c, PathCollection)]
    assert sorted(np.round(np.asarray(pairs[0].get_offsets())[:, 1], 3)) == [0.99, 1.0]


def test_log_axis_intervals_are_geometric_and_stay_above_zero(tmp_path, drawn):
    # TTFT p50 of 1, 10 and 1,000 ms over three seeds: an arithmetic t-interval would reach
    # below zero (clipped there, off a log axis); the log axis shows the geometric mean, 10^(4/3).
    for seed, ms in enumerate((1.0, 10.0, 1000.0)):
        write_run(tmp_path, f"s/{seed}", seed=seed, ttfts_ms=(ms / 2, ms, 2 * ms))
        for capacity in (1024, 4096):  # a capacity sweep: TTFT lines on a log axis too
            write_run(
                tmp_path,
                f"cap/{capacity}-{seed}",
                seed=seed,
                workload="system_prompt",
                capacity=capacity,
                ttfts_ms=(ms / 2, ms, 2 * ms),
            )
    report = drawn(tmp_path)
    p50 = next(
        ax
        for ax in report.drawn["latency_throughput_tiny_real"].axes
        if ax.get_title().startswith("TTFT p50")
    )
    (points,) = [c for c in p50.containers if isinstance(c, ErrorbarContainer)]
    assert points.lines[0].get_ydata()[0] == pytest.approx(10 ** (4 / 3))
    log_axes = [
        ax
        for stem in ("latency_throughput_tiny_real", "capacity_system_prompt_tiny_real")
        for ax in report.drawn[stem].axes
        if ax.get_yscale() == "log"
    ]
    assert len(log_axes) == 3
    for ax in log_axes:
        bottoms = [
            min(seg[0][1], seg[1][1])
            for c in ax.containers
            if isinstance(c, ErrorbarContainer) and c.has_yerr
            for coll in c.lines[2]
            for seg in coll.get_segments()
        ]
        assert bottoms and min(bottoms) > 0, ax.get_title()


def test_a_capacity_figure_draws_only_lines_that_span_capacities(tmp_path, drawn):
    # apc and radix swept over two capacities; radix-lpm at one capacity only, and apc at that
    # capacity under a Poisson load (another configuration, one capacity: no panel of its own).
    for capacity in (1024, 4096):
        for engine in ("apc", "radix"):
            write_run(
                tmp_path,
                f"cap/{capacity}-{engine}",
                engine=engine,
                capacity=capacity,
                workload="system_prompt",
            )
    write_run(
        tmp_path, "main/lpm", engine="radix", policy="lpm", capacity=4096, workload="system_prompt"
    )
    write_run(tmp_path, "rate/apc", capacity=4096, workload="system_prompt", rate=8.0)
    fig = drawn(tmp_path).drawn["capacity_system_prompt_tiny_real"]
    assert len(fig.axes) == 2  # one row: the Poisson run sets up no panel
    for ax in fig.axes:
        assert "\n" not in ax.get_title()  # nothing drawn to tell apart: no panel title
        texts = legend_texts(ax)
        assert texts and not [t for t in texts if t.startswith("radix-lpm")], texts
    # The footnote counts the four drawn runs, not the two left out.
    assert any("n = 4 runs" in t.get_text() for t in fig.texts), [t.get_text() for t in fig.texts]


def test_log_axes_carry_at_least_three_labelled_ticks_on_a_narrow_range():
    from harness.report.figstyle import PlainLogLocator

    for low, high in ((7_000.0, 13_500.0), (190.0, 1_300.0), (5.0, 200_000.0)):
        ticks = [t for t in PlainLogLocator().tick_values(low, high) if low <= t <= high]
        assert len(ticks) >= 3, (low, high, ticks)
    wide = [t for t in PlainLogLocator().tick_values(5.0, 200_000.0) if 5.0 <= t <= 200_000.0]
    assert wide[:4] == [5.0, 10.0, 20.0, 50.0]  # 1-2-5 where they suffice


def test_the_speedup_footnote_counts_the_paired_runs(tmp_path, drawn):
    for seed in range(2):
        for cache in (True, False):
            write_run(tmp_path, f"main/{seed}-{cache}", seed=seed, cache=cache)
    for capacity in (1024, 2048):  # cache on only, at other capacities: in no pair
        write_run(tmp_path, f"cap/{capacity}", capacity=capacity)
    fig = drawn(tmp_path).drawn["speedup_tiny_real"]
    notes = [t.get_text() for t in fig.texts]
    assert any("KV capacity 4,096 tokens | n = 4 runs (2 seeds)" in t for t in notes), notes
