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
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends, undecided
from harness.run.compose import compose
from harness.run.engine_target import ENGINE, engine_of
from harness.run.pipeline import measure as measure_run
from harness.run.pipeline import prepare

FOLDER = "7-outputs"
OUTPUT_LEN = 64
DTYPE = "bfloat16"
EPS = {"float32": 2.0**-23, "bfloat16": 2.0**-7, "float16": 2.0**-10}  # machine epsilon
# The tolerance: MARGIN x the rounding floor, the largest first-token logit difference between a
# caching-off run and the same run with its prefills chunked at CHUNK tokens. A chunked prompt's
# tail is computed over K/V an earlier forward wrote, the numerical path of a cache hit, with no
# cache involved; so the floor is what a different rounding path alone moves the logits by.
MARGIN = 3.0
CHUNK = 32
# Relative K/V perturbations injected into cached prefixes to validate the detector (fault.py)
FAULT_SCALES = (0.001, 0.01, 0.03, 0.1, 0.3, 1.0)
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
    check = detector(model, ctx=ctx)
    wrong = sum(r["wrong_kv"] for r in rows)
    flips = sum(r["differing"] for r in rows)
    if check["smallest_caught"] is None:
        verdict = undecided("the tolerance missed every injected K/V fault, so it detects nothing")
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
            f"floor {r['floor']:.3g}, tolerance {r['tolerance']:.3g}), {r['cached_tokens']} cached tokens"
            for r in rows
        )
        + "; detector check: "
        + _describe_detector(check)
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
        details=[*rows, check],
    )


def _describe_detector(check: dict) -> str:
    steps = ", ".join(
        f"{r['fault']:g}: {r['caught']}/{r['reused']} (max diff {r['max_logit_diff']:.3g})"
        for r in check["ladder"]
    )
    smallest = check["smallest_caught"]
    found = f"smallest caught in every reusing request {smallest:g}" if smallest else "none caught"
    return (
        f"cached prefixes' K/V perturbed by a relative scale ({check['design']}, "
        f"{check['workload']}; floor {check['floor']:.3g}, tolerance {check['tolerance']:.3g}), requests "
        "flagged / reusing: "
        f"{steps}; {found}"
    )


CLAIM = Claim(
    7,
    "outputs",
    "A prefix cache never changes the model's outputs.",
    "vLLM and SGLang documentation (prefix caching is an exact optimisation)",
    "Real model in bfloat16, greedy, 64 output tokens, caching on vs off, both designs. Wrong K/V: a "
    "request whose first-token logits differ by more than 3 x the rounding floor (the largest first-token "
    "logit difference between the caching-off run and the same run with prefills chunked at 32 tokens: a "
    "prompt's tail computed over K/V an earlier forward wrote, a cache hit's rounding path without a cache), "
    "and at least 3 bfloat16 spacings at the logits' scale, must never happen. Holds when no request has "
    "wrong K/V, every output is identical and the cached runs reused tokens; does not hold on any wrong K/V; "
    "depends on the numerics when outputs differ only through near-tie flips (first-token logits within "
    "the tolerance), which are counted; undecided when a cached run reused nothing or when the "
    "tolerance misses every injected fault (cached prefixes' K/V perturbed by relative scales 0.001-1; "
    "the smallest caught is reported).",
    measure,
)


