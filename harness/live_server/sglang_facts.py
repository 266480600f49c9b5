"""SGLang's engine facts as its GET /get_server_info states them (SGLang 0.5.23): page size, KV
capacity, chunked-prefill size, running-request limit and the scheduling knobs the twin models
(schedule policy, prefill budget, conservativeness). Each is read from the schedulers' own
`internal_states` where every rank states the same value, else from the launcher's resolved
top-level copy. A value in a form the twin cannot take is bad input, named with where it was read.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from harness.config.errors import BadInput
from harness.live_server.replies import MAX_BLOCK_SIZE


class Stated(NamedTuple):
    """One fact as the server states it, and where in its server info."""

    value: int | float | str | None  # None: the server states it off (chunked prefill)
    where: str  # e.g. "internal_states page_size"


# fact -> its server-info paths, first stated wins; "internal_states" means every scheduler's
# resolved state (SGLang's scheduler_components/internal_state.py), the rest are top-level
# fields (server_args.resolved_dict() plus the scheduler's startup info, utils/common.py
# build_server_info). The top-level max_running_requests is the launch flag (null when SGLang
# derives the limit), the internal one the limit its scheduler runs with.
PATHS: dict[str, tuple[tuple[str, ...], ...]] = {
    "block_size": (("internal_states", "page_size"), ("page_size",)),
    "kv_capacity_tokens": (
        ("max_total_num_tokens",),
        ("internal_states", "memory_usage", "token_capacity"),
    ),
    "max_num_seqs": (
        ("internal_states", "effective_max_running_requests_per_dp"),
        ("max_running_requests",),
    ),
    "max_num_batched_tokens": (
        ("internal_states", "chunked_prefill_size"),
        ("chunked_prefill_size",),
    ),
    "max_prefill_tokens": (("internal_states", "max_prefill_tokens"), ("max_prefill_tokens",)),
    "schedule_policy": (("internal_states", "schedule_policy"), ("schedule_policy",)),
    "schedule_conservativeness": (
        ("internal_states", "schedule_conservativeness"),
        ("schedule_conservativeness",),
    ),
}
# the largest integer each fact may be (the twin's page index; its pool is checked in blocks)
LIMITS = {"block_size": MAX_BLOCK_SIZE}


def sglang_facts(body: object, set_by_user: frozenset[str] = frozenset()) -> dict[str, Stated]:
    """The facts this server info states; a fact it leaves out (or null, where null is not a
    setting) is absent. BadInput for a stated value the twin cannot take, unless the user set
    that fact (`server.<name>`), whose value is then used: the bad one is left out."""
    if not isinstance(body, dict):
        return {}
    found = {}
    for name, paths in PATHS.items():
        for path in paths:
            raw = _at(body, path)
            if raw is _ABSENT:
                continue
            where = " ".join(path)
            if name == "max_num_batched_tokens" and _off(raw):
                found[name] = Stated(None, f"{where}={raw}")  # SGLang: no chunked prefill
                break
            if raw is None:
                continue  # null: not resolved there (max_running_requests when derived)
            try:
                found[name] = Stated(_checked(name, raw, where), where)
            except BadInput:
                if name not in set_by_user:
                    raise
            break
    return found


_ABSENT = object()


def _at(body: dict, path: tuple[str, ...]) -> object:
    """The value at `path`; under "internal_states", the one value every scheduler states."""
    if path[0] != "internal_states":
        return _walk(body, path)
    states = body.get("internal_states")
    if not isinstance(states, list) or not states:
        return _ABSENT
    values = [_walk(s, path[1:]) if isinstance(s, dict) else _ABSENT for s in states]
    first = values[0]
    if first is _ABSENT or any(v is _ABSENT or v != first for v in values):
        return _ABSENT  # ranks disagree or are silent: the launcher's copy decides
    return first


def _walk(node: object, path: tuple[str, ...]) -> object:
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return _ABSENT
        node = node[key]
    return node


def _off(value: object) -> bool:
    """SGLang's chunked_prefill_size for "no chunked prefill": null, or an integer <= 0."""
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value <= 0)


def _checked(name: str, value: object, where: str) -> int | float | str:
    ok: int | float | str | None = None
    if name == "schedule_policy":
        ok, what = (value if isinstance(value, str) and value else None), "a policy name"
    elif name == "schedule_conservativeness":
        what = "a positive number"
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            ok = float(value) if 0 < value < math.inf else None
    else:
        limit = LIMITS.get(name)
        what = "a positive integer" + (f" up to {limit}" if limit else "")
        if isinstance(value, int) and not isinstance(value, bool):
            ok = value if value > 0 and (limit is None or value <= limit) else None
    if ok is None:
        raise BadInput(
            f"server.{name}: the server's /get_server_info {where} is {value!r}, not {what}; "
            f"set server.{name}"
        )
    return ok
