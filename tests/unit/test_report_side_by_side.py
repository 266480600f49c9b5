"""A live vLLM run and a live SGLang run of one workload, beside the built-in apc and radix runs.

The launchers serve `llama-rand-smollm2`, a random-weight Llama of the `smollm2-rand` preset's
shape and tokenizer; a run with `server.model_preset=smollm2-rand` is on that preset's platform,
so the four arms share one figure set and one summary row each. Runs of other models stay apart.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from harness.config.errors import BadInput
from harness.live_server.config import ServerConfig
from harness.report import build_report
from harness.report.plots import arm_label
from tests.report_support import write_run, write_server_run

PRESET = "smollm2-rand"
HIT = {"hit_rate": 0.4, "ideal": 0.6, "belady": 0.55}


@pytest.fixture
def report(tmp_path):
    # each run in a folder of its own, as `python -m harness` writes them below results/
    write_server_run(tmp_path, "vllm/a", "50914c48", 8421, preset=PRESET)
    write_server_run(tmp_path, "vllm/b", "82245d50", 41733, preset=PRESET)
    write_server_run(
        tmp_path, "sglang/a", "0badcafe", 30000, flavour="sglang", block=1, capacity=65536,
        preset=PRESET,
    )  # fmt: skip
    for engine in ("apc", "radix"):
        write_run(
            tmp_path, f"builtin/{engine}", engine=engine, workload="multiturn",
            extra={"model": {"name": PRESET}}, **HIT,
        )  # fmt: skip
    write_run(tmp_path, "other/apc", engine="apc", workload="multiturn", **HIT)  # model tiny
    write_server_run(tmp_path, "legacy/a", "1234abcd", 8500)  # no preset: the served name's
    yield build_report(tmp_path, out_dir=tmp_path, keep_figures=True)
    plt.close("all")


ARMS = {"apc", "radix", "vllm-server", "sglang-server"}


def test_servers_and_builtin_runs_share_the_presets_figure_set(report):
    runs = report.runs
    on_preset = runs[runs["model"] == PRESET]
    assert set(on_preset["arm"]) == ARMS and len(on_preset) == 5
    hit = [s for s in report.figures if s.startswith("hit_rate")]
    assert sorted(hit) == [
        "hit_rate_llama-rand-smollm2_real",
        f"hit_rate_{PRESET}_real",
        "hit_rate_tiny_real",
    ]
    # the figure draws every arm: the servers' own pools are not dropped for the built-in one
    fig = report.drawn[f"hit_rate_{PRESET}_real"]
    legend = {t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().texts}
    assert {
        "apc (block 16, fcfs)",
        "radix (page 1, fcfs)",
        "vllm-server 0.32.0 (block 32, fcfs)",
        "sglang-server 0.5.23 (page 1, fcfs)",
    } <= legend


def test_one_summary_row_per_run_side_by_side(report):
    rows = report.summary[report.summary["model"] == PRESET]
    assert sorted(rows["arm"]) == ["apc", "radix", "sglang-server", "vllm-server", "vllm-server"]
    servers = rows[rows["arm"].str.endswith("-server")].set_index("kv_capacity_tokens")
    assert servers["granularity"].to_dict() == {1048544: 32, 65536: 1}


def test_the_legend_tells_each_arms_real_granularity(report):
    runs = report.runs[report.runs["model"] == PRESET]
    assert arm_label(runs, "vllm-server") == "vllm-server 0.32.0 (block 32, fcfs)"
    assert arm_label(runs, "sglang-server") == "sglang-server 0.5.23 (page 1, fcfs)"
    assert arm_label(runs, "apc") == "apc (block 16, fcfs)"
    assert set(runs["series"]) == ARMS  # no server.* keys appended to any arm


def test_unrelated_models_stay_apart(report):
    runs = report.runs
    assert set(runs.loc[runs["model"] == "tiny", "arm"]) == {"apc"}
    legacy = runs[runs["model"] == "llama-rand-smollm2"]
    assert len(legacy) == 1 and legacy["arm"].iloc[0] == "vllm-server"


@pytest.mark.parametrize(
    ("preset", "tokenizer", "says"),
    [
        ("nope", "smollm2-135m", "unknown preset 'nope'; valid: s, smollm2-135m"),
        ("s", "smollm2-135m", "preset 's' takes bare token ids"),
        ("smollm2-rand", "other", "takes the smollm2-135m tokenizer, not the server's (other)"),
    ],
)
def test_a_preset_the_served_model_cannot_be_is_refused(preset, tokenizer, says):
    with pytest.raises(BadInput, match="server.model_preset") as err:
        ServerConfig(model_preset=preset, tokenizer=tokenizer).validate()
    assert says in str(err.value)
    ServerConfig(model_preset="smollm2-rand").validate()  # the launchers' model: accepted
