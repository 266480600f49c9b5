"""vLLM's KV-cache events: the record types, the wire decoding, a ZMQ subscriber, the file format.

vLLM (`--kv-events-config`, publisher zmq) publishes one message per engine step that changed
its prefix cache: [topic, 8-byte sequence number, msgpack([ts, [event, ...], dp_rank])], each
event a tagged map (`BlockStored` with block_hashes/parent_block_hash/token_ids, `BlockRemoved`
with block_hashes, `AllBlocksCleared`). With VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES (the default) a
published hash is the low 64 bits of the big-endian integer of vLLM's block hash, so the built-in
apc cache's keys map onto it exactly (`external_hash`; vllm/v1/core/kv_cache_utils.py, 0.32).
A step's batch is published at the end of the step; a reset shows as AllBlocksCleared at the head
of the next step's batch.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# vLLM's wire hashes are the apc design's block keys: this module, the one reader of vLLM's
# format, takes them from that design (allow-listed in tests/unit/test_design_registry.py)
from engines.cache.apc.kv_events import external_hash, published_hashes

__all__ = [
    "KvBatch",
    "Subscriber",
    "decode",
    "external_hash",
    "published_hashes",
    "read",
    "since_last_clear",
    "write",
]

KV_EVENTS_FILE = "kv_events.jsonl"  # the server's stream of the measured phase
TWIN_EVENTS_FILE = "kv_events_twin.jsonl"  # the step-locked twin's own
# `Subscriber.wait_for`: how long a stream showing none of the run's blocks is given before they
# are taken as blocks the server does not share
NONE_SEEN_GRACE_S = 2.0
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class KvBatch:
    """One engine step's cache changes, in the order the engine made them."""

    seq: int  # the publisher's sequence number (a gap means lost messages)
    ts: float  # the engine's time.time() when it published (the end of the step)
    stored: tuple[int, ...] = ()  # 64-bit block hashes, in store order
    removed: tuple[int, ...] = ()
    cleared: bool = False  # an AllBlocksCleared came first (a prefix-cache reset)
    stored_tokens: tuple[tuple[int, ...], ...] = ()  # each stored block's token ids
    recv_s: float = 0.0  # the subscriber's time.time() when it arrived

    def as_row(self) -> dict[str, object]:
        return {
            "seq": self.seq,
            "ts": self.ts,
            "recv_s": self.recv_s,
            "cleared": self.cleared,
            "stored": list(self.stored),
            "removed": list(self.removed),
            "stored_tokens": [list(t) for t in self.stored_tokens],
        }

    @staticmethod
    def from_row(row: dict) -> KvBatch:
        return KvBatch(
            seq=int(row["seq"]),
            ts=float(row["ts"]),
            stored=tuple(row.get("stored", ())),
            removed=tuple(row.get("removed", ())),
            cleared=bool(row.get("cleared", False)),
            stored_tokens=tuple(tuple(t) for t in row.get("stored_tokens", ())),
            recv_s=float(row.get("recv_s", 0.0)),
        )

    @property
    def changes(self) -> tuple[frozenset[int], frozenset[int]]:
        """(stored, removed) as sets: what a step-level comparison looks at."""
        return frozenset(self.stored), frozenset(self.removed)


def decode(parts: Sequence[bytes], recv_s: float = 0.0) -> KvBatch:
    """One published message -> KvBatch; ValueError for anything that is not one."""
    import msgpack  # type: ignore[import-untyped]

    if len(parts) != 3:
        raise ValueError(f"a KV event message has 3 parts (topic, seq, payload), got {len(parts)}")
    if len(parts[1]) != 8:
        raise ValueError(f"a KV event sequence number is 8 bytes, got {len(parts[1])}")
    seq = int.from_bytes(parts[1], "big", signed=True)
    body = msgpack.unpackb(parts[2], raw=False, strict_map_key=False)
    if not isinstance(body, (list, tuple)) or len(body) < 2:
        raise ValueError("a KV event payload is [ts, events, ...]")
    stored: list[int] = []
    removed: list[int] = []
    tokens: list[tuple[int, ...]] = []
    cleared = False
    for ev in body[1]:
        kind = ev.get("type") if isinstance(ev, dict) else (ev[0] if ev else None)
        if kind == "AllBlocksCleared":
            cleared, stored, removed, tokens = True, [], [], []  # what came before is gone
        elif kind == "BlockStored":
            hashes = _hashes(ev["block_hashes"])
            size, ids = ev["block_size"], ev["token_ids"]
            # vLLM's BlockStored carries the stored full blocks' tokens (block_pool.py; more
            # where it skips null or masked blocks' hashes): never fewer than fill the blocks
            if not _whole(size) or size < 1 or not isinstance(ids, (list, tuple)):
                raise ValueError(f"a BlockStored event needs a block_size >= 1, got {size!r}")
            if len(ids) < len(hashes) * size:
                raise ValueError(
                    f"a BlockStored event of {len(hashes)} blocks of {size} has {len(ids)} tokens"
                )
            stored += hashes
            tokens += [tuple(ids[i * size : (i + 1) * size]) for i in range(len(hashes))]
        elif kind == "BlockRemoved":
            removed += _hashes(ev["block_hashes"])
    return KvBatch(
        seq, float(body[0]), tuple(stored), tuple(removed), cleared, tuple(tokens), recv_s
    )