def _run(
    model: str,
    overrides: tuple[str, ...],
    fault: float | None = None,
    ctx: Context | None = None,
):
    """(records by id, first-token logits by id, layers) of one run through the pipeline; with
    `fault`, cached prefixes' K/V are perturbed by that relative scale (harness/claims/fault.py).
    `ctx` counts the run in the claim's evidence."""
    from engines.real_executor import RealExecutor  # imports torch: only when claim 7 runs
    from harness.claims.fault import CachedKVFault

    composed = compose([f"model={model}", *overrides], job_name="claims")
    prepared = prepare(composed.cfg, ENGINE)
    executor = engine_of(prepared).executor
    if not isinstance(executor, RealExecutor):
        raise RuntimeError(f"claim 7 needs the real executor, got {type(executor).__name__}")
    executor.first_logits = {}
    if fault is not None:
        CachedKVFault(executor, fault)
    measured = measure_run(composed.cfg, prepared)
    if measured.status != "ok":
        raise RuntimeError(f"claims run ({' '.join(overrides)}): {measured.error}")
    if ctx is not None:
        ctx.note(f"{FOLDER}/{' '.join(overrides)} fault={fault}", composed.cfg.seed)
    records = {r.request_id: r for r in measured.items}
    logits = executor.first_logits
    return records, logits, composed.cfg.model.num_layers


def calibrate(
    model: str, workload: str, design: str, ctx: Context | None = None
) -> tuple[dict, dict, float, float]:
    """(records, first-token logits) of the caching-off run, its rounding floor and the
    tolerance: the off run against itself with prefills chunked at CHUNK tokens."""
    arm = (*REAL, *WORKLOADS[workload], *ARMS[f"{design}-off"])
    off, off_logits, _ = _run(model, arm, ctx=ctx)
    _, chunked_logits, _ = _run(model, (*arm, f"engine.max_num_batched_tokens={CHUNK}"), ctx=ctx)
    floor = max(
        (
            float((chunked_logits[r] - off_logits[r]).abs().max())
            for r in off_logits
            if r in chunked_logits
        ),
        default=0.0,
    )
    scale = max(float(t.abs().max()) for t in off_logits.values())
    return off, off_logits, floor, tolerance(DTYPE, floor, scale)


def detector(
    model: str, design: str = APC, workload: str = "system_prompt", ctx: Context | None = None
) -> dict:
    """The smallest injected fault the tolerance catches: for each relative K/V perturbation of
    the cached prefixes (FAULT_SCALES), how many requests that reused a prefix are flagged."""
    _, off_logits, floor, tol = calibrate(model, workload, design, ctx)
    ladder = []
    for fault in FAULT_SCALES:
        on, on_logits, _ = _run(model, (*REAL, *WORKLOADS[workload], *ARMS[design]), fault, ctx)
        hit = [rid for rid, r in on.items() if r.cached_tokens > 0 and rid in on_logits]
        diffs = [float((on_logits[rid] - off_logits[rid]).abs().max()) for rid in hit]
        ladder.append(
            {
                "fault": fault,
                "reused": len(hit),
                "caught": sum(d > tol for d in diffs),
                "max_logit_diff": max(diffs, default=0.0),
            }
        )
    caught_all = [r["fault"] for r in ladder if r["reused"] and r["caught"] == r["reused"]]
    return {
        "design": design,
        "workload": workload,
        "floor": floor,
        "tolerance": tol,
        "ladder": ladder,
        "smallest_caught": min(caught_all, default=None),
    }


def _compare(model: str, workload: str, design: str, ctx: Context | None = None) -> dict:
    off, off_logits, floor, tol = calibrate(model, workload, design, ctx)
    on, on_logits, _ = _run(model, (*REAL, *WORKLOADS[workload], *ARMS[design]), ctx=ctx)
    diffs = {
        rid: float((on_logits[rid] - off_logits[rid]).abs().max())
        for rid in off_logits
        if rid in on_logits
    }
    differ = sorted(rid for rid in off if on[rid].output_ids != off[rid].output_ids)
    return {
        "workload": workload,
        "design": design,
        "requests": len(off),
        "differing": len(differ),
        "first_differing": differ[:3],
        "wrong_kv": sum(d > tol for d in diffs.values()),
        "max_logit_diff": max(diffs.values(), default=0.0),
        "floor": floor,
        "tolerance": tol,
        "cached_tokens": sum(r.cached_tokens for r in on.values()),
    }
