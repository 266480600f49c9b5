"""What a live server says about itself: the model it serves, its version, and its cache facts
(block size, KV capacity) from /metrics, where ServerConfig does not set them. An unreachable or
non-OpenAI server is bad input (exit 2), found before anything else of a run is done."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from harness.config.errors import BadInput
from harness.live_server import prometheus
from harness.live_server.cache_state import metric_samples
from harness.live_server.config import ServerConfig
from harness.live_server.flavours import Flavour
from harness.live_server.http_client import TRANSPORT_ERRORS, ServerClient
from harness.live_server.twin import ServerFacts


@dataclass(frozen=True)
class ServerInfo:
    """What the server says about itself (and what ServerConfig fills in where it is silent)."""

    model: str
    version: str | None
    facts: ServerFacts
    cache_config: dict[str, str]  # labels of vllm:cache_config_info, as read


async def discover(client: ServerClient, scfg: ServerConfig, flavour: Flavour) -> ServerInfo:
    """Model name, version and cache facts; an unreachable server is BadInput (exit 2)."""
    try:
        resp = await client.get("/v1/models")
    except TRANSPORT_ERRORS as exc:
        raise BadInput(
            f"server.url: cannot reach {scfg.base_url} ({type(exc).__name__}: {exc}); start a "
            "server (bash scripts/start_vllm.sh) or pass server.url=http://HOST:PORT"
        ) from None
    if resp.status_code != 200:
        raise BadInput(
            f"server.url: GET {scfg.base_url}/v1/models answered HTTP {resp.status_code}; is it "
            "an OpenAI-compatible server?"
        )
    models = cast(dict[str, Any], resp.json()).get("data") or []  # a non-object fails here
    if scfg.model is not None:
        entry = next((m for m in models if m.get("id") == scfg.model), None)
        if entry is None:
            served = ", ".join(str(m.get("id")) for m in models) or "none"
            raise BadInput(f"server.model: {scfg.model!r} is not served; served: {served}")
    elif models:
        entry = models[0]
    else:
        raise BadInput(f"server.url: {scfg.base_url} serves no model (GET /v1/models is empty)")
    version = await _version(client, flavour)
    labels = prometheus.info_labels(await metric_samples(client), flavour.cache_config_metric)
    facts = _facts(scfg, labels, entry.get("max_model_len"))
    return ServerInfo(str(entry["id"]), version, facts, labels)


async def _version(client: ServerClient, flavour: Flavour) -> str | None:
    if flavour.version_path is None:
        return None
    try:
        resp = await client.get(flavour.version_path)
        body = cast(dict[str, Any], resp.json())  # a non-object raises AttributeError below
        return str(body.get("version")) if resp.status_code == 200 else None
    except TRANSPORT_ERRORS + (ValueError, AttributeError):
        return None


def _facts(scfg: ServerConfig, labels: dict[str, str], max_model_len) -> ServerFacts:
    block = scfg.block_size or _int(labels.get("block_size"))
    if block is None:
        raise BadInput(
            "server.block_size: the server does not report its block (page) size; set it"
        )
    capacity = scfg.kv_capacity_tokens
    blocks = _int(labels.get("num_gpu_blocks"))
    if capacity is None and blocks is not None:
        capacity = (blocks - 1) * block  # block 0 is vLLM's null block
    if capacity is None:
        raise BadInput(
            "server.kv_capacity_tokens: the server does not report its KV capacity; set it"
        )
    capacity -= capacity % block
    return ServerFacts(
        block_size=block,
        kv_capacity_tokens=capacity,
        max_num_seqs=scfg.max_num_seqs,
        max_num_batched_tokens=scfg.max_num_batched_tokens,
        max_model_len=_int(max_model_len),
    )


def _int(value) -> int | None:
    try:
        return int(float(value)) if value not in (None, "", "None") else None
    except (TypeError, ValueError):
        return None
