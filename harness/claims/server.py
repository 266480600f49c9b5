"""The real-server column: claims re-run against a live vLLM server (OpenAI-compatible API).

`server_column(url, quick, off_url, model)` is the hook: None (no server here) gives every
server-runnable claim "not run" with the reason; a URL runs the checks below over HTTP and returns
one line per claim. What runs (issue [4/7] item 4): claim 2 (block alignment at the server's block
size), claim 9 (`cache_salt` per request), claim 10 (same-step sharing in a burst: 8 requests
sharing a 512-token prefix, sent at once) and claim 12 (n > 1 reuse); claim 7 (outputs with the
cache on vs off) needs a second server started with prefix caching off (`off_url`) and runs in the
full run only.

Requests go through the project's one HTTP client (`harness.live_server.http_client.ServerClient`:
aiohttp, one pooled session per server, streamed with usage), with the vLLM flavour's body fields
(`ignore_eos`, `min_tokens = max_tokens`: every output has exactly the length asked for; token ids
returned). Cached tokens are the reply's `usage.prompt_tokens_details.cached_tokens` (vLLM reports
them when started with --enable-prompt-tokens-details). Prompts are token ids, so no tokenizer is
involved; their ids are drawn from `token_ids` (the default suits SmolLM2's 49,152-token vocabulary
of the local server), fresh on every invocation, so a second run against the same server does not
find the first run's blocks. A refused or unanswered request becomes that claim's line.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from harness.live_server import prometheus, replies
from harness.live_server.bounded import CAPS
from harness.live_server.cache_state import settled_counters
from harness.live_server.config import ServerConfig
from harness.live_server.flavours import FLAVOURS
from harness.live_server.http_client import HTTP_ERROR, OK, TIMEOUT, ServerClient
from harness.live_server.replies import BadReply

NOT_RUN = (
    "not run: needs the live vLLM server of issue [2/7] (harness/live_server/, scripts/setup_vllm.sh, the "
    "tests' session server), which this run did not have"
)
QUICK = (2, 9, 10, 18)  # what CI fills; the full run adds 12 and (with a caching-off server) 7
FULL = (2, 7, 9, 10, 12, 18)
VLLM = FLAVOURS.get("vllm")
REQUEST_TIMEOUT_S = 120.0
TOKEN_IDS = range(1000, 20000)  # ordinary ids of the server model's vocabulary (no specials)
Draw = Callable[[int], list[int]]  # n -> n fresh prompt token ids


class ServerFailed(Exception):
    """The server refused a request or did not answer it (the claim's line says which)."""


@dataclass(frozen=True)
class Completion:
    cached_tokens: int
    texts: tuple[str, ...]  # one per sample
    token_ids: tuple[tuple[int, ...], ...]  # one per sample, as the server returned them
    send_s: float  # perf_counter when it was handed to the client
    finish_s: float  # perf_counter of its last byte
    first_token_s: float  # perf_counter of its first token (the earliest sample's)


class Server:
    """One live server: its pooled client and the served model name (None: the server's default)."""

    def __init__(self, url: str, model: str | None, label: str = "") -> None:
        self.client = ServerClient(ServerConfig(url=url, request_timeout_s=REQUEST_TIMEOUT_S))
        self.model = model
        self.label = label  # prefixed to its failures ("" for the server under test)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def complete(
        self, prompt: list[int], max_tokens: int = 1, n: int = 1, **extra: object
    ) -> Completion:
        """One streamed /v1/completions call with a token-id prompt, greedy unless `extra` says
        otherwise; a refusal or no answer raises ServerFailed."""
        body: dict[str, object] = {
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "n": n,
            "stream": True,
            "stream_options": {"include_usage": True},
            **VLLM.extra_body,
            **extra,
        }
        for name in VLLM.fixed_length_fields:
            body[name] = max_tokens
        if self.model is not None:
            body["model"] = self.model
        reply = await self.client.complete(body, n)
        if reply.status == HTTP_ERROR:
            raise ServerFailed(f"{self.label}HTTP {reply.http_status}: {reply.error}")
        if reply.status == TIMEOUT:
            raise ServerFailed(f"{self.label}no reply within {REQUEST_TIMEOUT_S:.0f} s")
        if reply.status != OK:
            raise ServerFailed(f"{self.label}no reply: {reply.error}")
        if reply.cached_tokens is None:
            raise ServerFailed(
                f"{self.label}the reply reports no cached tokens "
                "(start vLLM with --enable-prompt-tokens-details)"
            )
        return Completion(
            reply.cached_tokens,
            tuple(c.text for c in reply.choices),
            tuple(tuple(c.token_ids) for c in reply.choices),
            reply.send_s,
            reply.finish_s,
            min(
                (c.token_times_s[0] for c in reply.choices if c.token_times_s),
                default=reply.finish_s,
            ),
        )

    async def block_size(self) -> int:
        """The server's block size from /metrics `vllm:cache_config_info` (vLLM reports it there)."""
        resp = await self.client.get("/metrics", CAPS.metrics_bytes, timeout_s=30.0)
        if resp.status_code != 200:
            raise ServerFailed(f"{self.label}GET /metrics answered HTTP {resp.status_code}")
        samples = prometheus.parse(resp.text)
        labels = prometheus.info_labels(samples, VLLM.cache_config_metric)
        try:
            block_size, _ = replies.cache_facts(labels)
        except BadReply as exc:
            raise ServerFailed(f"{self.label}{exc}") from None
        if block_size is None:
            raise ServerFailed(f"{self.label}/metrics reports no {VLLM.cache_config_metric}")
        return block_size


