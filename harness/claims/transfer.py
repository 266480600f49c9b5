"""Claim 16: RadixAttention's "5x" does not transfer to today's vLLM.

The 5x was measured against vLLM 0.2.5, which had no prefix caching. Today's vLLM caches prefixes
too, so the question is the tree's throughput over vLLM with caching on, beside its throughput
over vLLM with caching off (the claim's baseline). Read from claim 3's runs (few-shot and agent,
burst, simulated H100 Llama-3.1-8B; the CPU rows are reported beside them). The tree is given its
better schedule per workload: lpm (SGLang's policy when the 5x was measured) or fcfs (today's).
"""

from __future__ import annotations

from harness.claims.arms import APC, RADIX
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends, undecided
from harness.claims.speedup import RADIX_LPM, speedup_rows, vs_apc

GPU = "h100-8b"
POLICIES = (RADIX, RADIX_LPM)  # fcfs (today's default) and lpm (the claim's time)
CACHING = ("on", "off")  # the apc baseline with caching on and off


def _best(row: dict) -> str:
    """The radix arm that gains most over caching off (the claim's baseline)."""
    return max(POLICIES, key=lambda a: row[vs_apc(a, "off")])


def measure(ctx: Context) -> Finding:
    rows, _ = speedup_rows(ctx)
    gpu = [r for r in rows if r["setting"] == GPU]
    on = {r["workload"]: r[vs_apc(_best(r), "on")] for r in gpu}
    off = {r["workload"]: r[vs_apc(_best(r), "off")] for r in gpu}
    if max(off.values()) < 2.0:
        verdict = undecided("caching gains under 2x on both workloads: too little reuse to test it")
    elif max(on.values()) >= 3.0:
        verdict = FAILS
    elif max(on.values()) < 1.5:
        verdict = HOLDS
    else:
        verdict = depends("the workload")
    result = "; ".join(
        f"{r['workload']} {r['setting']}: "
        + ", ".join(
            f"{a} on / {APC} on {r[vs_apc(a, 'on')]:.2f}x, "
            f"{a} on / {APC} off {r[vs_apc(a, 'off')]:.2f}x"
            for a in POLICIES
        )
        + f" (better: {_best(r)})"
        for r in rows
    )
    return Finding(
        setup="claim 3's runs: MMLU-5-shot-like few-shot and agent, burst; verdict on the simulated H100 "
        "Llama-3.1-8B bf16 preset, this CPU reported beside it",
        measured="total token throughput of radix with caching on over apc with caching on (today's "
        "vLLM) and over apc with caching off (the claim's baseline)",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Radix throughput against vLLM with and without caching",
            "throughput ratio (x)",
            {
                f"{r['workload']}/{r['setting']} ({_best(r)})": {
                    f"vs {APC} {c}": r[vs_apc(_best(r), c)] for c in CACHING
                }
                for r in rows
            },
            reference=5.0,
            reference_label="claim: 5x",
        ),
        details=[
            {"workload": r["workload"], "setting": r["setting"], RADIX: _best(r)}
            | {f"vs_{APC}_{c}": r[vs_apc(_best(r), c)] for c in CACHING}
            for r in rows
        ],
    )


CLAIM = Claim(
    16,
    "transfer",
    "RadixAttention's 5x over vLLM does not transfer to today's vLLM, which caches prefixes too.",
    "the article; LMSYS blog, January 2024 (its baseline: vLLM 0.2.5 without prefix caching)",
    "With radix on its better schedule per workload (lpm or fcfs, the one gaining most over apc with "
    "caching off): holds when, on the simulated H100 preset, radix with caching on stays under 1.5x the "
    "throughput of apc with caching on for both workloads; does not hold when it reaches 3x on either; "
    "depends on the workload in between; undecided when radix on over apc off stays under 2x on both "
    "(too little reuse to tell).",
    measure,
)
