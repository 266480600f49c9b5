"""One completion's reply as the engine's events build it: per-sample text and ids, then usage.

`Reply` turns a request's `Tokens` events into vLLM's whole reply or its stream chunks (the
shapes of harness/builtin_server/protocol.py), detokenising each sample as its tokens arrive.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from engines.request import CompletionRequest
from harness.builtin_server import protocol as api
from harness.builtin_server.events import Tokens
from harness.builtin_server.protocol import CompletionParams
from harness.builtin_server.request_log import RequestRecord
from harness.builtin_server.text import Detokenizer

if TYPE_CHECKING:
    from harness.builtin_server.app import ServedModel


class Reply:
    """One request's reply as it is built: per-sample text and ids, usage at the end."""

    def __init__(
        self,
        model: ServedModel,
        req: CompletionRequest,
        params: CompletionParams,
        client_request_id: str | None = None,
        arrival_unix_s: float | None = None,
    ):
        self.model, self.req, self.params = model, req, params
        now = time.time()
        self.created = int(now)
        self.client_request_id = client_request_id
        self.arrival_unix_s = now if arrival_unix_s is None else arrival_unix_s
        self.samples = [Detokenizer(model.codec) for _ in range(req.n)]
        self.texts = [""] * req.n
        self.started = [False] * req.n
        self.outputs = [0] * req.n
        self.cached = [0] * req.n
        self.host_cached = [0] * req.n  # of `cached`, what a host tier supplied
        self.storage_cached = [0] * req.n  # of `cached`, a storage tier's (not the host's)
        self.first_sample: int | None = None  # the sample that emitted first
        self.last_finished = 0  # the sample that finished last

    def add(self, event: Tokens) -> str:
        """Take a sample's new tokens; the text they complete."""
        detok = self.samples[event.sample]
        text = detok.add(event.ids)
        if self.first_sample is None:
            self.first_sample = event.sample
        if event.finish is not None:
            self.last_finished = event.sample
            text += detok.flush()
            self.outputs[event.sample] = event.finish.output_tokens
            self.cached[event.sample] = event.finish.cached_tokens
            self.host_cached[event.sample] = event.finish.host_cached_tokens
            self.storage_cached[event.sample] = event.finish.storage_cached_tokens
        self.texts[event.sample] += text
        return text

    def chunk(self, event: Tokens) -> dict:
        text = self.add(event)
        ids = self.params.return_token_ids
        first = not self.started[event.sample]
        self.started[event.sample] = True
        choice = api.choice(
            event.sample,
            text,
            "length" if event.finish is not None else None,
            token_ids=list(event.ids) if ids else None,
            prompt_token_ids=list(self.req.prompt_ids) if ids and first else None,
        )
        return self._envelope([choice], None)

    def usage(self, sample: int) -> dict:
        """One prompt for all samples, as vLLM counts it, and one sample's cached tokens (per
        tier when the engine has a host tier; vLLM's external part is host + storage)."""
        host = self.host_cached[sample] if self.model.host_tier else None
        prompt, cached = len(self.req.prompt_ids), self.cached[sample]
        storage = self.storage_cached[sample]
        return api.usage(prompt, sum(self.outputs), cached, host, storage)

    def usage_chunk(self) -> dict:
        # vLLM 0.32 (entrypoints/openai/completion/serving.py) streams the cached tokens of the
        # first output it received, and answers a whole reply with the final output's.
        first = self.first_sample if self.first_sample is not None else 0
        return self._tiers(self._envelope([], self.usage(first)), first)

    def whole(self) -> dict:
        ids = self.params.return_token_ids
        prompt = list(self.req.prompt_ids)
        choices = [
            api.choice(
                i,
                self.texts[i],
                "length",
                token_ids=list(d.ids) if ids else None,
                prompt_token_ids=prompt if ids else None,
            )
            for i, d in enumerate(self.samples)
        ]
        return self._tiers(
            self._envelope(choices, self.usage(self.last_finished)), self.last_finished
        )

    def _tiers(self, out: dict, sample: int) -> dict:
        """With SGLang's `return_cached_tokens_details`, the cached tokens of the sample whose
        usage is reported, per tier (device, host; storage with a storage tier)."""
        if self.params.return_cached_tokens_details:
            storage = self.storage_cached[sample] if self.model.storage_tier else None
            ext = api.cached_tokens_details(self.cached[sample], self.host_cached[sample], storage)
            if ext is not None:
                out["sglext"] = ext
        return out

    def record(self) -> RequestRecord:
        """The finished request as the server's request log keeps it: the cached tokens of the
        usage this reply sent (a stream's first sample, a whole reply's last)."""
        first = self.first_sample if self.first_sample is not None else 0
        sample = first if self.params.stream else self.last_finished
        return RequestRecord(
            request_id=self.req.request_id,
            client_request_id=self.client_request_id,
            arrival_unix_s=self.arrival_unix_s,
            finish_unix_s=time.time(),
            prompt_tokens=len(self.req.prompt_ids),
            cached_tokens=self.cached[sample],
            output_tokens=sum(self.outputs),
        )

    def _envelope(self, choices: list[dict], usage: dict | None) -> dict:
        out = api.completion(self.req.request_id, self.created, self.model.name, choices, usage)
        if self.model.worker_tag is not None:  # which worker answered (a fleet, docs/fleet.md §5)
            out["system_fingerprint"] = self.model.worker_tag
        return out