def _bytes64(h: bytes) -> int:
    return int.from_bytes(h, "big") & _MASK64


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _hashes(values: object) -> list[int]:
    """Block hashes as integers (vLLM sends ints, or bytes read as their low 64 bits); anything
    else (a float, a bool, null) is a message that lies about its blocks."""
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"block_hashes must be a list, got {type(values).__name__}")
    out = []
    for h in values:
        if isinstance(h, bytes):
            out.append(_bytes64(h))
        elif _whole(h):
            out.append(int(h))
        else:
            raise ValueError(f"a block hash must be an integer or bytes, got {h!r}"[:120])
    return out


@dataclass
class Subscriber:
    """A SUB socket on the server's endpoint, read on a thread into `batches` until `stop`."""

    endpoint: str
    topic: str = ""
    batches: list[KvBatch] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lost: int = 0  # messages missing from the sequence numbers

    def __post_init__(self) -> None:
        import zmq

        self._ctx: Any = zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.RCVHWM, 0)  # never drop on our side
        self._sock.setsockopt(zmq.SUBSCRIBE, self.topic.encode())
        self._sock.connect(self.endpoint)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import zmq

        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(50):
                continue
            parts = self._sock.recv_multipart()
            try:
                batch = decode(parts, time.time())
            except (ValueError, KeyError, TypeError) as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                continue
            if self.batches and batch.seq != self.batches[-1].seq + 1:
                self.lost += max(0, batch.seq - self.batches[-1].seq - 1)
            self.batches.append(batch)

    def wait_for(self, expected: set[int], timeout_s: float) -> int:
        """Wait until every hash in `expected` was stored since the last reset, or `timeout_s`;
        returns how many are still missing. A loaded server publishes a step's events up to
        seconds after its replies (two runs of the README command lost their last two
        batches to a quiet window of 0.5 s), so the run's own prompt blocks, not silence, say
        when the stream has its tail. Hashes the server does not share (none seen after
        `NONE_SEEN_GRACE_S`: another hash seed) are not waited for longer; the grace is there
        because the first of them may still be on its way (a test caught the reader thread a
        moment behind a batch sent just before the call)."""
        start = time.monotonic()
        deadline = start + timeout_s
        grace = start + min(NONE_SEEN_GRACE_S, timeout_s)
        while True:
            # a copy: the reader thread appends meanwhile
            seen = {h for b in since_last_clear(list(self.batches)) for h in b.stored}
            missing = len(expected - seen)
            now = time.monotonic()
            if not missing or now >= deadline or (not expected & seen and now >= grace):
                return missing
            time.sleep(0.05)

    def stop(self, drain_s: float = 0.5) -> list[KvBatch]:
        """Wait until nothing arrived for `drain_s` (the last steps publish after the replies),
        then close; returns every batch received."""
        last = -1
        while len(self.batches) != last:
            last = len(self.batches)
            time.sleep(drain_s)
        self._stop.set()
        self._thread.join(5.0)
        self._sock.close(linger=0)
        return self.batches


def order_problem(batches: Sequence[KvBatch]) -> str | None:
    """Why `batches` cannot be one publisher's steps in order, or None. The publisher numbers
    its messages one by one and stamps each at the end of its step, so a sequence number that
    repeats, goes back or skips, or a time that is not finite or goes back, is a duplicated,
    reordered, missing or foreign batch: pairing the twin's steps with such a stream would
    lock onto steps the server never made in that order."""
    for i, (a, b) in enumerate(zip(batches, batches[1:]), start=1):
        if b.seq != a.seq + 1:
            what = "repeats" if b.seq == a.seq else "goes back" if b.seq < a.seq else "skips"
            return f"KV event batch {i}: sequence number {b.seq} after {a.seq} ({what})"
    for i, b in enumerate(batches):
        if not math.isfinite(b.ts):
            return f"KV event batch {i}: timestamp {b.ts!r} is not a time"
        if i and b.ts < batches[i - 1].ts:
            return f"KV event batch {i}: timestamp {b.ts} before the previous {batches[i - 1].ts}"
    return None


def since_last_clear(batches: Sequence[KvBatch]) -> list[KvBatch]:
    """The batches from the last reset on (its own batch kept: it already holds the first
    measured step's changes); all of them where no reset was seen."""
    start = max((i for i, b in enumerate(batches) if b.cleared), default=0)
    return list(batches[start:])


def write(path: Path, batches: Iterable[KvBatch]) -> None:
    with path.open("w") as f:
        for b in batches:
            f.write(json.dumps(b.as_row()) + "\n")


def read(path: Path) -> list[KvBatch]:
    return [KvBatch.from_row(json.loads(line)) for line in path.read_text().splitlines() if line]


def endpoint_from_sources(body: object) -> tuple[str, str] | None:
    """(endpoint, topic) from vLLM's GET /kv_event_sources answer, if events go over ZMQ to an
    endpoint this machine can subscribe to; None otherwise."""
    if not isinstance(body, dict):
        return None
    for conf in body.values():
        if not isinstance(conf, dict) or not conf.get("enable_kv_cache_events"):
            continue
        endpoint = str(conf.get("endpoint") or "")
        # vLLM binds ipc and wildcard tcp endpoints; a tcp endpoint with a host it connects to
        # (a subscriber binding that port received nothing here), so that one is not usable
        topic = str(conf.get("topic") or "")
        if conf.get("publisher") != "zmq":
            continue
        if endpoint.startswith("ipc://"):
            return endpoint, topic
        for wildcard in ("tcp://*:", "tcp://0.0.0.0:"):
            if endpoint.startswith(wildcard):
                return "tcp://127.0.0.1:" + endpoint[len(wildcard) :], topic
    return None
