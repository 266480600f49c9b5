"""`mix`: general mixed traffic, ShareGPT conversations interleaved with shared-system-prompt requests.

Both parts come from their own families (dataset, system_prompt) with their own parameters; the
mix prefixes their request ids ("chat-", "gsp-"), merges them in a seeded random order that keeps
each part's own order (so a session's turns stay in sequence), and measures the ground truth
shared prefix of the merged stream.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from workloads.base import WorkloadParams, generate
from workloads.dataset import DatasetParams
from workloads.request import Request
from workloads.system_prompt import SystemPromptParams
from workloads.tokens import TokenSpace, rng


@dataclass
class MixParams(WorkloadParams):
    name: str = "mixed"
    family: str = "mix"
    chat: DatasetParams = field(default_factory=DatasetParams)
    shared: SystemPromptParams = field(default_factory=SystemPromptParams)

    def check(self) -> None:
        self.chat.validate()
        self.shared.validate()


def _renamed(requests: list[Request], prefix: str) -> list[Request]:
    return [
        dataclasses.replace(
            r,
            request_id=prefix + r.request_id,
            after=prefix + r.after if r.after else None,
            session_id=prefix + r.session_id if r.session_id else None,
        )
        for r in requests
    ]


def generate_mix(p: MixParams, seed: int, space: TokenSpace) -> list[Request]:
    from workloads.bounds import shared_prefix_lens

    parts = [
        _renamed(generate(p.chat, seed, space), "chat-"),
        _renamed(generate(p.shared, seed, space), "gsp-"),
    ]
    # Which part each position draws from: a seeded shuffle of the parts' labels.
    labels = (
        rng(seed, "mix").permutation([i for i, part in enumerate(parts) for _ in part]).tolist()
    )
    cursors = [iter(part) for part in parts]
    merged = [next(cursors[i]) for i in labels]
    return [
        dataclasses.replace(r, shared_prefix_len=n)
        for r, n in zip(merged, shared_prefix_lens(merged))
    ]
