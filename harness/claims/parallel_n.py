"""Claim 12: n > 1 sampling benefits from prefix caching (the samples share their prompt).

One prompt per request, n = 1..16 samples, on both designs with their own front stages: vLLM's
fan-out (the samples meet through same-step hashing) and SGLang's (the prompt sent once with no
new tokens, awaited, then the samples; engines/frontend.py). Prefill tokens computed per request
(the engine's lookups minus its hits, prefix requests included) and the TTFT of each request's
first and last sample.
"""

from __future__ import annotations

from harness.claims import keys
from harness.claims.arms import APC, H100_8B, RADIX, engine
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends

FOLDER = "12-parallel_n"
SHARED = 1.25  # prefill at n = 16 within 1.25x of n = 1: the samples did share the prompt
DESIGNS = {
    f"{APC} (vLLM fan-out)": (engine(APC),),
    f"{RADIX} (SGLang front stage)": (engine(RADIX),),
}


def measure(ctx: Context) -> Finding:
    ns = ctx.size((1, 4), (1, 2, 4, 8, 16))
    rows = [_row(ctx, d, n) for d in DESIGNS for n in ns]
    shared = {}
    for d in DESIGNS:
        at = {r["n"]: r for r in rows if r["design"] == d}
        shared[d] = at[ns[-1]]["prefill_per_request"] <= SHARED * at[1]["prefill_per_request"]
    ok = list(shared.values())
    verdict = HOLDS if all(ok) else FAILS if not any(ok) else depends("the design's front stage")
    result = "; ".join(
        f"{r['design']} n={r['n']}: {r['prefill_per_request']:,.0f} prefill tokens/request, TTFT first "
        f"{r['ttft_first_ms']:.1f} ms, last {r['ttft_last_ms']:.1f} ms"
        for r in rows
    )
    return Finding(
        setup=f"parallel workload (8 prompts of 1,024 tokens, 16 output tokens, burst), n = "
        f"{', '.join(map(str, ns))}; simulated H100 Llama-3.1-8B; each design with its own front stage",
        measured="prefill tokens computed (engine lookups - hits) per request; median TTFT of the first and of "
        "the last sample to get its first token",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Prefill tokens per request against n",
            "prefill tokens per request",
            {
                f"n={n}": {
                    d: r["prefill_per_request"] for r in rows if r["n"] == n for d in [r["design"]]
                }
                for n in ns
            },
        ),
        details=rows,
    )


CLAIM = Claim(
    12,
    "parallel_n",
    "Parallel sampling (n > 1) benefits from prefix caching: the samples share one prefill of the prompt.",
    "vLLM parallel_sampling.py / APC docs; SGLang tokenizer manager (common-prefix request for n > 1)",
    "Holds when, for both designs, the prefill tokens computed per request at the largest n (16; quick: "
    "4) are within 1.25x of those at n = 1, with caching on; does not hold when neither design stays "
    "within it; depends on the design otherwise. First- and last-sample TTFT are reported beside it.",
    measure,
)


def _row(ctx: Context, design: str, n: int) -> dict:
    overrides = (
        *H100_8B,
        "workload=parallel",
        f"workload.n={n}",
        "workload.num_prompts=8",
        "workload.prompt_len=1024",
        "workload.output_len=16",
        *DESIGNS[design],
    )
    name = f"{design.split()[0]}-n{n}"
    res = ctx.run(FOLDER, name, overrides)
    s = res.summary
    prefill = keys.value(s, "engine_queries") - keys.value(s, "engine_hits")
    df = res.requests
    # a request's samples arrive together: its first and last sample by TTFT
    ttft = df.groupby("parent_id")["ttft_ms"]
    first, last = ttft.min().median(), ttft.max().median()
    return {
        "design": design,
        "n": n,
        "prefill_per_request": prefill / df["parent_id"].nunique(),
        "ttft_first_ms": float(first),
        "ttft_last_ms": float(last),
    }
