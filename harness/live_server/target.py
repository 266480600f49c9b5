"""A live server as the target: discover it, warm it up, reset and probe its cache, drive it over
HTTP, and record its replies beside the twin's prediction.

    workload ─▶ arrivals ─▶ driver (closed loop, streamed, token ids) ─▶ rows ─▶ files
    server facts (/v1/models, version, /metrics) ─▶ twin (built-in caches) ─▶ predicted vs measured

The stages, the warm-up policy and the files are the pipeline's (harness/run/pipeline.py); this
module holds what only a live server has. The cache-state protocol of docs/benchmarking.md §4 on
a real server: warm-up on unrelated tokens, reset the prefix cache, a probe (the first warm-up
prompt again) that must miss, a second reset, then the measured window between two reads of the
server's Prometheus counters, whose delta is recorded beside the sum of the per-request cached
tokens. One event loop and one HTTP client serve the whole run.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from harness.config.errors import BadInput
from harness.config.schema import RunConfig
from harness.live_server import kv_events
from harness.live_server.cache_state import Counters, reset_cache, settled_counters
from harness.live_server.config import ServerConfig
from harness.live_server.discovery import ServerInfo, discover
from harness.live_server.driver import Sent, completion_body, drive
from harness.live_server.flavours import FLAVOURS
from harness.live_server.http_client import HTTP_ERROR, OK, ServerClient
from harness.live_server.record import Window, measured_stream, record_with_twin, rows_of
from harness.live_server.twin import TwinResult, twin_engine_config
from harness.metrics.summary import RunContext
from harness.results.run_dir import RunDir
from harness.run.target import Recorded
from workloads.request import Request
from workloads.tokenizer import load as load_tokenizer
from workloads.tokens import TokenSpace

T = TypeVar("T")
# How long the run waits for the KV events of its own prompt blocks after the last reply (a
# loaded vLLM-CPU published its last steps more than 0.7 s late); a stream still short then is
# compared as it is, and the comparison says where it ends.
KV_TAIL_WAIT_S = 10.0


class LiveServerTarget:
    """Selected by the `server` config group (`server=vllm|sglang|openai`)."""

    def connect(self, cfg: RunConfig) -> LiveServerSession:
        return LiveServerSession(cfg)


class LiveServerSession:
    """One run against `cfg.server`: its event loop and client live from connect to close."""

    def __init__(self, cfg: RunConfig) -> None:
        assert cfg.server is not None, "the live-server target needs cfg.server"
        self.kv_sub: kv_events.Subscriber | None = None  # close() may run before discovery ends
        self.cfg = cfg
        self.scfg: ServerConfig = cfg.server
        self.flavour = FLAVOURS.get(self.scfg.flavour)
        self._loop = asyncio.new_event_loop()
        self.client = ServerClient(self.scfg)  # its HTTP session opens inside the loop
        try:
            self.info: ServerInfo = self._run(self._discover())  # unreachable: BadInput, now
            tok = load_tokenizer(self.scfg.tokenizer)
        except BaseException:
            self.close()
            raise
        self.encode = tok.encode
        self.space = TokenSpace(vocab_size=tok.vocab_size, first_ordinary_id=tok.first_ordinary_id)
        self.backend = f"{self.scfg.flavour}-server"
        self.model_id = self.info.model
        self.block_size = self.info.facts.block_size
        self.cache_state: dict[str, object] = {}
        self.before = self.after = Counters(None, None)
        # subscribed before the warm-up: the final reset's AllBlocksCleared marks where the
        # measured phase's KV events start
        if self.info.kv_events:
            self.kv_sub = kv_events.Subscriber(*self.info.kv_events)
        self.kv_batches: list[kv_events.KvBatch] | None = None
        self.kv_note = "no KV events"
        self.twin: TwinResult | None = None

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    async def _discover(self) -> ServerInfo:
        return await discover(self.client, self.scfg, self.flavour)

    def admit(self, requests: list[Request]) -> None:
        pass  # the server checks each request itself (a refusal is that request's row)

    def warm_up(self, requests: list[Request]) -> None:
        self._run(self._warm_up(requests))

    async def _warm_up(self, requests: list[Request]) -> None:
        for req in requests:
            body = completion_body(self.flavour, self.model_id, req, req.prompt_ids)
            reply = await self.client.complete(body, 1)
            if reply.status == HTTP_ERROR:  # the server refuses what we send: a mismatch
                raise BadInput(
                    f"server.url: the server refused the warm-up request ({reply.error}); "
                    f"server.tokenizer ({self.scfg.tokenizer}) must be the server model's "
                    "tokenizer"
                )
            if reply.status != OK:  # no answer, a cut stream or a bad one: no server to measure
                raise BadInput(
                    f"server.url: the warm-up request got no complete reply ({reply.status}: "
                    f"{reply.error}); see server.read_timeout_s and server.request_timeout_s"
                )

    def flush(self, warmup: list[Request]) -> dict[str, object]:
        """Reset, probe with the first warm-up prompt (it must miss), reset again."""
        self.cache_state = self._run(self._reset_and_probe(warmup))
        return self.cache_state

    async def _reset_and_probe(self, warm: list[Request]) -> dict[str, object]:
        if not (self.scfg.reset_cache and self.flavour.reset_path):
            return {"cache_flushed": False, "reset_probe_cached_tokens": None}
        await reset_cache(self.client, self.flavour)
        probe_cached = None
        if warm:  # the first warm-up prompt again: a hit would mean the reset did not take
            first_output = warm[0].output_ids
            assert first_output is not None  # warm-up requests are scripted
            probe = dataclasses.replace(warm[0], max_new_tokens=None, output_ids=(first_output[0],))
            body = completion_body(self.flavour, self.model_id, probe, probe.prompt_ids)
            reply = await self.client.complete(body, 1)
            probe_cached = reply.cached_tokens
            if reply.status != OK:
                raise BadInput(
                    f"server.url: the reset probe failed ({reply.status}: {reply.error})"
                )
            if probe_cached:
                raise BadInput(
                    "server.url: the cache reset did not take: the probe hit "
                    f"{probe_cached} cached tokens"
                )
            await reset_cache(self.client, self.flavour)
        return {"cache_flushed": True, "reset_probe_cached_tokens": probe_cached}

    def drive(self, requests: list[Request], deliver: Callable[[Sent], None]) -> None:
        """The measured window between two reads of the server's counters."""
        self._run(self._drive(requests, deliver))

    async def _drive(self, requests: list[Request], deliver: Callable[[Sent], None]) -> None:
        self.before = await settled_counters(self.client, self.flavour, wait_s=1.0)
        answered: list[Sent] = []

        def on_sent(item: Sent) -> None:
            if item.reply.status == OK:
                answered.append(item)
            deliver(item)

        await drive(
            self.client,
            requests,
            lambda req, prompt: completion_body(self.flavour, self.model_id, req, prompt),
            self.cfg.load.max_concurrency,
            self.encode,
            closed_loop=self.scfg.closed_loop,
            on_sent=on_sent,
        )
        self.after = await settled_counters(self.client, self.flavour)
        if self.kv_sub is not None:
            if self.cache_state.get("cache_flushed"):  # else the stream is not used (record.py)
                expected = self._prompt_blocks(answered)
                await asyncio.to_thread(self.kv_sub.wait_for, expected, KV_TAIL_WAIT_S)
            got = await asyncio.to_thread(self.kv_sub.stop)
            self.kv_batches, self.kv_note = measured_stream(self.kv_sub, got, self.cache_state)
            self.kv_sub = None

    def _prompt_blocks(self, answered: list[Sent]) -> set[int]:
        """The hashes the server publishes for the full prompt blocks it was sent: each was
        stored since the reset (a block evicted later was stored first)."""
        algo = twin_engine_config(self.cfg.engine, self.info.facts).hash_algo
        return {
            h
            for s in answered
            for h in kv_events.published_hashes(
                s.prompt_ids, self.block_size, algo, s.request.lora_id, s.request.salt
            )
        }

    def rows(
        self, item: Sent, index_of: Mapping[str, int], context: dict[str, object]
    ) -> list[dict]:
        return rows_of(item, index_of, context)

    def record(
        self, cfg: RunConfig, requests: list[Request], items: list[Sent], context: RunContext
    ) -> Recorded:
        window = Window(
            self.info,
            items,
            self.before,
            self.after,
            self.cache_state,
            self.kv_batches,
            self.kv_note,
        )
        recorded, self.twin = record_with_twin(cfg, requests, window, context)
        return recorded

    def write_files(self, out: RunDir) -> None:
        """The server's KV-event stream of the measured phase and the step-locked twin's own
        (the server's facts go into manifest.json through `Recorded.manifest`)."""
        if self.kv_batches is not None:
            kv_events.write(out.path / kv_events.KV_EVENTS_FILE, self.kv_batches)
        if self.twin is not None and self.twin.kv_comparison is not None:
            kv_events.write(out.path / kv_events.TWIN_EVENTS_FILE, self.twin.twin_batches)

    def close(self) -> None:
        """Cancel what an interrupt left running, close the client, then the loop."""
        if self.kv_sub is not None:  # interrupted before the measured window closed
            self.kv_sub.stop(drain_s=0.0)
            self.kv_sub = None
        loop = self._loop
        if loop.is_closed():
            return
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(self.client.aclose())
        loop.close()
