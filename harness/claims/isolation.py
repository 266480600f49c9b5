"""Claim 9: a per-tenant cache_salt isolates tenants.

Two tenants send prompts that share system prompts across tenants. A probe is a request whose
tenant never sent its system prompt before while the other tenant did: every token it reuses is
another tenant's. Without salts the probe hits and its TTFT drops (what a prober could observe);
with salts it must reuse nothing. Low-rate arrivals, so TTFT is prefill time, not queueing.
"""

from __future__ import annotations

import pandas as pd

from engines.cache import DESIGNS
from harness.claims.arms import ARMS, H100_8B
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, undecided

FOLDER = "9-isolation"
WORKLOAD = (
    "workload=system_prompt",
    "workload.num_groups=8",
    "workload.prompts_per_group=4",
    "workload.system_prompt_len=1024",
    "workload.question_len=64",
    "workload.output_len=16",
    "load.mode=poisson",
    "load.rate=2",
)


def measure(ctx: Context) -> Finding:
    rows = []
    for design in DESIGNS.names():  # every design must isolate salted tenants
        salted = ctx.run(
            FOLDER,
            f"{design}-salted",
            (*H100_8B, *WORKLOAD, "workload.num_tenants=2", *ARMS[design]),
        ).requests
        plain = ctx.run(FOLDER, f"{design}-unsalted", (*H100_8B, *WORKLOAD, *ARMS[design])).requests
        rows.append(_row(design, salted, plain))
    if any(r["salted_probe_cached"] or r["intra_tenant_hit_rate"] == 0 for r in rows):
        verdict = FAILS
    elif all(r["unsalted_probe_cached"] > 0 for r in rows):
        verdict = HOLDS
    else:
        verdict = undecided("unsalted probes reused nothing, so the probe is blind")
    result = "; ".join(
        f"{r['design']}: {r['probes']} probes reuse {r['unsalted_probe_cached']:,} tokens unsalted, "
        f"{r['salted_probe_cached']:,} salted (salted intra-tenant hit rate {r['intra_tenant_hit_rate']:.1%}); probe TTFT p50 {r['unsalted_ttft_ms']:.1f} ms unsalted vs "
        f"{r['salted_ttft_ms']:.1f} ms salted (gap {r['salted_ttft_ms'] - r['unsalted_ttft_ms']:.1f} ms)"
        for r in rows
    )
    return Finding(
        setup="system_prompt: 8 groups x 4 prompts (1,024-token system prompt + 64), tenants assigned round robin "
        "(workload.num_tenants=2) or no salts; Poisson 2 req/s; simulated H100 Llama-3.1-8B",
        measured="cached tokens of probe requests (first of their tenant in a group another tenant already sent) "
        "with and without salts; their median TTFT (the timing gap a probing tenant could observe)",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Probe TTFT with and without cache_salt",
            "TTFT p50 (ms)",
            {
                r["design"]: {"no salt": r["unsalted_ttft_ms"], "salted": r["salted_ttft_ms"]}
                for r in rows
            },
        ),
        details=rows,
    )


CLAIM = Claim(
    9,
    "isolation",
    "A per-tenant cache_salt isolates tenants.",
    "vLLM cache_salt (RFC #16016); SGLang cache_salt",
    "Holds when, for both designs, probe requests reuse 0 tokens with salts while they reuse some "
    "without (the probe is sensitive) and salted requests that share within their own tenant still reuse "
    "(intra-tenant hit rate > 0: salting did not switch caching off); does not hold when a salted probe "
    "reuses any token or the salted intra-tenant hit rate is 0.",
    measure,
)


def _row(design: str, salted: pd.DataFrame, plain: pd.DataFrame) -> dict:
    """Probes: shared with earlier content overall (unsalted truth) but not within their tenant."""
    merged = salted.merge(plain, on="request_id", suffixes=("_salted", "_plain"))
    probes = merged[
        (merged["shared_prefix_len_salted"] == 0) & (merged["shared_prefix_len_plain"] > 0)
    ]
    # Requests that share with earlier content of their own tenant: salting must keep their reuse.
    own = salted[salted["shared_prefix_len"] > 0]
    intra = float(own["cached_tokens"].sum() / own["prompt_tokens"].sum()) if len(own) else 0.0
    return {
        "design": design,
        "probes": len(probes),
        "intra_tenant_hit_rate": intra,
        "salted_probe_cached": int(probes["cached_tokens_salted"].sum()),
        "unsalted_probe_cached": int(probes["cached_tokens_plain"].sum()),
        "salted_ttft_ms": float(probes["ttft_ms_salted"].median()),
        "unsalted_ttft_ms": float(probes["ttft_ms_plain"].median()),
    }
