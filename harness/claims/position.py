"""Claim 5: shared content that is not at the start of the prompt is never reused.

The same retrieval-augmented prompts in two layouts, documents first and question first, on both
designs: a prefix cache can only reuse what leads the prompt.
"""

from __future__ import annotations

from harness.claims import keys
from harness.claims.arms import APC, ARMS, H100_8B, RADIX
from harness.claims.experiment import ArmResult, Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, undecided

FOLDER = "5-position"
LAYOUTS = {"documents first": "workload=rag", "question first": "workload=rag_question_first"}
# question first behind a chat template's fixed header: the rule's "common leading header" branch
HEADER = "question first + header"
HEADER_LEN = 16


def layout_runs(
    ctx: Context, folder: str = FOLDER, extra: tuple[str, ...] = ()
) -> dict[str, dict[str, ArmResult]]:
    """layout -> design -> its run, into `folder`, with `extra` overrides (claim 15: one at a
    time)."""
    size = f"workload.num_prompts={ctx.size(24, 96)}"
    return {
        layout: {
            a: ctx.run(folder, f"{w.split('=')[1]}-{a}", (*H100_8B, w, size, *extra, *ARMS[a]))
            for a in (APC, RADIX)
        }
        for layout, w in LAYOUTS.items()
    }


def header_runs(ctx: Context) -> dict[str, ArmResult]:
    """Question-first prompts that all open with the same 16-token chat header."""
    size = f"workload.num_prompts={ctx.size(24, 96)}"
    over = ("workload=rag_question_first", f"workload.header_len={HEADER_LEN}", size)
    return {a: ctx.run(FOLDER, f"header-{a}", (*H100_8B, *over, *ARMS[a])) for a in (APC, RADIX)}


def measure(ctx: Context) -> Finding:
    runs = {**layout_runs(ctx), HEADER: header_runs(ctx)}
    hits = {
        layout: {a: keys.value(r.summary, keys.HIT_RATE) for a, r in by.items()}
        for layout, by in runs.items()
    }
    # reuse past the leading shared header (cached beyond what the prompt shares before its question)
    past_header = {
        f"{a}{' + header' if layout == HEADER else ''}": int(
            (r.requests["cached_tokens"] > r.requests["shared_prefix_len"]).sum()
        )
        for layout in ("question first", HEADER)
        for a, r in runs[layout].items()
    }
    header_hits = {a: int(r.requests["cached_tokens"].sum()) for a, r in runs[HEADER].items()}
    first_d = hits["documents first"]
    if any(past_header.values()):
        verdict = FAILS
    elif not all(header_hits.values()):
        verdict = undecided("the common header was not reused, so the header branch is blind")
    elif all(v > 0 for v in first_d.values()):
        verdict = HOLDS
    else:
        verdict = undecided(
            "the documents-first layout reused nothing either, so the test is blind"
        )
    result = (
        "; ".join(
            f"{layout}: " + ", ".join(f"{a} {v:.1%}" for a, v in h.items())
            for layout, h in hits.items()
        )
        + "; question-first requests reusing past their leading shared header: "
        + ", ".join(f"{a} {n}" for a, n in past_header.items())
        + f"; behind a {HEADER_LEN}-token chat header the question-first prompts reused "
        + ", ".join(f"{a} {n:,} tokens" for a, n in header_hits.items())
        + " (the header only)"
    )
    return Finding(
        setup="rag workload (system prompt + 3 Zipf-popular 128-token documents of 12 + question) in two layouts, "
        f"and question first behind a common {HEADER_LEN}-token chat header; simulated H100 Llama-3.1-8B, burst",
        measured="token hit rate per design and layout",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Reuse by position of the shared content",
            "hit rate (%)",
            {layout: {a: 100 * v for a, v in h.items()} for layout, h in hits.items()},
        ),
        details=[{"layout": k, **v} for k, v in hits.items()] + [{"past_header": past_header}],
    )


CLAIM = Claim(
    5,
    "position",
    "Shared content that is not at the start of the prompt is never reused.",
    "prefix caching's definition (vLLM APC docs; SGLang RadixAttention)",
    "Holds when, in the question-first layout, no request of either design reuses more tokens than the "
    "leading part it shares with earlier prompts before its own question (the generator's shared_prefix_len: "
    "a common chat-template header may be reused, nothing after the question), while the documents-first "
    "layout's hit rate is above 0 and the header-first arm reuses its header; does not hold when any "
    "question-first request reuses past that point.",
    measure,
)
