"""Claim 16: RadixAttention's "5x" does not transfer to today's vLLM.

The 5x was measured against vLLM 0.2.5, which had no prefix caching. Today's vLLM caches prefixes
too, so the question is the tree's throughput over vLLM with caching on, beside its throughput
over vLLM with caching off (the claim's baseline). Read from claim 3's runs (few-shot and agent,
burst, simulated H100 Llama-3.1-8B; the CPU rows are reported beside them). The tree is given its
better schedule per workload: lpm (SGLang's policy when the 5x was measured) or fcfs (today's).
"""

from __future__ import annotations

from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends, undecided
from harness.claims.speedup import speedup_rows

GPU = "h100-8b"
POLICIES = ("radix", "radix-lpm")  # fcfs (today's default) and lpm (the claim's time)


def _best(row: dict) -> str:
    """The radix arm that gains most over caching off (the claim's baseline)."""
    return max(POLICIES, key=lambda a: row[f"{a}_vs_apc_off"])


def measure(ctx: Context) -> Finding:
    rows, _ = speedup_rows(ctx)
    gpu = [r for r in rows if r["setting"] == GPU]
    on = {r["workload"]: r[f"{_best(r)}_vs_apc_on"] for r in gpu}
    off = {r["workload"]: r[f"{_best(r)}_vs_apc_off"] for r in gpu}
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
            f"{a} on / apc on {r[f'{a}_vs_apc_on']:.2f}x, {a} on / apc off {r[f'{a}_vs_apc_off']:.2f}x"
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
                    "vs apc on": r[f"{_best(r)}_vs_apc_on"],
                    "vs apc off": r[f"{_best(r)}_vs_apc_off"],
                }
                for r in rows
            },
            reference=5.0,
            reference_label="claim: 5x",
        ),
        details=[
            {"workload": r["workload"], "setting": r["setting"], "radix": _best(r)}
            | {k: r[f"{_best(r)}_{k}"] for k in ("vs_apc_on", "vs_apc_off")}
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
