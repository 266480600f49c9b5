"""`python -m harness.claims --quick`: every claim gets a computed verdict with numbers.

The quick run (a few minutes on a 2-core CPU) happens once per session, shared by the tests below
and the other files about the claims (the session fixture `quick_claims`, tests/quick_claims.py).
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

from harness.claims.__main__ import main
from harness.claims.record import FAILS, HOLDS
from harness.claims.registry import ordered
from harness.config.schema import register_configs
from tests.quick_claims import IN_PROCESS
from workloads.base import generate, params_from_mapping
from workloads.tokens import TokenSpace

register_configs()  # the schemas Hydra composes against

pytestmark = pytest.mark.slow  # the session's quick claims (tests/quick_claims.py): minutes of CPU

VERDICT = re.compile(rf"^({HOLDS}|{FAILS}|depends on .+|undecided: .+|not measurable here: .+)$")


def test_every_claim_has_a_computed_verdict(quick_claims):
    out, rows = quick_claims.out, quick_claims.rows
    assert [r.number for r in rows] == [n for n in range(1, 29) if n not in (1, 21)]
    for row in rows:
        assert VERDICT.match(row.verdict), (row.number, row.verdict)
        if not row.verdict.startswith("not measurable here"):
            assert re.search(r"\d", row.result), row  # numbers, not prose
            assert (out / row.figure).is_file()


def test_files_hold_the_table(quick_claims):
    out, rows = quick_claims.out, quick_claims.rows
    table = pd.read_csv(out / "claims.csv")
    assert list(table["verdict"]) == [r.verdict for r in rows]
    assert {
        "claim",
        "source",
        "setup",
        "measured",
        "result",
        "verdict",
        "figure",
        "threshold",
    } <= set(table.columns)
    md = (out / "claims.md").read_text()
    assert "python -m harness.claims" in md and "--quick" in md
    for claim in ordered():
        assert claim.threshold in md or claim.key not in IN_PROCESS


def test_exactness_claims_hold(quick_claims):
    """Reuse only at the start, whole blocks for apc, salts isolate, outputs unchanged: the caches
    are built to these, so any other verdict is a bug."""
    rows = quick_claims.rows
    verdicts = {r.number: r.verdict for r in rows}
    for number in (2, 5, 9, 15):
        assert verdicts[number] == HOLDS, (number, verdicts[number])
    # claim 7: wrong K/V never; near-tie flips in bfloat16 are counted, not a failure
    assert verdicts[7] != FAILS, verdicts[7]


def test_reset_claims_carry_their_control_arms(quick_claims):
    """The arms a review asked for are there: Poisson and page-16 tree arms with a KV-pressure arm
    (6), the burst as its own row (10), a head-first freeing control (8), the intra-tenant hit rate (9), and claim 4 declared not measurable."""
    rows = quick_claims.rows
    by = {r.number: r for r in rows}
    assert "radix16+sglang" in by[6].result and "req/s" in by[6].result
    pressure = re.findall(r"\((\d+) KV tokens, [\d.]+ req/s\).*?evictions (\d+)", by[6].result)
    assert pressure and any(int(ev) > 0 for _, ev in pressure)
    assert "apc+vllm lead" in by[10].result and "Poisson" not in by[10].setup
    assert "head-first" in by[8].result and "own history" in by[8].result
    assert "intra-tenant hit rate" in by[9].result
    assert by[4].verdict.startswith("not measurable here")
    assert "wrong K/V" in by[7].result and "bfloat16" in by[7].setup


def test_new_rows_measure_what_they_name(quick_claims):
    rows = quick_claims.rows
    by = {r.number: r for r in rows}
    assert "linked" in by[11].result and "deque" in by[11].result
    assert "radix (SGLang front stage) n=4" in by[12].result
    assert "radix p16" in by[13].result and "tokens evicted" in by[13].result
    assert all(p in by[14].result for p in ("fcfs", "lpm", "dfs-weight"))
    assert "of its ideal" in by[15].result and "its common header" in by[15].result
    assert "radix-lpm on / apc on" in by[16].result and "radix on / apc off" in by[16].result


def test_round_three_rows_and_resets(quick_claims):
    """The attacks of the third review are arms now, every verdict says what it rests on, and the
    article's untested claims are rows with their numbers."""
    rows = quick_claims.rows
    by = {r.number: r for r in rows}
    for row in rows:
        assert re.match(r"(\d+ runs|no harness runs)", row.evidence), (row.number, row.evidence)
    assert "is not alignment" in by[2].result  # parallel's SGLang prefix request, labelled apart
    assert "fewshot-mmlu h100-8b-c64" in by[3].result and "Condition:" in by[3].result
    assert "chat header" in by[5].result
    assert "detector check" in by[7].result and "off-by-one position" in by[7].result
    assert "Poisson" in by[8].setup and "lead (per seed)" in by[8].result
    assert "under vLLM's scheduler" in by[13].result and "3 seeds" in by[13].setup
    assert "= schedule" in by[16].result and "x tree" in by[16].result
    assert "mean TTFT (Poisson)" in by[17].result and "radix/apc gap" in by[17].result
    assert "log(TTFT gain / throughput gain)" in by[18].result and "real" in by[18].setup
    assert "apc burst" in by[18].result and "apc Poisson 4 req/s" in by[18].result  # both loads
    assert "probes reuse" in by[19].result and "Multimodal keys: claim 23" in by[19].result
    assert "multimodal" not in by[19].claim.lower()  # the verdict covers only LoRA
    assert by[23].verdict.startswith("not measurable here")
    # the article's sentence: duplicates eliminated when the request is freed; APC keeps them
    assert "when the request is freed" in by[20].claim and by[20].verdict == FAILS
    assert "duplicate tokens not eliminated" in by[20].result and "radix beside" in by[20].result
    assert "ideal at its granularity" in by[22].result
    assert "generated tokens reused at a later level" in by[22].result