def server_column(
    url: str | None,
    quick: bool,
    off_url: str | None = None,
    model: str | None = None,
    token_ids: range = TOKEN_IDS,
) -> dict[int, str]:
    """claim number -> its real-server result line (or why it did not run)."""
    numbers = QUICK if quick else FULL
    if url is None:
        return {n: NOT_RUN for n in numbers}
    return asyncio.run(_column(url, numbers, off_url, model, token_ids))


async def _column(
    url: str, numbers: tuple[int, ...], off_url: str | None, model: str | None, token_ids: range
) -> dict[int, str]:
    on = Server(url, model)
    off = Server(off_url, model, "caching-off server: ") if off_url is not None else None
    nonce = random.SystemRandom().getrandbits(64)  # fresh prompts on every invocation

    def draw(claim: int) -> Draw:
        rng = random.Random(f"{claim}-{nonce}")
        return lambda n: [rng.choice(token_ids) for _ in range(n)]

    checks: dict[int, Callable[[], Awaitable[str]]] = {
        2: lambda: _alignment(on, draw(2)),
        9: lambda: _salt(on, draw(9)),
        10: lambda: _burst(on, draw(10)),
        12: lambda: _parallel(on, draw(12)),
        7: lambda: _outputs(on, off, draw(7)),
        18: lambda: _ttft(on, off, draw(18)),
    }
    out = {}
    try:
        for n in numbers:
            try:
                out[n] = await checks[n]()
            except ServerFailed as exc:  # a server problem is that claim's line, not a crash
                out[n] = f"failed on the server: {exc}"
            except Exception as exc:
                out[n] = f"failed on the server: {type(exc).__name__}: {exc}"
    finally:
        await on.aclose()
        if off is not None:
            await off.aclose()
    return out


async def _alignment(on: Server, draw: Draw) -> str:
    block = await on.block_size()
    shared = 3 * block + block // 2  # three full blocks of the server's and half of a fourth
    head = draw(shared)
    await on.complete(head + draw(20))
    got = (await on.complete(head + draw(20))).cached_tokens
    aligned = "block-aligned" if got == 3 * block else "not aligned"
    return f"{shared} shared tokens, block {block}: {got} cached ({aligned})"


async def _salt(on: Server, draw: Draw) -> str:
    head = draw(512)
    await on.complete(head + draw(8), cache_salt="tenant-a")
    same = (await on.complete(head + draw(8), cache_salt="tenant-a")).cached_tokens
    other = (await on.complete(head + draw(8), cache_salt="tenant-b")).cached_tokens
    return f"512 shared tokens: same tenant {same} cached, other tenant {other} cached"


