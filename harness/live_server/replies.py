"""One typed check of everything a server reports, before the client uses any of it.

JSON is parsed strictly (no NaN, no Infinity, bounded nesting); counts are integers in range;
consistency is checked (cached <= prompt tokens, outputs <= max_tokens per sample, counters finite
and never going back). A failed check is a `BadReply` naming the field and the value: the caller
makes it a failed request row, a bad-server line (exit 2) or a counter left out with a warning,
never a crash and never a number in a summary.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

MAX_TOKENS_PER_REPLY = 1 << 24  # no server holds a 16M-token sequence
MAX_BLOCK_SIZE = 1 << 12  # tokens per KV block/page
MAX_KV_BLOCKS = 1 << 24  # the twin allocates one record per block: 16.7M is past any server today
MAX_TIER_TOKENS = 1 << 36  # engines/cache/tiers.py's largest host tier


class BadReply(ValueError):
    """A server answer that fails the checks; the message says which field and why."""


def parse_json(data: bytes | str, what: str) -> object:
    """Strict JSON: NaN/Infinity and deeper nesting than Python's stack are refused."""

    def no_constant(name: str) -> object:
        raise BadReply(f"{what}: {name} is not a JSON number")

    try:
        return json.loads(data, parse_constant=no_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadReply(f"{what}: not valid JSON ({str(exc).splitlines()[0][:120]})") from None
    except RecursionError:
        raise BadReply(f"{what}: JSON nested too deeply") from None


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def count(value: object, what: str, upper: int = MAX_TOKENS_PER_REPLY) -> int:
    """A non-negative integer count (an integral float such as 12.0 is taken), at most `upper`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadReply(f"{what} must be an integer, got {_show(value)}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise BadReply(f"{what} must be an integer, got {_show(value)}")
    number = int(value)
    if not 0 <= number <= upper:
        raise BadReply(f"{what} must be between 0 and {upper}, got {number}")
    return number


def optional_count(value: object, what: str, upper: int = MAX_TOKENS_PER_REPLY) -> int | None:
    return None if value is None else count(value, what, upper)


def obj(value: object, what: str) -> dict:
    if not isinstance(value, dict):
        raise BadReply(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


# ---------------------------------------------------------------- server facts


@dataclass(frozen=True)
class ModelEntry:
    id: str
    max_model_len: int | None


def models(body: object) -> list[ModelEntry]:
    """GET /v1/models: {"data": [{"id": str, "max_model_len"?: int}, ...]}."""
    data = obj(body, "GET /v1/models").get("data")
    if data is None:
        return []
    if not isinstance(data, list):
        raise BadReply(f"GET /v1/models: `data` must be a list, got {type(data).__name__}")
    out = []
    for i, entry in enumerate(data):
        entry = obj(entry, f"GET /v1/models: data[{i}]")
        model_id = entry.get("id")
        if not isinstance(model_id, str) or not model_id or len(model_id) > 1000:
            raise BadReply(
                f"GET /v1/models: data[{i}].id must be a model name, got {_show(model_id)}"
            )
        limit = optional_count(
            entry.get("max_model_len"), f"GET /v1/models: data[{i}].max_model_len"
        )
        out.append(ModelEntry(model_id, limit))
    return out


def version(body: object) -> str | None:
    """A version string from {"version": ...}; anything else is no version (it is only shown)."""
    value = body.get("version") if isinstance(body, dict) else None
    return value[:100] if isinstance(value, str) and value else None


def cache_facts(labels: dict[str, str]) -> tuple[int | None, int | None]:
    """(block_size, num_gpu_blocks) from a cache-config info metric's labels; absent is None."""
    return (
        _label_count(labels, "block_size", 1, MAX_BLOCK_SIZE),
        _label_count(labels, "num_gpu_blocks", 2, MAX_KV_BLOCKS + 1),  # block 0: vLLM's null one
    )


def host_tier_tokens(labels: dict[str, str]) -> int | None:
    """The host tier's size in tokens from the cache-config info metric (the built-in server's
    `host_tier_tokens` label); absent is None (no tier, or a server that does not say)."""
    return _label_count(labels, "host_tier_tokens", 1, MAX_TIER_TOKENS)


def _label_count(labels: dict[str, str], name: str, lower: int, upper: int) -> int | None:
    text = labels.get(name)
    if text in (None, "", "None"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise BadReply(f"/metrics: {name}={text!r} is not a number") from None
    if not (math.isfinite(value) and value.is_integer() and lower <= value <= upper):
        raise BadReply(f"/metrics: {name}={text!r} must be an integer from {lower} to {upper}")
    return int(value)


def counter(value: float | None, name: str) -> float | None:
    """A Prometheus counter's value: finite and non-negative."""
    if value is None:
        return None
    if not math.isfinite(value) or value < 0:
        raise BadReply(f"/metrics: counter {name} is {value}, not a finite count")
    return value


def delta(before: float | None, after: float | None, name: str) -> int | None:
    """A counter's growth over the measured phase; a counter that went back is refused."""
    if before is None or after is None:
        return None
    if after < before:
        raise BadReply(f"/metrics: counter {name} went back from {before:g} to {after:g}")
    return int(round(after - before))


# ---------------------------------------------------------------- a completion stream


def token_ids(value: object, what: str) -> list[int]:
    if not isinstance(value, list):
        raise BadReply(f"{what} must be a list of token ids, got {type(value).__name__}")
    return [count(t, f"{what}[{i}]", upper=(1 << 31) - 1) for i, t in enumerate(value)]


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None
    host_cached_tokens: int | None = None  # of cached_tokens, a host tier's; None: not reported
    # of cached_tokens, a storage tier's (not among the host's); None: not reported
    storage_cached_tokens: int | None = None


def usage(
    value: object, prompt_len: int, max_tokens: int, num_choices: int, sglext: object = None
) -> Usage:
    """The final usage object, checked against what was sent: cached <= prompt tokens, and no
    more completion tokens than max_tokens per sample. The tiers' parts of the cached tokens come
    from SGLang's `sglext.cached_tokens_details` {device, host, storage} where the reply has it
    (a stream sends it in a chunk of its own), else from vLLM's `external_cached_tokens` beside
    them, which is a connector's whole hit (host and storage tiers together: the host part)."""
    body = obj(value, "usage")
    prompt = optional_count(body.get("prompt_tokens"), "usage.prompt_tokens")
    details = body.get("prompt_tokens_details")
    cached = host = storage = None
    if details is not None:
        details = obj(details, "usage.prompt_tokens_details")
        cached = optional_count(
            details.get("cached_tokens"), "usage.prompt_tokens_details.cached_tokens"
        )
        host = _split(details, cached, "usage.prompt_tokens_details", "local", "external")
    if sglext is not None:
        found = obj(sglext, "sglext").get("cached_tokens_details")
        if found is not None:
            found = obj(found, "sglext.cached_tokens_details")
            host, storage = _sglang_tiers(found, cached, host)
    completion = optional_count(body.get("completion_tokens"), "usage.completion_tokens")
    if cached is not None and cached > (prompt if prompt is not None else prompt_len):
        raise BadReply(
            f"usage: cached_tokens {cached} is more than the {prompt or prompt_len} prompt tokens"
        )
    if completion is not None and completion > max_tokens * num_choices:
        raise BadReply(
            f"usage: completion_tokens {completion} is more than max_tokens={max_tokens} "
            f"x {num_choices} samples"
        )
    return Usage(prompt, cached, completion, host, storage)


def _split(body: dict, cached: int | None, what: str, device: str, host: str) -> int | None:
    """The host part of `cached` from a per-tier pair of fields (vLLM: local_cached_tokens /
    external_cached_tokens, SGLang: device / host), which must add up to it; None: absent."""
    suffix = "_cached_tokens" if device == "local" else ""
    names = (device + suffix, host + suffix)
    first, second = (optional_count(body.get(n), f"{what}.{n}") for n in names)
    if second is None:
        return None
    if cached is not None and first is not None and first + second != cached:
        raise BadReply(
            f"{what}: {names[0]} {first} + {names[1]} {second} is not cached_tokens {cached}"
        )
    if cached is not None and second > cached:
        raise BadReply(f"{what}: {names[1]} {second} is more than cached_tokens {cached}")
    return second


def _sglang_tiers(
    found: dict, cached: int | None, external: int | None
) -> tuple[int | None, int | None]:
    """SGLang's host and storage parts (storage None: the server has no storage backend), which
    with the device part must add up to `cached`; a vLLM split in the same reply (the built-in
    server sends both) must agree: its external part is host + storage."""
    what = "sglext.cached_tokens_details"
    storage = optional_count(found.get("storage"), f"{what}.storage")
    if storage is None:
        host = _split(found, cached, what, "device", "host")
    else:
        device, host = (optional_count(found.get(n), f"{what}.{n}") for n in ("device", "host"))
        if host is None:
            raise BadReply(f"{what}: storage {storage} without host")
        if cached is not None and device is not None and device + host + storage != cached:
            raise BadReply(
                f"{what}: device {device} + host {host} + storage {storage} is not "
                f"cached_tokens {cached}"
            )
        if cached is not None and host + storage > cached:
            raise BadReply(f"{what}: host {host} + storage {storage} is more than {cached}")
    if host is None:
        return external, None
    if external is not None and external != host + (storage or 0):
        raise BadReply(
            f"usage.prompt_tokens_details.external_cached_tokens {external} is not {what}'s "
            f"host {host} + storage {storage or 0}"
        )
    return host, storage


def choice_index(value: object, num_choices: int) -> int:
    index = count(value if value is not None else 0, "choices[].index", upper=1 << 16)
    if index >= num_choices:
        raise BadReply(f"choices[].index {index} is out of range for n={num_choices}")
    return index


def check_output_len(num_out: int, max_tokens: int, index: int) -> None:
    if num_out > max_tokens:
        raise BadReply(f"sample {index} got {num_out} tokens or more for max_tokens={max_tokens}")
