"""Claim 7: a prefix cache never changes the model's outputs.

A real model in bfloat16 with 64 greedy output tokens, caching on against caching off, both
designs, on workloads that reuse. Two different things can make outputs differ, and the rule keeps
them apart: the cache serving wrong K/V (a reused prefix's K/V off the K/V a fresh prefill computes
for those positions by more than the dtype's rounding can explain: must never happen), and a
different rounding path (the suffix prefilled over cached K/V instead of the whole prompt at once)
flipping a near-tie in greedy argmax later on (expected in low precision, counted). The runs use the
pipeline's own prepare and measure, with the real executor's K/V read back (harness/claims/kv_tap.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.claims.arms import APC, ARMS, RADIX
from harness.claims.detection import (
    FAULTS,
    SECOND_CHUNK,
    complete,
    floor_of,
    judge,
    matrix,
    max_diff,
    run_kv,
)
from harness.claims.experiment import Context
from harness.claims.kv_tap import BLOCK, envelope, kv_diffs, score
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends, undecided

if TYPE_CHECKING:
    import torch

OUTPUT_LEN = 64
DTYPE = "bfloat16"
ROUNDOFF = {"float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11}  # unit roundoff
# The tolerance on the served K/V's relative difference, per layer, K and V: MARGIN x the rounding
# floor, that layer's largest relative K/V difference between a caching-off run and the same run
# with its prefills chunked (harness/claims/detection.py), over every workload, design and seed run.
# A chunked prompt's tail is computed over K/V an earlier forward wrote, the numerical path of a
# cache hit, with no cache involved; so the floor is what a different rounding path alone moves
# the K/V by. It grows with depth (0 at layer 0 on this CPU), hence per layer.
MARGIN = 2.0
REAL = (
    "decode=greedy",
    "executor=real",
    f"model.dtype={DTYPE}",
    "engine.kv_capacity_tokens=8192",
    "engine.max_num_seqs=2",
)
WORKLOADS = {
    "system_prompt": (
        "workload=system_prompt",
        "workload.num_groups=2",
        "workload.prompts_per_group=2",
        "workload.system_prompt_len=72",
        "workload.question_len=12",
        f"workload.output_len={OUTPUT_LEN}",
    ),
    "multiturn": (
        "workload=multiturn",
        "workload.num_users=2",
        "workload.num_rounds=2",
        "workload.system_prompt_len=40",
        "workload.user_history_len=24",
        "workload.question_len=12",
        f"workload.answer_len={OUTPUT_LEN}",
    ),
    "parallel": (
        "workload=parallel",
        "workload.n=2",
        "workload.num_prompts=2",
        "workload.prompt_len=50",
        f"workload.output_len={OUTPUT_LEN}",
    ),
}


def tolerance(dtype: str, floor: torch.Tensor) -> torch.Tensor:
    """Per layer, K and V: the largest relative K/V difference a different rounding path
    explains, MARGIN x the measured rounding floor, and at least `dtype`'s unit roundoff (every
    element rounded once more, below which two roundings cannot be told apart)."""
    return (MARGIN * floor).clamp_min(ROUNDOFF[dtype])


def measure(ctx: Context) -> Finding:
    model = ctx.size("tiny", "smollm2-135m")
    names = ctx.size(("system_prompt",), tuple(WORKLOADS))
    rows = [_compare(model, w, d, ctx) for w in names for d in (APC, RADIX)]
    seeds = ctx.size((0, 1), (0, 1, 2))
    found = matrix(model, (*REAL, *WORKLOADS["system_prompt"]), (APC, RADIX), seeds, ctx)
    floor = envelope([found["floor"], *(r["floor"] for r in rows)])
    assert floor is not None  # the matrix has cells
    tol = tolerance(DTYPE, floor)
    detection = judge(found, tol)
    for r in rows:
        scores = [score(d, tol) for d in r["kv_diffs"]]
        r["wrong_kv"] = sum(x > 1 for x in scores)
        r["max_kv_score"] = max(scores, default=0.0)
        r["max_kv_diff"] = max((float(d.max()) for d in r["kv_diffs"]), default=0.0)
        r["floor"] = float(r["floor"].max())
        r["max_logit_diff"] = max(r["logit_diffs"], default=0.0)
    wrong = sum(r["wrong_kv"] for r in rows)
    flips = sum(r["differing"] for r in rows)
    if not complete(detection):
        verdict = undecided(
            "the tolerance misses an injected K/V fault or flags a correct run (the detection "
            "matrix), so 'no wrong K/V' would not be shown"
        )
    elif wrong:
        verdict = FAILS
    elif not all(r["cached_tokens"] > 0 for r in rows):
        verdict = undecided("a cached run reused nothing, so it tested nothing")
    elif flips:
        verdict = depends(
            f"the numerics: no wrong K/V, but {flips} greedy outputs flip at near-ties ({DTYPE})"
        )
    else:
        verdict = HOLDS
    result = (
        "; ".join(
            f"{r['workload']}/{r['design']}: {r['requests'] - r['differing']}/{r['requests']} identical, "
            f"{r['wrong_kv']} wrong K/V (largest served-K/V difference {r['max_kv_diff']:.3g}, "
            f"{r['max_kv_score']:.3g} x its layer's tolerance; largest rounding floor {r['floor']:.3g}), max first-token logit diff {r['max_logit_diff']:.3g} (its rounding "
            f"floor {r['logit_floor']:.3g}), {r['cached_tokens']} cached tokens"
            for r in rows
        )
        + f"; tolerance per layer, K and V: {MARGIN:g} x that layer's rounding floor, at least "
        f"{DTYPE}'s unit roundoff {ROUNDOFF[DTYPE]:.3g} ({float(tol[0].max()):.3g} at layer 0, up to "
        f"{float(tol.max()):.3g}; floors {float(floor[0].max()):.3g} at layer 0, up to "
        f"{float(floor.max()):.3g}); detector check: " + _describe_detector(detection)
    )
    return Finding(
        setup=f"real {model} in {DTYPE} on this CPU, greedy decoding, {OUTPUT_LEN} output tokens, burst, two "
        f"requests running at a time; small {', '.join(names)} workloads at seed 0; the detection matrix on "
        f"system_prompt at seeds {', '.join(str(s) for s in seeds)} (a seed where a design reuses nothing "
        "rerun at the next; the workloads' tokens and the injected noise drawn from the seed)",
        measured="the K/V each request is served for its cached prefix against the K/V a caching-off run "
        f"computes for those positions (relative, per {BLOCK} positions, layer, K or V), first-token logits "
        "and generated token ids per request, caching on against off, per design",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Requests with identical greedy outputs, caching on vs off",
            "identical (%)",
            {
                w: {
                    r["design"]: 100 * (1 - r["differing"] / r["requests"])
                    for r in rows
                    if r["workload"] == w
                }
                for w in names
            },
            reference=100.0,
        ),
        details=[{k: v for k, v in r.items() if k not in ("kv_diffs", "logit_diffs")} for r in rows]
        + detection,
    )


def _describe_detector(detection: list[dict]) -> str:
    """The detection matrix in one line: per design and seed, requests flagged / served each
    fault; then the smallest fault score and the false positives (scores: a request's largest
    layer difference over that layer's tolerance, flagged above 1)."""
    cells = "; ".join(
        f"{r['design']} seed {r['seed']}: " + ", ".join(f"{r[name]}" for name in FAULTS)
        for r in detection
    )
    smallest = ", ".join(
        f"{name} {min(r[f'{name} min score'] for r in detection):.3g}" for name in FAULTS
    )
    self_flagged = sum(r["off vs itself flagged"] for r in detection)
    on_flagged = sum(r["on vs off flagged"] for r in detection)
    clean = max(max(r["on vs off max score"], r["off vs itself max score"]) for r in detection)
    verdict = "every fault caught in every reusing request" if complete(detection) else "incomplete"
    return (
        f"cached prefixes' K/V faulted, requests flagged / served faulted K/V (same-step hits cannot "
        f"be), in the order {', '.join(FAULTS)}: {cells}; smallest fault score (x the tolerance): "
        f"{smallest}; caching off against itself (prefills chunked at {SECOND_CHUNK}) flagged "
        f"{self_flagged}, caching on without a fault against off flagged {on_flagged}, largest "
        f"correct-run score {clean:.3g}; {verdict}"
    )


CLAIM = Claim(
    7,
    "outputs",
    "A prefix cache never changes the model's outputs.",
    "vLLM and SGLang documentation (prefix caching is an exact optimisation)",
    "Real model in bfloat16, greedy, 64 output tokens, caching on vs off, both designs. Wrong K/V: a "
    "request served K/V for its cached prefix that differs from the K/V a caching-off run computes for "
    f"those positions (relative Frobenius difference per {BLOCK} positions) by more than the tolerance in "
    "any layer, K or V, must never happen. The tolerance is per layer, K and V: 2 x that layer's largest "
    "rounding floor seen (the same difference between a caching-off run and the same run with prefills "
    "chunked at 32 or 48 tokens: a prompt's tail computed over K/V an earlier forward wrote, a cache "
    "hit's rounding path without a cache; over every workload, design and seed run), and at least "
    "bfloat16's unit roundoff. It is validated by a detection matrix before it decides: cached prefixes "
    "served an off-by-one position's K/V, a stale block (another request's K/V), 1% and 10% relative "
    "noise, at three seeds (two in a quick run) and both designs (a seed where a design reuses nothing "
    "rerun at the next), each must be flagged in every request it reached, while caching off against "
    "itself and caching on without a fault against off are never flagged. Holds when no request has "
    "wrong K/V, every output is identical and the cached runs reused tokens; does not hold on any wrong "
    "K/V; depends on the numerics when outputs differ only through near-tie flips (served K/V within the "
    "tolerance; first-token logit differences shown), which are counted; undecided when a cached run "
    "reused nothing or the detection matrix is incomplete.",
    measure,
)


def _compare(model: str, workload: str, design: str, ctx: Context | None = None) -> dict:
    base = (*REAL, *WORKLOADS[workload])
    calib = floor_of(model, (*base, *ARMS[f"{design}-off"]), ctx, seed=0)
    off = calib["off"]
    on = run_kv(model, (*base, *ARMS[design]), ctx=ctx)
    differ = sorted(
        rid for rid in off.records if on.records[rid].output_ids != off.records[rid].output_ids
    )
    return {
        "workload": workload,
        "design": design,
        "requests": len(off.records),
        "differing": len(differ),
        "first_differing": differ[:3],
        "kv_diffs": kv_diffs(on.served, off.fresh, on.served),
        "logit_diffs": max_diff(on.logits, off.logits, off.logits),
        "floor": calib["floor"],
        "logit_floor": calib["logit_floor"],
        "cached_tokens": sum(r.cached_tokens for r in on.records.values()),
    }