async def _burst(on: Server, draw: Draw) -> str:
    head = draw(512)
    prompts = [head + draw(16) for _ in range(8)]
    # All 8 in flight at once over the one pooled session (the connector has no per-host cap).
    replies = await asyncio.gather(*(on.complete(p) for p in prompts))
    cached = [r.cached_tokens for r in replies]
    hits = sum(c >= 512 for c in cached)
    # Sent before the first reply ended: how many the server could have scheduled together. With
    # one output token a reply ends right after its prefill, so the spread of the ends tells one
    # step (same-step sharing: the 7 followers' 16 new tokens each fit beside the first's 528)
    # from several (the local server's 2,048-token step budget cannot hold 8 full prompts of 528).
    first_end = min(r.finish_s for r in replies)
    together = sum(r.send_s < first_end for r in replies)
    spread_ms = (max(r.finish_s for r in replies) - first_end) * 1e3
    return (
        f"burst of 8 sharing 512 tokens, {together} of 8 in flight together: {hits} of 8 hit the "
        f"prefix (cached {cached}), replies ended within {spread_ms:.0f} ms of each other"
    )


async def _parallel(on: Server, draw: Draw) -> str:
    # The usage of an n > 1 reply counts one sample's cached tokens; the other samples' reuse of
    # its prefill shows in the server's hit counter (None: the server exports none).
    before = (await settled_counters(on.client, VLLM, wait_s=1.0)).hits
    # vLLM refuses n > 1 under greedy sampling: the samples are drawn, seeded.
    got = await on.complete(draw(1024), max_tokens=4, n=4, temperature=1.0, seed=12)
    after = (await settled_counters(on.client, VLLM)).hits
    counted = (
        "no hit counter on /metrics"
        if before is None or after is None
        else f"the server's hit counter rose by {after - before:,.0f} tokens"
    )
    return (
        f"n=4 on a fresh 1,024-token prompt: usage reports {got.cached_tokens} cached tokens "
        f"(one sample's count); {counted}"
    )


async def _outputs(on: Server, off: Server | None, draw: Draw) -> str:
    if off is None:
        return "not run: needs a second server started with prefix caching off (--server-off URL)"
    head = draw(256)
    prompts = [head + draw(16) for _ in range(6)]
    # One at a time on each server: on the caching-on one, prompts 2-6 find the shared prefix.
    with_cache = [await on.complete(p, max_tokens=64) for p in prompts]
    without = [await off.complete(p, max_tokens=64) for p in prompts]
    same = sum(
        (a.token_ids, a.texts) == (b.token_ids, b.texts) for a, b in zip(with_cache, without)
    )
    used = sum(r.cached_tokens > 0 for r in with_cache)
    off_cached = sum(r.cached_tokens for r in without)
    return (
        f"{same}/{len(prompts)} greedy 64-token outputs identical, caching on vs off (caching on: "
        f"{used} of {len(prompts)} prompts had cached tokens; caching off: {off_cached} cached "
        "tokens reported)"
    )


async def _ttft(on: Server, off: Server | None, draw: Draw) -> str:
    """Claim 18 on the server: six prompts sharing a 1,024-token prefix, one at a time, one output
    token each; TTFT of the five that find the prefix against the cold first one, and against the
    same prompts on the caching-off server when there is one."""
    head = draw(1024)
    prompts = [head + draw(16) for _ in range(6)]
    warm = [await on.complete(p) for p in prompts]
    ttft_ms = [(r.first_token_s - r.send_s) * 1e3 for r in warm]
    hit = [t for t, r in zip(ttft_ms[1:], warm[1:]) if r.cached_tokens > 0]
    line = (
        f"1,040-token prompts sharing 1,024 tokens, one at a time: cold TTFT {ttft_ms[0]:.0f} ms, "
        f"median TTFT of the {len(hit)} that hit {statistics.median(hit):.0f} ms"
        if hit
        else f"no prompt hit the shared prefix (cached {[r.cached_tokens for r in warm]})"
    )
    if off is not None:
        cold = [await off.complete(p) for p in prompts]
        off_ms = statistics.median((r.first_token_s - r.send_s) * 1e3 for r in cold)
        line += f"; the caching-off server's median TTFT on the same prompts {off_ms:.0f} ms"
    return line
