"""The twin: a server run's token streams replayed through the built-in engine, request by request.

Input is what was actually sent (prompt ids) and received (each sample's token ids), and the
server's settings (block size, usable KV capacity, max_num_seqs, max_num_batched_tokens); never
a measured cached-token count. One request in flight: the replay keeps the send order, one at a
time (exact on vLLM). Concurrent sends: the replay releases each request at its send offset on the
simulated executor's virtual clock; how the server batched is unknown to it, so the distance to
the measured counts is the finding, not an error. The engine follows vLLM 0.33 / SGLang 0.5.23
semantics (docs/apc.md, docs/radix.md); the CPU vLLM server here is 0.32 (docs/servers.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import yaml

from engines.build import build_engine
from engines.config import EngineConfig
from harness.client.inprocess import drive
from harness.config.schema import CONF_DIR
from harness.live_server.driver import Sent
from workloads.bounds import Replay, run_bounds
from workloads.request import Request

TWIN_HARDWARE = "cpu_measured"  # prices the steps of a concurrent replay (host time not charged)


@dataclass(frozen=True)
class ServerFacts:
    """What the twin needs to know about the server (read from it, or from ServerConfig)."""

    block_size: int
    kv_capacity_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int | None


@dataclass(frozen=True)
class TwinResult:
    predicted: dict[str, int]  # child request id -> predicted cached tokens
    one_at_a_time: bool
    evictions: int
    engine: dict  # the twin's engine settings, for the manifest
    bounds: dict  # ideal / LRU / Belady hit rates of the streams actually sent


def child_id(parent: str, n: int, index: int) -> str:
    return parent if n == 1 else f"{index}_{parent}"


def twin_requests(sent: Sequence[Sent]) -> list[Request]:
    """Every API request the server generated tokens for, as a workload Request whose prompt is
    what was sent and whose script is what came back, released at its send offset."""
    out = []
    for s in sorted(sent, key=lambda s: s.reply.send_s):
        outputs = [tuple(c.token_ids) for c in s.reply.choices]
        length = min((len(o) for o in outputs), default=0)
        if length == 0:
            continue  # never admitted (HTTP 400, refused) or cut before any token
        outputs = [o[:length] for o in outputs]
        out.append(
            Request(
                request_id=s.request.request_id,
                prompt_ids=s.prompt_ids,
                output_ids=outputs[0],
                arrival_s=max(0.0, s.send_s),
                n=len(outputs),
                sample_output_ids=tuple(outputs) if len(outputs) > 1 else (),
                salt=s.request.salt,
            )
        )
    return out


def twin_engine_config(engine: EngineConfig, facts: ServerFacts) -> EngineConfig:
    return dataclasses.replace(
        engine,
        block_size=facts.block_size,
        kv_capacity_tokens=facts.kv_capacity_tokens,
        max_num_seqs=facts.max_num_seqs,
        max_num_batched_tokens=facts.max_num_batched_tokens,
    )


def twin_hardware(hardware) -> object:
    """The run's `hardware=` if given, else this CPU's fitted model, host time not charged (so a
    replay is deterministic)."""
    if hardware is not None:
        return hardware
    body = yaml.safe_load((CONF_DIR / "hardware" / f"{TWIN_HARDWARE}.yaml").read_text())
    body.pop("defaults", None)
    body["charge_host_time"] = False
    return body


class _Context:
    def __init__(self, max_model_len: int | None) -> None:
        self.max_position_embeddings = max_model_len


def predict(
    sent: Sequence[Sent],
    engine: EngineConfig,
    facts: ServerFacts,
    one_at_a_time: bool,
    hardware=None,
) -> TwinResult:
    cfg = twin_engine_config(engine, facts)
    requests = twin_requests(sent)
    twin = build_engine(
        cfg, _Context(facts.max_model_len), executor="simulated", hardware=twin_hardware(hardware)
    )
    cap = 1 if one_at_a_time else None
    records = drive(twin, requests, scripted=True, max_concurrency=cap) if requests else []
    stats = twin.cache.stats()
    knobs = {
        **cfg.design_knobs(),
        "block_size": cfg.block_size,
        "kv_capacity_tokens": cfg.kv_capacity_tokens,
        "max_num_seqs": cfg.max_num_seqs,
        "max_num_batched_tokens": cfg.max_num_batched_tokens,
    }
    return TwinResult(
        predicted={r.request_id: r.cached_tokens for r in records},
        one_at_a_time=one_at_a_time,
        evictions=stats.num_evictions,
        engine=knobs,
        bounds=stream_bounds(sent, facts),
    )


def stream_bounds(sent: Sequence[Sent], facts: ServerFacts) -> dict:
    """Ideal, LRU and Belady hit rates (workloads/bounds.py) of the streams actually sent, at the
    server's block size and capacity; a turn's reply stays cached for its follower."""
    followed = {s.request.after for s in sent if s.request.after is not None}
    replays = []
    for s in sorted(sent, key=lambda s: s.reply.send_s):
        if not s.reply.choices or not s.reply.choices[0].token_ids:
            continue
        prompt = np.asarray(s.prompt_ids, dtype=np.int64)
        cached = prompt
        if s.request.request_id in followed:
            reply = np.asarray(s.reply.choices[0].token_ids[:-1], dtype=np.int64)
            cached = np.concatenate([prompt, reply])
        replays.append(Replay(prompt, cached, len(s.reply.choices), s.request.salt))
    g = facts.block_size
    if not replays:
        return {
            "ideal_hit_rate": None,
            "theoretical_hit_rate_capped": None,
            "belady_hit_rate": None,
        }
    found = run_bounds(replays, [g], g, facts.kv_capacity_tokens // g)
    return {
        "ideal_hit_rate": found.ideal.get(g),
        "theoretical_hit_rate_capped": found.capped.get("lru"),
        "belady_hit_rate": found.capped.get("belady"),
    }
