"""Claim 7: a prefix cache never changes the model's outputs.

A real model in bfloat16 with 64 greedy output tokens, caching on against caching off, both
designs, on workloads that reuse. Two different things can make outputs differ, and the rule keeps
them apart: the cache returning wrong K/V (first-token logits off by more than the dtype's
rounding can explain: must never happen), and a different rounding path (the suffix prefilled
over cached K/V instead of the whole prompt at once) flipping a near-tie in greedy argmax later
on (expected in low precision, counted). The runs use the pipeline's own prepare and measure,
with the real executor keeping each request's first-token logits.
"""

from __future__ import annotations

import math

from harness.claims.arms import APC, ARMS, RADIX
from harness.claims.detection import (
    FAULTS,
    SECOND_CHUNK,
    complete,
    floor_of,
    judge,
    matrix,
    max_diff,
    run_logits,
)
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends, undecided

OUTPUT_LEN = 64
DTYPE = "bfloat16"
EPS = {"float32": 2.0**-23, "bfloat16": 2.0**-7, "float16": 2.0**-10}  # machine epsilon
# The tolerance: MARGIN x the rounding floor, the largest first-token logit difference between a
# caching-off run and the same run with its prefills chunked (harness/claims/detection.py), over
# every workload, design and seed run. A chunked prompt's tail is computed over K/V an earlier
# forward wrote, the numerical path of a cache hit, with no cache involved; so the floor is what a
# different rounding path alone moves the logits by.
MARGIN = 1.0  # the tolerance is the largest off-against-itself difference seen
# Two requests at a time: batches mix prefill and decode, and radix's scheduler still finds
# content cached by the previous batch (in one burst it would admit everything before caching).
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


def tolerance(dtype: str, floor: float, scale: float) -> float:
    """The largest first-token logit difference a different rounding path explains: MARGIN x
    the measured rounding floor, and at least one spacing of `dtype` at the logits' scale (the
    largest |logit|), below which two roundings cannot be told apart."""
    spacing = EPS[dtype] * 2.0 ** math.floor(math.log2(max(1.0, scale)))
    return MARGIN * max(floor, spacing)


def measure(ctx: Context) -> Finding:
    model = ctx.size("tiny", "smollm2-135m")
    names = ctx.size(("system_prompt",), tuple(WORKLOADS))
    rows = [_compare(model, w, d, ctx) for w in names for d in (APC, RADIX)]
    seeds = ctx.size((0, 1), (0, 1, 2))
    found = matrix(model, (*REAL, *WORKLOADS["system_prompt"]), (APC, RADIX), seeds, ctx)
    floor = max(found["floor"], *(r["floor"] for r in rows))
    scale = max(*(c["scale"] for c in found["cells"]), *(r["scale"] for r in rows))
    tol = tolerance(DTYPE, floor, scale)
    detection = judge(found, tol)
    for r in rows:
        r["tolerance"] = tol
        r["wrong_kv"] = sum(d > tol for d in r["diffs"])
        r["max_logit_diff"] = max(r["diffs"], default=0.0)
    wrong = sum(r["wrong_kv"] for r in rows)
    flips = sum(r["differing"] for r in rows)
    if not complete(detection):
        verdict = undecided(
            "the tolerance misses an injected K/V fault or flags caching off against itself "
            "(the detection matrix), so 'no wrong K/V' would not be shown"
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
            f"{r['wrong_kv']} wrong K/V, max first-token logit diff {r['max_logit_diff']:.3g} (rounding "
            f"floor {r['floor']:.3g}), {r['cached_tokens']} cached tokens"
            for r in rows
        )
        + f"; tolerance {tol:.3g} ({MARGIN:g} x the largest rounding floor {floor:.3g}); detector check: "
        + _describe_detector(detection, tol)
    )
    return Finding(
        setup=f"real {model} in {DTYPE} on this CPU, greedy decoding, {OUTPUT_LEN} output tokens, burst, two "
        f"requests running at a time; small {', '.join(names)} workloads; seed 0 (the workloads' tokens, "
        "and the injected faults' noise, drawn from it)",
        measured="first-token logits and generated token ids per request, caching on against off, per design",
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
        details=[{k: v for k, v in r.items() if k != "diffs"} for r in rows] + detection,
    )


def _describe_detector(detection: list[dict], tol: float) -> str:
    """The detection matrix in one line: flagged / reusing per fault, summed over designs and
    seeds, with the smallest fault difference against the tolerance."""
    parts = []
    for name in FAULTS:
        caught = sum(int(r[name].split("/")[0]) for r in detection)
        reusing = sum(int(r[name].split("/")[1]) for r in detection)
        smallest = min(r[f"{name} min diff"] for r in detection)
        parts.append(f"{name} {caught}/{reusing} (smallest diff {smallest:.3g})")
    false = sum(r["off vs itself flagged"] for r in detection)
    cells = ", ".join(f"{r['design']} seed {r['seed']}" for r in detection)
    verdict = "every fault caught in every reusing request" if complete(detection) else "incomplete"
    return (
        f"cached prefixes' K/V faulted ({cells}), requests flagged / served faulted K/V (same-step hits "
        f"cannot be) at tolerance {tol:.3g}: "
        f"{'; '.join(parts)}; caching off against itself (prefills chunked at {SECOND_CHUNK}) "
        f"flagged {false}; {verdict}"
    )


CLAIM = Claim(
    7,
    "outputs",
    "A prefix cache never changes the model's outputs.",
    "vLLM and SGLang documentation (prefix caching is an exact optimisation)",
    "Real model in bfloat16, greedy, 64 output tokens, caching on vs off, both designs. Wrong K/V: a "
    "request whose first-token logits differ by more than the tolerance, the largest rounding floor seen "
    "(first-token logit difference between a caching-off run and the same run with prefills chunked at 32 "
    "or 48 tokens: a prompt's tail computed over K/V an earlier forward wrote, a cache hit's rounding path "
    "without a cache; over every workload, design and seed run), and at least one bfloat16 spacing at the "
    "logits' scale, must never happen. The tolerance is validated by a detection matrix before it decides: "
    "cached prefixes served an off-by-one position's K/V, a stale block (another request's K/V), 1% and 10% "
    "relative noise, at several seeds and both designs (a seed where a design reuses nothing rerun at the "
    "next), each must be flagged in every reusing request, while caching off against itself is never flagged "
    "(by construction on the paths sampled). Holds when no request has wrong K/V, every output is "
    "identical and the cached runs reused tokens; does not hold on any wrong K/V; depends on the numerics "
    "when outputs differ only through near-tie flips (first-token logits within the tolerance), which are "
    "counted; undecided when a cached run reused nothing or the detection matrix is incomplete.",
    measure,
)


def _compare(model: str, workload: str, design: str, ctx: Context | None = None) -> dict:
    base = (*REAL, *WORKLOADS[workload])
    calib = floor_of(model, (*base, *ARMS[f"{design}-off"]), ctx, seed=0)
    off, off_logits = calib["off"], calib["logits"]
    on, on_logits, _ = run_logits(model, (*base, *ARMS[design]), ctx=ctx)
    differ = sorted(rid for rid in off if on[rid].output_ids != off[rid].output_ids)
    return {
        "workload": workload,
        "design": design,
        "requests": len(off),
        "differing": len(differ),
        "first_differing": differ[:3],
        "diffs": max_diff(on_logits, off_logits, off_logits),
        "floor": calib["floor"],
        "scale": calib["scale"],
        "cached_tokens": sum(r.cached_tokens for r in on.values()),
    }
