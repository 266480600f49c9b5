"""The OpenAI completions records: a request body checked into `CompletionParams`, the replies.

Field names and reply shapes follow vLLM 0.32's OpenAI server (vllm/entrypoints/openai/
protocol.py `CompletionRequest`, `CompletionResponse`, `CompletionStreamResponse`): `usage` with
`prompt_tokens_details.cached_tokens`, `return_token_ids` adding `token_ids` and
`prompt_token_ids` to each choice, errors as `{"error": {"message", "type", "param", "code"}}`.
Unknown fields are ignored, as vLLM does; fields this server cannot honour are refused by name.
SGLang's `return_cached_tokens_details` adds its `sglext.cached_tokens_details` {device, host,
and storage with a storage tier} (sglang/srt/entrypoints/openai/protocol.py `SglExt`, 0.5.23)
when anything was cached. With a host tier, `prompt_tokens_details` also splits the cached tokens
as vLLM does with a KV connector (`local_cached_tokens`, `external_cached_tokens`; docs/tiers.md
§4).
"""

from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass

MAX_N = 128  # samples per request
_SHOW = reprlib.Repr()  # keyword arguments only from Python 3.12
_SHOW.maxlevel, _SHOW.maxlist, _SHOW.maxtuple, _SHOW.maxdict = 3, 6, 6, 4
_SHOW.maxstring = _SHOW.maxother = 80


# vLLM's error types by status (400, 404, 500 as vLLM names them; the rest in the same style)
_KINDS = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    408: "RequestTimeoutError",
    409: "ConflictError",
    413: "RequestTooLargeError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class ApiError(Exception):
    """A request the server refuses: an HTTP status and vLLM's error body."""

    def __init__(
        self, message: str, param: str | None = None, status: int = 400, kind: str = ""
    ) -> None:
        super().__init__(message)
        self.message, self.param, self.status = message, param, status
        self.kind = kind or _KINDS.get(status, "BadRequestError")

    def body(self) -> dict:
        error = {"message": self.message, "type": self.kind, "param": self.param}
        return {"error": {**error, "code": self.status}}


@dataclass(frozen=True)
class CompletionParams:
    """A checked `POST /v1/completions` body. Exactly one of `prompt_ids`, `prompt_text` is set."""

    model: str | None
    prompt_ids: tuple[int, ...] | None
    prompt_text: str | None
    max_tokens: int | None  # None: the server's default
    min_tokens: int
    ignore_eos: bool
    n: int
    stream: bool
    include_usage: bool
    return_token_ids: bool
    cache_salt: str | None
    priority: int
    return_cached_tokens_details: bool = False  # SGLang's: cached tokens per tier in `sglext`


def parse_completion(body: object) -> CompletionParams:
    """Check a decoded JSON body; raise ApiError naming the first field no request may have."""
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    _refuse_unsupported(body)
    prompt_ids, prompt_text = _prompt(body.get("prompt"))
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise ApiError("stream_options must be an object", "stream_options")
    stream = _bool(body, "stream", False)
    include_usage = _bool(stream_options or {}, "include_usage", False, "stream_options.")
    if stream_options is not None and not stream:
        raise ApiError("stream_options can only be set when stream is true", "stream_options")
    max_tokens = _int(body, "max_tokens", None, 1)
    min_tokens = _int(body, "min_tokens", 0, 0)
    if max_tokens is not None and min_tokens > max_tokens:
        raise ApiError(
            f"min_tokens ({min_tokens}) must be at most max_tokens ({max_tokens})", "min_tokens"
        )
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError("model must be a string", "model")
    if model is not None:
        _text("model", model)
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise ApiError("cache_salt must be a non-empty string", "cache_salt")
    if salt is not None:
        _text("cache_salt", salt)
    return CompletionParams(
        model=model,
        prompt_ids=prompt_ids,
        prompt_text=prompt_text,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=_bool(body, "ignore_eos", False),
        n=_int(body, "n", 1, 1, MAX_N),
        stream=stream,
        include_usage=include_usage,
        return_token_ids=_bool(body, "return_token_ids", False),
        cache_salt=salt,
        priority=_int(body, "priority", 0, -(2**31), 2**31 - 1),
        return_cached_tokens_details=_bool(body, "return_cached_tokens_details", False),
    )


@dataclass(frozen=True)
class TokenizeParams:
    """A checked `POST /tokenize` body (vLLM's completion form: a text prompt)."""

    model: str | None
    prompt_text: str


def parse_tokenize(body: object) -> TokenizeParams:
    """vLLM's `TokenizeCompletionRequest` (vllm/entrypoints/openai/protocol.py, 0.32): `model`
    and a text `prompt`; the chat form (`messages`) is refused by name. The ids are the ones a
    completion of the same text gets here (no special tokens added: text.py)."""
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    if "messages" in body:
        raise ApiError("messages are not supported: send a text prompt", "messages")
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise ApiError("prompt must be a non-empty string", "prompt")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError("model must be a string", "model")
    return TokenizeParams(model=model, prompt_text=_text("prompt", prompt))


def tokenized(ids: tuple[int, ...], max_model_len: int) -> dict:
    """vLLM's `TokenizeResponse`: the ids, their count and the model's context length."""
    return {"count": len(ids), "max_model_len": max_model_len, "tokens": list(ids)}