def test_a_seeded_comparison_needs_three_seeds_and_a_clear_interval():
    from harness.claims.strength import ABOVE, BELOW, STRADDLES, interval, side

    assert side(interval([0.05, 0.05, 0.05]), 0.02) == ABOVE
    assert side(interval([0.0, 0.001, -0.001]), 0.02) == BELOW
    assert side(interval([0.024, 0.003, 0.017, 0.016]), 0.02) == STRADDLES
    assert side(interval([0.05]), 0.02) == STRADDLES  # one seed passing is never enough
    assert side(interval([0.05, 0.06]), 0.02) == STRADDLES


def test_injected_kv_faults_are_caught_and_no_fault_is_not():
    """Claim 7's detector: each realistic fault in the cached K/V (1% relative noise included)
    crosses the tolerance in every request it reached; caching off against itself (two chunk
    sizes) and caching on without a fault stay under it."""
    import torch

    from harness.claims.arms import APC
    from harness.claims.detection import FAULTS, complete, judge, matrix
    from harness.claims.outputs import DTYPE, REAL, WORKLOADS, tolerance

    found = matrix("tiny", (*REAL, *WORKLOADS["system_prompt"]), (APC,), (0,))
    rows = judge(found, tolerance(DTYPE, found["floor"]))
    assert rows[0]["reused"] > 0
    assert rows[0]["off vs itself flagged"] == 0 and rows[0]["on vs off flagged"] == 0
    for name in FAULTS:
        caught, served = rows[0][name].split("/")
        assert caught == served and int(served) > 0, (name, rows[0])
    assert complete(rows)
    # a tolerance above every fault's difference catches nothing: the matrix says incomplete
    assert not complete(judge(found, torch.full_like(found["floor"], 1e9)))
    # a tolerance below rounding flags caching off against itself chunked: incomplete too
    assert not complete(judge(found, torch.full_like(found["floor"], 1e-9)))


