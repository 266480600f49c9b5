"""Claim 19: LoRA adapters get caches of their own (the multimodal half is claim 23).

The same shared-system-prompt traffic served under two LoRA adapters, assigned round robin, and
without adapters. A probe is a request whose adapter never sent its system prompt while the other
adapter had: with adapters it must reuse nothing the other adapter computed (its ground-truth
shared prefix, recomputed per adapter, bounds its cached tokens); without, it reuses the system
prompt. The verdict covers LoRA only; multimodal inputs are claim 23 (not measurable here).
"""

from __future__ import annotations

import pandas as pd

from harness.claims.arms import APC, ARMS, H100_8B, RADIX
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, undecided

FOLDER = "19-adapters"
DESIGNS = (APC, RADIX)
WORKLOAD = (
    "workload=system_prompt",
    "workload.system_prompt_len=1024",
    "workload.question_len=64",
    "workload.output_len=16",
    "load.mode=poisson",
    "load.rate=2",
)


def measure(ctx: Context) -> Finding:
    size = (f"workload.num_groups={ctx.size(4, 8)}", "workload.prompts_per_group=4")
    rows = []
    for d in DESIGNS:
        lora = ctx.run(
            FOLDER,
            f"{d}-adapters",
            (*H100_8B, *WORKLOAD, *size, "workload.num_adapters=2", *ARMS[d]),
        ).requests
        plain = ctx.run(FOLDER, f"{d}-no-adapters", (*H100_8B, *WORKLOAD, *size, *ARMS[d])).requests
        rows.append(_row(d, lora, plain))
    if any(r["beyond_own_adapter"] for r in rows):
        verdict = FAILS
    elif all(r["probes"] and r["probe_cached_plain"] > 0 for r in rows):
        verdict = HOLDS
    else:
        verdict = undecided("no probe reused anything without adapters, so the probe is blind")
    result = (
        "; ".join(
            f"{r['design']}: {r['probes']} probes reuse {r['probe_cached_plain']:,} tokens without adapters and "
            f"{r['probe_cached_lora']:,} with; requests reusing past their own adapter's shared prefix: "
            f"{r['beyond_own_adapter']}; hit rate {r['hit_rate_plain']:.1%} without, {r['hit_rate_lora']:.1%} with"
            for r in rows
        )
        + ". Multimodal keys: claim 23 (not measurable here: the engines take token ids only)"
    )
    return Finding(
        setup="system_prompt with 1,024-token system prompts, two LoRA adapters round robin "
        "(workload.num_adapters=2) or none; Poisson 2 req/s; simulated H100 Llama-3.1-8B; LoRA only "
        "(multimodal inputs: claim 23); one run per arm at seed 0 (the arrivals are drawn from it)",
        measured="cached tokens of probe requests (first of their adapter in a group another adapter "
        "already sent) with and without adapters; cached tokens against each request's shared prefix "
        "computed within its adapter",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Probe reuse with and without LoRA adapters",
            "cached tokens",
            {
                r["design"]: {
                    "no adapters": r["probe_cached_plain"],
                    "two adapters": r["probe_cached_lora"],
                }
                for r in rows
            },
        ),
        details=rows,
    )


def _row(design: str, lora: pd.DataFrame, plain: pd.DataFrame) -> dict:
    """Probes: requests with nothing shared within their adapter that share without adapters."""
    merged = lora.merge(plain, on="request_id", suffixes=("_lora", "_plain"))
    probes = merged[
        (merged["shared_prefix_len_lora"] == 0) & (merged["shared_prefix_len_plain"] > 0)
    ]
    return {
        "design": design,
        "probes": len(probes),
        "probe_cached_lora": int(probes["cached_tokens_lora"].sum()),
        "probe_cached_plain": int(probes["cached_tokens_plain"].sum()),
        "beyond_own_adapter": int((lora["cached_tokens"] > lora["shared_prefix_len"]).sum()),
        "hit_rate_lora": float(lora["cached_tokens"].sum() / lora["prompt_tokens"].sum()),
        "hit_rate_plain": float(plain["cached_tokens"].sum() / plain["prompt_tokens"].sum()),
    }


CLAIM = Claim(
    19,
    "adapters",
    "LoRA adapters key the cache: requests under another adapter never reuse each other's KV.",
    "vLLM prefix caching design (block hash extra keys: LoRA id); SGLang extra_key; the article (its "
    "multimodal half is claim 23)",
    "Holds when no request under an adapter reuses more than the prefix it shares with its own "
    "adapter's earlier prompts, for both designs, while the same probes reuse the system prompt without "
    "adapters; does not hold when one reuses across adapters; undecided when the probes reuse nothing "
    "without adapters.",
    measure,
)
