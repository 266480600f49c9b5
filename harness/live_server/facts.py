"""The twin's server facts, each from the user's `server.<name>`, else what the server states
(vLLM: /metrics `vllm:cache_config_info`; SGLang: GET /get_server_info, sglang_facts.py), else a
default where one is safe; with where each came from, for the manifest. A user value the server
contradicts wins, as `server.overlap` does; its source and a warning name the server's value.
"""

from __future__ import annotations

import logging

from engines.sched.policies import POLICIES
from harness.config.errors import BadInput
from harness.live_server import replies
from harness.live_server.config import ServerConfig
from harness.live_server.replies import BadReply
from harness.live_server.sglang_facts import Stated, sglang_facts
from harness.live_server.twin import ServerFacts

log = logging.getLogger("harness.live_server")

# Where neither the user nor the server says (vLLM reports neither limit): the harness's own
# defaults, which the launcher (scripts/start_vllm.sh) starts vLLM with.
DEFAULTS: dict[str, int] = {"max_num_seqs": 64, "max_num_batched_tokens": 2048}
# the scheduling knobs of SGLang's scheduler the twin models; None where nobody says: the twin
# keeps its `engine.` value
SGLANG_KNOBS = ("schedule_policy", "max_prefill_tokens", "schedule_conservativeness")


def server_facts(
    scfg: ServerConfig,
    labels: dict[str, str],
    server_info: object,
    max_model_len: int | None,
    asynchronous: bool | None,
    scheduling_source: str,
) -> ServerFacts:
    """The facts the twin runs on. `labels`: vLLM's cache-config metric labels; `server_info`:
    SGLang's /get_server_info body (None for a server without one)."""
    user = {name: getattr(scfg, name) for name in (*DEFAULTS, *SGLANG_KNOBS)}
    user |= {"block_size": scfg.block_size, "kv_capacity_tokens": scfg.kv_capacity_tokens}
    set_by_user = frozenset(name for name, value in user.items() if value is not None)
    stated = {**_vllm_stated(labels, scfg.block_size), **sglang_facts(server_info, set_by_user)}
    chosen: dict[str, object] = {}
    sources: dict[str, str] = {}
    for name in ("block_size", "kv_capacity_tokens", *DEFAULTS, *SGLANG_KNOBS):
        value, sources[name] = _resolve(name, user[name], stated.get(name))
        chosen[name] = value
    block, capacity = _geometry(chosen)
    try:
        host_tier = replies.host_tier_tokens(labels)
    except BadReply as exc:
        raise BadInput(f"server.url: {exc}; the twin's host tier cannot be sized") from None
    if host_tier is not None:
        sources["host_tier_tokens"] = "/metrics vllm:cache_config_info host_tier_tokens"
    policy = chosen["schedule_policy"]
    if policy is not None and policy not in POLICIES:
        log.warning(
            "warning: the server schedules with %r, which the twin does not model (it models %s); "
            "the twin keeps engine.policy (set server.schedule_policy to choose)",
            policy,
            ", ".join(POLICIES.names()),
        )
        sources["schedule_policy"] += "; not modelled: the twin keeps engine.policy"
        policy = None
    return ServerFacts(
        block_size=block,
        kv_capacity_tokens=capacity,
        max_num_seqs=_as_int(chosen["max_num_seqs"]),
        max_num_batched_tokens=_as_int(chosen["max_num_batched_tokens"]),
        max_model_len=max_model_len,
        async_scheduling=asynchronous,
        scheduling_source=scheduling_source,
        host_tier_tokens=host_tier,
        schedule_policy=None if policy is None else str(policy),
        max_prefill_tokens=_opt_int(chosen["max_prefill_tokens"]),
        schedule_conservativeness=_opt_float(chosen["schedule_conservativeness"]),
        sources=sources,
    )


def _resolve(name: str, user: object, stated: Stated | None) -> tuple[object, str]:
    """(value, where it came from): the user's, else the server's, else the default (if any)."""
    if user is not None:
        if stated is None or stated.value == user:
            return user, f"server.{name}"
        if stated.value is None:  # SGLang without chunked prefill: the user chose the chunk
            return user, f"server.{name}; the server's {stated.where}"
        log.warning(
            "warning: server.%s=%s overrides the server's own %s (%s)",
            name,
            user,
            stated.value,
            stated.where,
        )
        return user, f"server.{name}, over the server's {stated.where}={stated.value}"
    default = DEFAULTS.get(name)
    if stated is not None and stated.value is not None:
        return stated.value, f"{stated.where}={stated.value}"
    if stated is not None and default is not None:  # SGLang without chunked prefill
        return default, (
            f"{stated.where}: the server does not chunk prefills, which the twin does not "
            f"model; it chunks at {default}, the harness default (set server.{name})"
        )
    if default is not None:
        return default, f"assumed: {default}, the harness default; the server does not say"
    return None, "not stated by the server"


def _vllm_stated(labels: dict[str, str], user_block: int | None) -> dict[str, Stated]:
    """vLLM's block size and usable KV tokens from its cache-config labels; block 0 is vLLM's
    null block, so the usable tokens are (num_gpu_blocks - 1) blocks of the block size used."""
    try:
        block, blocks = replies.cache_facts(labels)
    except BadReply as exc:  # block_size 0, a NaN block count: set the facts by hand
        raise BadInput(
            f"server.block_size: {exc}; set server.block_size and server.kv_capacity_tokens"
        ) from None
    where = "/metrics vllm:cache_config_info"
    out = {}
    if block is not None:
        out["block_size"] = Stated(block, f"{where} block_size")
    used = user_block or block
    if blocks is not None and used is not None:
        out["kv_capacity_tokens"] = Stated(
            (blocks - 1) * used, f"{where} (num_gpu_blocks={blocks} - 1) x block {used}"
        )
    return out


def _geometry(chosen: dict[str, object]) -> tuple[int, int]:
    """Block size and usable KV tokens, a whole number of blocks the twin can hold."""
    block, capacity = chosen["block_size"], chosen["kv_capacity_tokens"]
    if block is None:
        raise BadInput(
            "server.block_size: the server does not report its block (page) size; set it"
        )
    if capacity is None:
        raise BadInput(
            "server.kv_capacity_tokens: the server does not report its KV capacity; set it"
        )
    block, capacity = _as_int(block), _as_int(capacity)
    capacity -= capacity % block
    if capacity // block > replies.MAX_KV_BLOCKS:  # checked before the twin allocates its pool
        raise BadInput(
            f"server.kv_capacity_tokens: {capacity} tokens are {capacity // block} blocks of "
            f"{block}; the twin holds at most {replies.MAX_KV_BLOCKS} blocks"
        )
    return block, capacity


def _as_int(value: object) -> int:
    assert isinstance(value, int)
    return value


def _opt_int(value: object) -> int | None:
    return None if value is None else _as_int(value)


def _opt_float(value: object) -> float | None:
    assert value is None or isinstance(value, (int, float))
    return None if value is None else float(value)
