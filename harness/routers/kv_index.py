"""Each worker's cached blocks as its KV-cache events tell them: what a precise router sees.

vllm-router's kv_aware (0.1.17, `--kv-event-source WORKER_URL=ENDPOINT`) keeps an index of the
blocks every worker has stored and not yet removed, fed by the worker's vLLM-format KV events
(src/kv_index/ in vllm-project/router), and scores a request by the leading blocks of its
prompt a worker holds. The routing twin keeps the same index from the same streams (ZMQ PUB
sockets take any number of subscribers) with the project's own subscriber
(harness/live_server/kv_events.py), and reads a prompt's cached prefix per worker from it.
Block identity is the published hash, which the twin computes for a prompt as the workers' apc
cache does (sha256 over pickled chains with vLLM's fixed NONE_HASH seed: the served default).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.live_server.kv_events import Subscriber, published_hashes


@dataclass
class KvEventIndex:
    """One subscriber and one set of stored block hashes per worker, in worker order."""

    endpoints: Sequence[str]
    block_size: int = 16
    _subs: list[Subscriber] = field(default_factory=list)
    _read: list[int] = field(default_factory=list)  # batches applied, per worker
    blocks: list[set[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._subs = [Subscriber(ep) for ep in self.endpoints]
        self._read = [0] * len(self._subs)
        self.blocks = [set() for _ in self._subs]

    def refresh(self, settle_s: float = 0.1) -> None:
        """Apply what arrived, after waiting until nothing new came for `settle_s` (a step's
        batch is published before its replies leave, so after a reply it is in flight)."""
        last = -1
        while (total := sum(len(s.batches) for s in self._subs)) != last:
            last = total
            time.sleep(settle_s)
        for w, sub in enumerate(self._subs):
            for batch in sub.batches[self._read[w] :]:
                if batch.cleared:
                    self.blocks[w].clear()
                self.blocks[w].difference_update(batch.removed)
                self.blocks[w].update(batch.stored)
            self._read[w] = len(sub.batches)

    def cached_tokens(self, prompt_ids: Sequence[int]) -> list[int]:
        """Per worker, the prompt's leading tokens in blocks that worker holds."""
        hashes = published_hashes(prompt_ids, self.block_size)
        out = []
        for held in self.blocks:
            n = 0
            while n < len(hashes) and hashes[n] in held:
                n += 1
            out.append(n * self.block_size)
        return out

    def stop(self) -> None:
        for sub in self._subs:
            sub.stop(drain_s=0.05)