def _refuse_unsupported(body: dict) -> None:
    """Fields whose meaning this server does not implement, refused rather than ignored."""
    temperature = body.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, (int, float))
    ):
        raise ApiError("temperature must be a number", "temperature")
    if temperature is not None and (not math.isfinite(temperature) or temperature != 0):
        raise ApiError(
            f"temperature must be 0: this server decodes greedily, got {show(temperature)}",
            "temperature",
        )
    if body.get("echo"):
        raise ApiError("echo is not supported", "echo")
    if body.get("logprobs") is not None or body.get("prompt_logprobs") is not None:
        raise ApiError("logprobs are not supported", "logprobs")
    if body.get("suffix"):
        raise ApiError("suffix is not supported", "suffix")
    best_of = body.get("best_of")
    if best_of is not None and best_of != body.get("n", 1):
        raise ApiError("best_of is not supported (greedy decoding)", "best_of")
    for name in ("stop", "stop_token_ids"):
        if body.get(name):
            raise ApiError(f"{name} is not supported: generation ends at max_tokens", name)


def show(value: object) -> str:
    """`repr(value)` cut short: an error message quotes a client's value, never all of it."""
    return _SHOW.repr(value)


def _prompt(value: object) -> tuple[tuple[int, ...] | None, str | None]:
    """A string, a list of token ids, or a batch of one of either."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]
    if isinstance(value, str):
        if not value:
            raise ApiError("prompt must not be empty", "prompt")
        return None, _text("prompt", value)
    if isinstance(value, list) and value and all(_is_int(t) for t in value):
        return tuple(value), None
    if isinstance(value, list) and value and all(isinstance(p, (str, list)) for p in value):
        raise ApiError("batched prompts are not supported; send one prompt a request", "prompt")
    raise ApiError("prompt must be a non-empty string or a non-empty list of token ids", "prompt")


def _text(name: str, value: str) -> str:
    """A string that is Unicode text: JSON's \\ud800 escapes decode to lone surrogates, which no
    UTF-8 text (and no tokenizer) holds."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ApiError(
            f"{name} is not valid Unicode text: a lone surrogate {value[exc.start]!a} at "
            f"character {exc.start}",
            name,
        ) from None
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bool(body: dict, name: str, default: bool, prefix: str = "") -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(f"{prefix}{name} must be true or false, got {show(value)}", prefix + name)
    return value


def _int(body: dict, name: str, default, minimum: int, maximum: int = 2**31 - 1):
    value = body.get(name)
    if value is None:
        return default
    if not _is_int(value) or not minimum <= value <= maximum:
        raise ApiError(
            f"{name} must be an integer in [{minimum}, {maximum}], got {show(value)}", name
        )
    return value


# ------------------------------------------------------------------------------------ replies


def usage(
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int,
    host_cached_tokens: int | None = None,
    storage_cached_tokens: int = 0,
) -> dict:
    """vLLM's usage; `host_cached_tokens` (an engine with a host tier) adds vLLM's split of the
    cached tokens: `local_cached_tokens` (its GPU prefix cache) and `external_cached_tokens`
    (its KV connector: the host tier and, behind it, the storage tier, as vLLM's tiering
    connector reports one hit for both)."""
    details: dict[str, int] = {"cached_tokens": cached_tokens}
    if host_cached_tokens is not None:
        external = host_cached_tokens + storage_cached_tokens
        details["local_cached_tokens"] = cached_tokens - external
        details["external_cached_tokens"] = external
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": details,
    }


# SGLang 0.5.23 names the backend by its class (output_streamer.py `_get_storage_backend_type`);
# its "file" backend is `HiCacheFile` (mem_cache/hicache_storage.py), the one modelled here.
STORAGE_BACKEND = "HiCacheFile"


def cached_tokens_details(
    cached_tokens: int, host_cached_tokens: int, storage_cached_tokens: int | None = None
) -> dict | None:
    """SGLang's `sglext` with the cached tokens per tier; None when nothing was cached (SGLang
    then leaves it out). `storage_cached_tokens` (an engine with a storage tier, 0 included)
    adds `storage` and `storage_backend`, which SGLang sends only with a storage backend."""
    if not cached_tokens:
        return None
    storage = storage_cached_tokens or 0
    details: dict[str, int | str] = {
        "device": cached_tokens - host_cached_tokens - storage,
        "host": host_cached_tokens,
    }
    if storage_cached_tokens is not None:
        details["storage"] = storage_cached_tokens
        details["storage_backend"] = STORAGE_BACKEND
    return {"cached_tokens_details": details}


def choice(
    index: int,
    text: str,
    finish_reason: str | None,
    token_ids: list[int] | None = None,
    prompt_token_ids: list[int] | None = None,
) -> dict:
    """One choice of a reply or of a streamed chunk; the id lists only with return_token_ids."""
    out: dict = {
        "index": index,
        "text": text,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": None,
    }
    if prompt_token_ids is not None:
        out["prompt_token_ids"] = prompt_token_ids
    if token_ids is not None:
        out["token_ids"] = token_ids
    return out


def completion(
    request_id: str, created: int, model: str, choices: list[dict], usage_: dict | None
) -> dict:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage_,
    }


def model_list(name: str, created: int, max_model_len: int) -> dict:
    card = {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "prefixbench",
        "root": name,
        "parent": None,
        "max_model_len": max_model_len,
    }
    return {"object": "list", "data": [card]}
