"""Issue 48: the report's printed lines and footnotes count in words a reader can take as written:
"1 pair", "1 seed", and a 0%-hit on/off ratio from too few pairs says it is no measurement (one
smoke pair printed "0.6236 (unique, tiny, 1 pairs)" with no caveat)."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot

matplotlib.use("Agg")

from harness.metrics.format import counted  # noqa: E402
from harness.report import build_report, describe  # noqa: E402
from harness.report.stats import MIN_INTERVAL_N  # noqa: E402
from tests.report_support import write_run  # noqa: E402


def pairs(root, n: int):
    for seed in range(n):
        write_run(root, f"ov/{seed}-apc", engine="apc", seed=seed, throughput=900.0 + seed)
        write_run(
            root, f"ov/{seed}-off", engine="apc", seed=seed, cache=False, throughput=1000.0 + seed
        )
    return root


def ratio_line(text: str) -> str:
    (line,) = [x for x in text.splitlines() if x.startswith("0%-hit throughput ratio")]
    return line


def test_counted_takes_the_singular_for_one():
    assert [counted(n, "seed") for n in (0, 1, 2)] == ["0 seeds", "1 seed", "2 seeds"]


def test_one_smoke_pair_is_printed_with_its_caveat(tmp_path):
    line = ratio_line(describe(build_report(pairs(tmp_path, 1))))
    assert "(unique, tiny, 1 pair)" in line and "1 pairs" not in line, line
    assert "too few pairs to read as an overhead" in line and "+suite=overhead" in line, line


def test_enough_pairs_print_the_interval_and_no_caveat(tmp_path):
    line = ratio_line(describe(build_report(pairs(tmp_path, MIN_INTERVAL_N))))
    assert f"{MIN_INTERVAL_N} pairs)" in line and "95% CI" in line, line
    assert "too few" not in line, line


def test_a_footnote_of_one_seed_says_seed(tmp_path):
    report = build_report(pairs(tmp_path / "r", 1), out_dir=tmp_path / "out")
    svg = (tmp_path / "out" / "figures" / "overhead.svg").read_text()
    assert "overhead" in report.figures
    assert "(1 seed)" in svg and "1 seeds" not in svg


def fleet_run(root, name: str, executor: str, hardware: str | None):
    fleet = {"fleet": {"replicas": 2, "router": "round_robin"}}
    return write_run(root, name, executor=executor, hardware=hardware, extra=fleet)


def fleet_ttft_label(tmp_path, executor: str, hardware: str | None) -> str:
    fleet_run(tmp_path / "r", "f/0", executor, hardware)
    report = build_report(tmp_path / "r", out_dir=tmp_path / "out", keep_figures=True)
    (stem,) = [s for s in report.figures if s.startswith("fleet")]
    try:
        return report.drawn[stem].axes[1].get_ylabel()
    finally:
        for fig in report.drawn.values():
            matplotlib.pyplot.close(fig)


def test_a_simulated_fleets_ttft_axis_is_on_the_virtual_clock(tmp_path):
    assert fleet_ttft_label(tmp_path, "simulated", "h100_llama3_8b_bf16") == (
        "p90 TTFT (ms, virtual clock)"
    )


def test_a_real_fleets_ttft_axis_is_in_ms(tmp_path):
    assert fleet_ttft_label(tmp_path, "real", None) == "p90 TTFT (ms)"
