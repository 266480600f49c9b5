"""Claim 5: shared content that is not at the start of the prompt is never reused.

The same retrieval-augmented prompts in two layouts, documents first and question first, on both
designs: a prefix cache can only reuse what leads the prompt.
"""

from __future__ import annotations

from harness.claims import keys
from harness.claims.arms import ARMS, H100_8B
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, undecided

FOLDER = "5-position"
LAYOUTS = {"documents first": "workload=rag", "question first": "workload=rag_question_first"}


def measure(ctx: Context) -> Finding:
    size = f"workload.num_prompts={ctx.size(24, 96)}"
    hits = {
        layout: {
            a: keys.value(
                ctx.run(FOLDER, f"{w.split('=')[1]}-{a}", (*H100_8B, w, size, *ARMS[a])).summary,
                keys.HIT_RATE,
            )
            for a in ("apc", "radix")
        }
        for layout, w in LAYOUTS.items()
    }
    first_q, first_d = hits["question first"], hits["documents first"]
    if any(v > 0 for v in first_q.values()):
        verdict = FAILS
    elif all(v > 0 for v in first_d.values()):
        verdict = HOLDS
    else:
        verdict = undecided(
            "the documents-first layout reused nothing either, so the test is blind"
        )
    result = "; ".join(
        f"{layout}: " + ", ".join(f"{a} {v:.1%}" for a, v in h.items())
        for layout, h in hits.items()
    )
    return Finding(
        setup="rag workload (system prompt + 3 Zipf-popular 128-token documents of 12 + question) in two layouts, "
        "simulated H100 Llama-3.1-8B, burst",
        measured="token hit rate per design and layout",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Reuse by position of the shared content",
            "hit rate (%)",
            {layout: {a: 100 * v for a, v in h.items()} for layout, h in hits.items()},
        ),
        details=[{"layout": k, **v} for k, v in hits.items()],
    )


CLAIM = Claim(
    5,
    "position",
    "Shared content that is not at the start of the prompt is never reused.",
    "prefix caching's definition (vLLM APC docs; SGLang RadixAttention)",
    "Holds when the question-first layout's hit rate is exactly 0 for both designs while the "
    "documents-first layout's is above 0; does not hold when question-first reuses any token.",
    measure,
)
