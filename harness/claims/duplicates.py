"""Claim 20, as the article and vLLM's design doc state it: APC's duplicate blocks are eliminated
when the request is freed.

n = 4 samples of each prompt that all replay one reply (what greedy decoding gives), in one burst:
the samples fill identical output blocks side by side. After the run (every request freed, nothing
evicted) the cache holds, per design, its cached tokens; the distinct content is the prompt plus
the reply's computed tokens, once per prompt (full blocks only for APC). Anything above it is a
duplicate that freeing did not eliminate. The verdict is APC's; the radix tree is reported beside.
"""

from __future__ import annotations

from harness.claims.arms import APC, ARMS, RADIX
from harness.claims.experiment import Context, claims_compose
from harness.claims.record import FAILS, Claim, Figure, Finding, undecided
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
    apc, tree = by[APC], by[RADIX]
    if apc["duplicate"] > 0:
        verdict = FAILS
    else:  # none held: eliminated, or none arose; the held count alone cannot tell which
        verdict = undecided("apc holds no duplicate after the run, so the workload cannot tell")
    result = (
        f"{APC}, every request freed and nothing evicted: {apc['held']:,} cached tokens held for "
        f"{apc['distinct']:,} distinct ({apc['duplicate']:,} duplicate tokens not eliminated); "
        f"{RADIX} beside: {tree['held']:,} cached tokens held for {tree['distinct']:,} distinct "
        f"({tree['duplicate']:,} duplicate: the tree frees a duplicate when it inserts)"
    )
    return Finding(
        setup=f"parallel: {prompts} prompts of {PROMPT_LEN} tokens, n = {N} samples replaying one "
        f"{OUTPUT_LEN}-token reply, burst, ample KV (nothing evicted); simulated H100 preset's budgets; "
        "one run per design at seed 0 (the workload's order and tokens are fixed by the seed)",
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
    composed = claims_compose(list(overrides))
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
    "APC does not de-duplicate full blocks while requests run (block tables are append-only), but "
    "the duplicate blocks are eliminated when the request is freed.",
    "vLLM V1 prefix caching design doc (duplicated blocks); the article",
    f"Holds when, after identical samples finish (every request freed, nothing evicted), {APC} holds no "
    "more cached tokens than the distinct full-block content; does not hold when it holds more (the "
    "duplicates outlive the requests); undecided when it holds none, since the count cannot tell "
    f"eliminated from never made. The {RADIX} tree's held tokens against its distinct content are reported "
    "beside (SGLang's RadixCache.insert frees a duplicate when it inserts).",
    measure,
)
