"""Claim 20: duplicate full blocks coexist in APC until they are evicted; radix frees them.

n = 4 samples of each prompt that all replay one reply (what greedy decoding gives), in one burst:
the samples fill identical output blocks side by side. After the run (nothing evicted, nothing
running) the cache holds, per design, its cached tokens; the distinct content is the prompt plus
the reply's computed tokens, once per prompt (full blocks only for APC). Anything above it is a
duplicate kept.
"""

from __future__ import annotations

from harness.claims.arms import APC, ARMS, RADIX
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, undecided
from harness.run.compose import compose
from harness.run.engine_target import ENGINE, engine_of
from harness.run.pipeline import measure as measure_run
from harness.run.pipeline import prepare

FOLDER = "20-duplicates"
DESIGNS = (APC, RADIX)
PROMPT_LEN, OUTPUT_LEN, N, BLOCK = 200, 64, 4, 16


def measure(ctx: Context) -> Finding:
    prompts = ctx.size(4, 16)
    over = (
        "executor=simulated",
        "hardware=h100_llama3_8b_bf16",
        "engine.kv_capacity_tokens=426784",
        "workload=parallel",
        f"workload.num_prompts={prompts}",
        f"workload.n={N}",
        f"workload.prompt_len={PROMPT_LEN}",
        f"workload.output_len={OUTPUT_LEN}",
        "workload.identical_samples=true",
    )
    computed = PROMPT_LEN + OUTPUT_LEN - 1  # the last output token's K/V is never computed
    distinct = {APC: prompts * (computed // BLOCK) * BLOCK, RADIX: prompts * computed}
    rows = []
    for d in DESIGNS:
        held = _held_at_idle(ctx, d, (*over, *ARMS[d]))
        rows.append(
            {"design": d, "held": held, "distinct": distinct[d], "duplicate": held - distinct[d]}
        )
    by = {r["design"]: r for r in rows}
    if by[APC]["duplicate"] > 0 and by[RADIX]["duplicate"] == 0:
        verdict = HOLDS
    elif by[APC]["duplicate"] == 0 and by[RADIX]["duplicate"] == 0:
        verdict = undecided("no duplicate arose, so the workload cannot tell")
    else:
        verdict = FAILS
    result = "; ".join(
        f"{r['design']}: {r['held']:,} cached tokens held at idle for {r['distinct']:,} distinct "
        f"({r['duplicate']:,} duplicate)"
        for r in rows
    )
    return Finding(
        setup=f"parallel: {prompts} prompts of {PROMPT_LEN} tokens, n = {N} samples replaying one "
        f"{OUTPUT_LEN}-token reply, burst, ample KV (nothing evicted); simulated H100 preset's budgets; "
        "deterministic (one seed)",
        measured="cached tokens the cache holds once every request finished, against the distinct content",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Cached tokens held after identical samples",
            "tokens",
            {r["design"]: {"held": r["held"], "distinct": r["distinct"]} for r in rows},
        ),
        details=rows,
    )


def _held_at_idle(ctx: Context, design: str, overrides: tuple[str, ...]) -> int:
    """The run through the pipeline's own prepare and measure, then the cache's evictable tokens
    (cached, held by no request) before any flush."""
    composed = compose(list(overrides), job_name="claims")
    prepared = prepare(composed.cfg, ENGINE)
    measured = measure_run(composed.cfg, prepared)
    if measured.status != "ok":
        raise RuntimeError(f"claims run {FOLDER}/{design}: {measured.error}")
    ctx.note(f"{FOLDER}/{design}", composed.cfg.seed)
    usage = engine_of(prepared).cache.usage()
    if usage.protected:
        raise RuntimeError(f"{usage.protected} KV tokens still held after the run")
    return usage.evictable


CLAIM = Claim(
    20,
    "duplicates",
    "APC keeps duplicate full blocks side by side until they are evicted (block tables are "
    f"append-only); the {RADIX} tree frees a duplicate when it inserts.",
    "vLLM V1 prefix caching design (no de-duplication of full blocks); SGLang RadixCache.insert; the article",
    f"Holds when, after identical samples finish with nothing evicted, {APC} holds more cached tokens than the "
    f"distinct full-block content and {RADIX} holds exactly the distinct content; undecided when neither holds "
    "a duplicate; does not hold otherwise.",
    measure,
)
