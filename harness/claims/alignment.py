"""Claim 2: APC reuse is block-aligned, a partial block is never reused.

Shared prefixes whose lengths are not multiples of 16, one request at a time (so neither
scheduler hides reuse): every apc hit must be a whole number of blocks and at most the
block-aligned part of the request's shared prefix; radix at page 1 shows what alignment costs.
"""

from __future__ import annotations

from harness.claims import keys
from harness.claims.arms import APC, ARMS, H100_8B, RADIX
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, undecided
from harness.claims.requests import reusable_tokens

FOLDER = "2-alignment"
BLOCK = 16
WORKLOADS = {  # name -> overrides; shared lengths 100 (system prompt) and 32 + 5*64 + ... not /16
    "system_prompt_100": (
        "workload=system_prompt",
        "workload.system_prompt_len=100",
        "workload.question_len=20",
    ),
    "multiturn": (
        "workload=multiturn",
        "workload.system_prompt_len=90",
        "workload.user_history_len=50",
    ),
    "fewshot": ("workload=fewshot", "workload.shot_len=50", "workload.instruction_len=20"),
    "rag": ("workload=rag", "workload.doc_len=100", "workload.system_prompt_len=40"),
    "parallel": ("workload=parallel",),
}
ARM_NAMES = (APC, RADIX, f"{RADIX}-p16")
PARTIAL = f"{APC}_partial_block_hits"  # APC requests that reused part of a block


def measure(ctx: Context) -> Finding:
    names = ctx.size(("system_prompt_100", "multiturn"), tuple(WORKLOADS))
    tables = {}
    for w in names:
        for a in ARM_NAMES:
            res = ctx.run(
                FOLDER, f"{w}-{a}", (*H100_8B, *WORKLOADS[w], *ARMS[a], "engine.max_num_seqs=1")
            )
            tables[w, a] = (res.requests, keys.value(res.summary, keys.HIT_RATE))
    rows = [_row(w, tables) for w in names]
    partial = sum(r[PARTIAL] for r in rows)
    lost = max(r["lost_to_alignment"] for r in rows)
    if partial:
        verdict = FAILS
    elif lost > 0:
        verdict = HOLDS
    else:
        verdict = undecided("no workload had reuse beyond the block-aligned prefix")
    result = (
        "; ".join(
            f"{r['workload']}: {APC} {r[APC]:.1%}, {RADIX} p1 {r[RADIX]:.1%}, "
            f"{RADIX} p16 {r[ARM_NAMES[2]]:.1%}, "
            f"lost to alignment {r['lost_to_alignment']:.1%} of prompt tokens"
            for r in rows
        )
        + f". apc requests reusing part of a block: {partial}"
    )
    return Finding(
        setup=f"simulated H100 Llama-3.1-8B, one request at a time (engine.max_num_seqs=1), workloads {', '.join(names)} "
        "with shared lengths that are not multiples of 16",
        measured="per request: cached tokens mod 16 and against the shared prefix rounded down to 16; hit "
        "rates of apc (block 16), radix page 1 and radix page 16; (radix p1 - apc) cached tokens / prompt tokens",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Hit rate with shared prefixes not aligned to 16",
            "hit rate (%)",
            {r["workload"]: {a: 100 * r[a] for a in ARM_NAMES} for r in rows},
        ),
        details=rows,
    )


def _row(workload: str, tables: dict) -> dict:
    apc, _ = tables[workload, APC]
    radix, _ = tables[workload, RADIX]
    reusable = reusable_tokens(apc)
    aligned = (reusable // BLOCK) * BLOCK
    partial = int(((apc["cached_tokens"] % BLOCK != 0) | (apc["cached_tokens"] > aligned)).sum())
    prompt = int(apc["prompt_tokens"].sum())
    merged = apc.merge(radix, on="request_id", suffixes=(f"_{APC}", f"_{RADIX}"))
    lost = (merged[f"cached_tokens_{RADIX}"] - merged[f"cached_tokens_{APC}"]).clip(
        lower=0
    ).sum() / prompt
    row = {
        "workload": workload,
        PARTIAL: partial,
        "lost_to_alignment": float(lost),
    }
    row.update({a: tables[workload, a][1] for a in ARM_NAMES})
    return row


CLAIM = Claim(
    2,
    "alignment",
    "APC reuse is block-aligned: a partial block is never reused.",
    "vLLM automatic prefix caching design (hash per full block of 16 tokens)",
    "Holds when every apc request's cached tokens are a multiple of 16 and at most its shared "
    "prefix rounded down to 16, and radix at page 1 reuses tokens beyond that on a workload whose "
    "shared prefix is not block-aligned; does not hold when one apc request reuses a partial block.",
    measure,
)
