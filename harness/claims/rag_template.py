"""Claim 15: in RAG, a fixed template placed first is reused; the question placed first is not.

The article's prompt-layout advice, on claim 5's prompts (rag with the system prompt and documents
first, or the user's question first, on both designs) sent one at a time: the layout alone decides
what can be reused, without the burst's same-step sharing, which only vLLM's scheduler with APC
has (claim 10) and which claim 5's burst runs mix in. Claim 5 asks whether anything past the
leading header is ever reused; this one asks whether the template-first layout gets what it could
(its hit rate against the ideal at the design's own granularity) and whether the question-first
layout gets no more than its common header.
"""

from __future__ import annotations

from harness.claims import keys
from harness.claims.experiment import ArmResult, Context
from harness.claims.position import layout_runs
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends

FOLDER = "15-rag_template"
TEMPLATE, QUESTION = "documents first", "question first"  # claim 5's layout names
ONE_AT_A_TIME = "engine.max_num_seqs=1"


def _header_share(run: ArmResult) -> float:
    """The share of prompt tokens every request shares before its own question."""
    rows = run.requests
    shared = rows[["shared_prefix_len", "prompt_tokens"]].min(axis=1).sum()
    return float(shared / rows["prompt_tokens"].sum())


def measure(ctx: Context) -> Finding:
    runs = layout_runs(ctx, FOLDER, (ONE_AT_A_TIME,))
    hit = {
        lay: {a: keys.value(r.summary, keys.HIT_RATE) for a, r in by.items()}
        for lay, by in runs.items()
    }
    ideal = {a: keys.value(r.summary, keys.IDEAL_HIT_RATE) for a, r in runs[TEMPLATE].items()}
    header = {a: _header_share(r) for a, r in runs[QUESTION].items()}
    of_ideal = {a: hit[TEMPLATE][a] / ideal[a] if ideal[a] else 0.0 for a in ideal}
    over_header = [a for a in header if hit[QUESTION][a] > header[a] + 1e-9]
    if over_header or all(v < 0.25 for v in of_ideal.values()):
        verdict = FAILS
    elif all(v >= 0.5 for v in of_ideal.values()):
        verdict = HOLDS
    else:
        verdict = depends("the design")
    result = "; ".join(
        f"{a}: template first {hit[TEMPLATE][a]:.1%} of prompt tokens ({of_ideal[a]:.0%} of its ideal "
        f"{ideal[a]:.1%}), question first {hit[QUESTION][a]:.1%} (its common header: {header[a]:.1%})"
        for a in ideal
    )
    return Finding(
        setup="claim 5's prompts: rag workload (system prompt + 3 Zipf-popular 128-token documents of 12 + "
        "question), template first and question first, simulated H100 Llama-3.1-8B, one request at a time "
        "(engine.max_num_seqs=1: no same-step sharing)",
        measured="token hit rate per layout and design; the template-first one against its ideal hit "
        "rate at the design's granularity; the question-first one against its common header's share",
        result=result,
        verdict=verdict,
        figure=Figure(
            "RAG layout: hit rate and its ceiling",
            "share of prompt tokens (%)",
            {
                "template first": {
                    **{a: 100 * v for a, v in hit[TEMPLATE].items()},
                    **{f"{a} ideal": 100 * v for a, v in ideal.items()},
                },
                "question first": {
                    **{a: 100 * v for a, v in hit[QUESTION].items()},
                    **{f"{a} header": 100 * v for a, v in header.items()},
                },
            },
        ),
        details=[
            {
                "design": a,
                "template_first": hit[TEMPLATE][a],
                "ideal": ideal[a],
                "question_first": hit[QUESTION][a],
                "header_share": header[a],
            }
            for a in ideal
        ],
    )


CLAIM = Claim(
    15,
    "rag_template",
    "In RAG, put the fixed template (system prompt, retrieved documents) first and the question last: "
    "the template is reused; with the question first, nothing past a common header is.",
    "the article's prompt-layout advice; vLLM APC docs (reuse needs a shared prefix)",
    "Holds when, on both designs, the template-first layout reaches at least half of its ideal hit rate "
    "(at the design's own granularity) and the question-first layout's hit rate is no more than its common "
    "leading header's share of prompt tokens; does not hold when the question-first layout reuses more "
    "than that on either design, or the template-first layout stays under a quarter of its ideal on both; "
    "depends on the design otherwise.",
    measure,
)
