"""The real-server column: claims re-run against a live vLLM server (OpenAI-compatible API).

`server_column(url, quick)` is the hook: None (no server here) gives every server-runnable claim
"not run" with the reason; a URL runs the checks below over HTTP and returns one line per claim.
What runs (issue [4/7] item 4): claim 2 (block alignment at the server's block size), claim 9
(`cache_salt` per request), claim 10 (same-step sharing in a burst: 8 requests sharing a 512-token
prefix) and claim 12 (n > 1 reuse); claim 7 (cache on vs off) needs a second server start with
prefix caching off and runs in the full run only, through `server_column(url, quick, off_url)`.
Cached tokens come from `usage.prompt_tokens_details.cached_tokens` (vLLM serves it with
--enable-prompt-tokens-details). Prompts are token ids, so no tokenizer is involved.
"""

from __future__ import annotations

import json
import random
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from harness.server import prometheus

NOT_RUN = (
    "not run: needs the live vLLM server of issue [2/7] (harness/server/, scripts/setup_vllm.sh, the "
    "tests' session server), which this run did not have"
)
QUICK = (2, 9, 10)  # what CI fills; the full run adds 12 and (with a caching-off server) 7
FULL = (2, 7, 9, 10, 12)


@dataclass(frozen=True)
class Reply:
    cached_tokens: int
    tokens: tuple[str, ...]  # the completion texts, one per sample


def complete(url: str, prompt: list[int], max_tokens: int = 1, **extra: object) -> Reply:
    """One /v1/completions call with a token-id prompt, greedy unless `extra` says otherwise."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, **extra}
    req = urllib.request.Request(
        url.rstrip("/") + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        out = json.load(resp)
    details = (out.get("usage") or {}).get("prompt_tokens_details") or {}
    texts = tuple(c.get("text", "") for c in out.get("choices", []))
    return Reply(int(details.get("cached_tokens") or 0), texts)


def server_column(
    url: str | None, quick: bool, off_url: str | None = None, model: str | None = None
) -> dict[int, str]:
    """claim number -> its real-server result line (or why it did not run)."""
    numbers = QUICK if quick else FULL
    if url is None:
        return {n: NOT_RUN for n in numbers}
    extra = {"model": model} if model else {}
    checks: dict[int, Callable[[], str]] = {
        2: lambda: _alignment(url, extra, block_size(url)),
        9: lambda: _salt(url, extra),
        10: lambda: _burst(url, extra),
        12: lambda: _parallel(url, extra),
        7: lambda: _outputs(url, off_url, extra),
    }
    out = {}
    for n in numbers:
        try:
            out[n] = checks[n]()
        except Exception as exc:  # a server problem is that claim's line, not a crash
            out[n] = f"failed on the server: {type(exc).__name__}: {exc}"
    return out


def _prompt(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(1000, 20000) for _ in range(n)]


def block_size(url: str) -> int:
    """The server's block size from /metrics `vllm:cache_config_info` (vLLM reports it there)."""
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=30) as resp:
        samples = prometheus.parse(resp.read().decode("utf-8", errors="replace"))
    labels = prometheus.info_labels(samples, "vllm:cache_config_info")
    return int(labels["block_size"])


def _alignment(url: str, extra: dict, block: int) -> str:
    rng = random.Random(2)
    shared = 3 * block + block // 2  # three full blocks of the server's and half of a fourth
    head = _prompt(rng, shared)
    complete(url, head + _prompt(rng, 20), **extra)
    got = complete(url, head + _prompt(rng, 20), **extra).cached_tokens
    aligned = "block-aligned" if got == 3 * block else "not aligned"
    return f"{shared} shared tokens, block {block}: {got} cached ({aligned})"


def _salt(url: str, extra: dict) -> str:
    rng = random.Random(9)
    head = _prompt(rng, 512)
    complete(url, head + _prompt(rng, 8), cache_salt="tenant-a", **extra)
    same = complete(url, head + _prompt(rng, 8), cache_salt="tenant-a", **extra).cached_tokens
    other = complete(url, head + _prompt(rng, 8), cache_salt="tenant-b", **extra).cached_tokens
    return f"512 shared tokens: same tenant {same} cached, other tenant {other} cached"


def _burst(url: str, extra: dict) -> str:
    rng = random.Random(10)
    head = _prompt(rng, 512)
    prompts = [head + _prompt(rng, 16) for _ in range(8)]
    with ThreadPoolExecutor(len(prompts)) as pool:
        cached = list(pool.map(lambda p: complete(url, p, **extra).cached_tokens, prompts))
    hits = sum(c >= 512 for c in cached)
    return f"burst of 8 sharing 512 tokens: {hits} of 8 hit the prefix (cached {cached})"


def _parallel(url: str, extra: dict) -> str:
    rng = random.Random(12)
    # vLLM refuses n > 1 under greedy sampling: the samples are drawn, seeded.
    got = complete(url, _prompt(rng, 1024), max_tokens=4, n=4, temperature=1.0, seed=12, **extra)
    return f"n=4 on a fresh 1,024-token prompt: {got.cached_tokens} cached tokens reported"


def _outputs(url: str, off_url: str | None, extra: dict) -> str:
    if off_url is None:
        return "not run: needs a second server started with prefix caching off"
    rng = random.Random(7)
    head = _prompt(rng, 256)
    prompts = [head + _prompt(rng, 16) for _ in range(6)]
    on = [complete(url, p, max_tokens=64, **extra).tokens for p in prompts]
    off = [complete(off_url, p, max_tokens=64, **extra).tokens for p in prompts]
    same = sum(a == b for a, b in zip(on, off))
    return f"{same}/{len(prompts)} greedy 64-token outputs identical, caching on vs off"
