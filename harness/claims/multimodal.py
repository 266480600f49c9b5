"""Claim 23: multimodal inputs key the cache (split off claim 19, whose runs measure LoRA only).

vLLM adds each image's hash to the keys of the blocks it covers, and SGLang pads the image's
tokens with values derived from its hash; both engines here take token ids only, so nothing can
be run. The verdict says so, with no runs behind it.
"""

from __future__ import annotations

from harness.claims.experiment import Context
from harness.claims.record import Claim, Finding, not_measurable


def measure(ctx: Context) -> Finding:
    del ctx  # nothing is run
    return Finding(
        setup="none: the engines take token ids only, with no image inputs",
        measured="nothing",
        result="no runs: the engines have no multimodal inputs to key (0 runs)",
        verdict=not_measurable("the engines take token ids only, so no image can key a block"),
    )


CLAIM = Claim(
    23,
    "multimodal",
    "Multimodal inputs key the cache: requests with other images never reuse each other's KV.",
    "vLLM prefix caching design (block hash extra keys: multimodal hashes); SGLang's image-hash padding; "
    "the article",
    "Not measurable here, decided before measuring: the engines take token ids only; the LoRA half of the "
    "article's sentence is claim 19.",
    measure,
)