def test_rag_header_is_shared_and_counted():
    params = params_from_mapping(
        {
            "name": "rag",
            "family": "rag",
            "layout": "question_first",
            "header_len": 8,
            "num_prompts": 4,
            "num_docs": 4,
            "doc_len": 16,
            "docs_per_request": 2,
            "question_len": 8,
            "output_len": 2,
            "system_prompt_len": 8,
        }
    )
    reqs = generate(params, 0, TokenSpace(vocab_size=1000, first_ordinary_id=10))
    heads = {tuple(r.prompt_ids[:8]) for r in reqs}
    assert len(heads) == 1  # one header for all
    assert [r.shared_prefix_len for r in reqs] == [0, 8, 8, 8]


def test_adapters_separate_like_tenants():
    params = params_from_mapping(
        {
            "name": "system_prompt",
            "family": "system_prompt",
            "num_groups": 1,
            "prompts_per_group": 4,
            "system_prompt_len": 32,
            "question_len": 4,
            "output_len": 2,
            "num_adapters": 2,
        }
    )
    reqs = generate(params, 0, TokenSpace(vocab_size=1000, first_ordinary_id=10))
    assert [r.lora_id for r in reqs] == ["adapter0", "adapter1", "adapter0", "adapter1"]
    # the first request of each adapter shares nothing, the others share the system prompt
    assert [r.shared_prefix_len for r in reqs] == [0, 0, 32, 32]


def test_a_claims_run_is_made_once_per_invocation(tmp_path):
    """Claim 16 reads claim 3's arms: asking again returns the finished run, and asking for the
    same name with other overrides is refused."""
    from harness.claims.experiment import Context

    ctx = Context(tmp_path, quick=True)
    arm = ["model=tiny", "device=cpu", "executor=simulated", "hardware=h100_llama3_8b_bf16"]
    arm += ["workload=unique", "workload.num_prompts=2", "warmup.enabled=false"]
    first = ctx.run("x", "one", arm)
    assert ctx.run("x", "one", arm) is first
    assert [p.name for p in (tmp_path / "runs" / "x").iterdir()] == ["one"]
    with pytest.raises(RuntimeError, match="asked for twice with other overrides"):
        ctx.run("x", "one", [*arm, "seed=1"])


def test_unknown_claim_is_refused(capsys):
    assert main(["--only", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown claim 'nope'; valid: ")


def test_mixed_workload_keeps_each_part_in_order():
    space = TokenSpace(vocab_size=32000)
    params = params_from_mapping({"name": "mixed", "family": "mix"})
    params.shared.num_groups, params.shared.prompts_per_group = 2, 3
    requests = generate(params, 0, space)
    ids = [r.request_id for r in requests]
    chat = [i for i in ids if i.startswith("chat-")]
    assert len([i for i in ids if i.startswith("gsp-")]) == 6 and chat
    for r in requests:  # a turn comes after the turn it follows
        if r.after:
            assert ids.index(r.after) < ids.index(r.request_id)
    assert generate(params, 0, space) == requests  # seeded


def _projection(rows):
    cols = ["hardware", "engine", "share", "low", "high"]
    return pd.DataFrame(rows, columns=cols).assign(shape="prefill-heavy")


def test_overhead_verdict_sums_up_the_presets():
    from harness.claims.zero_hit import _verdict

    below = [("h100", "apc", 0.002, 0.001, 0.003), ("h100", "radix", 0.001, 0.0, 0.002)]
    straddles = [("h200", "apc", 0.009, -0.001, 0.02), ("h200", "radix", 0.001, 0.0, 0.002)]
    above = [("b200", "apc", 0.02, 0.015, 0.03), ("b200", "radix", 0.0, -0.01, 0.01)]
    assert _verdict(_projection(below)) == HOLDS
    assert _verdict(_projection(above)) == FAILS
    assert _verdict(_projection(straddles)).startswith("undecided: ")
    mixed = _verdict(_projection(below + straddles + above))
    assert mixed == (
        "depends on the preset and shape: holds on h100 prefill-heavy; undecided (interval "
        "straddles 1%) on h200 prefill-heavy; does not hold on b200 prefill-heavy"
    )
