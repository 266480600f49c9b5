"""The served engine's KV-cache events on a ZMQ PUB socket, in vLLM's wire layout.

The events are its cache's (a `KvEventSource`, engines/cache/protocol.py).

vLLM's ZmqEventPublisher (vllm/distributed/kv_events.py, 0.32) sends one message per engine step
that changed the prefix cache: [topic, 8-byte big-endian sequence number, msgpack payload], the
payload an array [ts, [event, ...]] (the data-parallel rank left out when unset) and each event a
map tagged by "type" (BlockStored: block_hashes, parent_block_hash, token_ids, block_size,
lora_id, medium, lora_name; BlockRemoved: block_hashes, medium; AllBlocksCleared). Consumers
written for vLLM read it as they read vLLM: vllm-router's kv_aware policy
(`--kv-event-source WORKER_URL=ENDPOINT`) and this project's own subscriber
(harness/live_server/kv_events.py). The socket binds loopback only.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from collections.abc import Sequence
from typing import Any

from engines.cache.records import AllBlocksCleared, BlockRemoved, BlockStored, KvEvent
from harness.config.errors import BadInput

MEDIUM = "GPU"  # vLLM's tier name for the device cache, which the served pool stands for
LOOPBACK_PREFIXES = ("tcp://127.0.0.1:", "ipc://")


def check_endpoint(endpoint: str) -> None:
    """An endpoint this server may bind: loopback TCP with a port, or an ipc path."""
    if not isinstance(endpoint, str) or not endpoint.startswith(LOOPBACK_PREFIXES):
        raise BadInput(
            f"kv_events_endpoint must be tcp://127.0.0.1:PORT or ipc://PATH (loopback only), "
            f"got {endpoint!r}"
        )
    if endpoint.startswith("tcp://"):
        port = endpoint.rsplit(":", 1)[1]
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise BadInput(f"kv_events_endpoint needs a port in 1-65535, got {endpoint!r}")
    else:
        _check_ipc_path(endpoint[len("ipc://") :])


IPC_PATH_MAX = 107  # sun_path holds 108 bytes with its terminating NUL (Linux)


def _check_ipc_path(path: str) -> None:
    """A socket path we may create: its folder exists and is writable, and nothing but a stale
    socket is there already (ZMQ unlinks whatever the path names before binding: a file there
    would be deleted)."""
    where = f"kv_events_endpoint: ipc://{path}"
    if not path:
        raise BadInput(f"{where}: the path is empty")
    if len(os.fsencode(path)) > IPC_PATH_MAX:
        raise BadInput(f"{where}: a socket path holds at most {IPC_PATH_MAX} bytes")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise BadInput(f"{where}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BadInput(f"{where}: the folder {folder} is not writable")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise BadInput(f"{where}: {path} exists and is not a socket; binding would delete it")


def check_endpoint_free(endpoint: str, http_port: int) -> None:
    """A TCP endpoint's port is free and is not the server's own HTTP port (before the model is
    built: binding it after would fail with the model already loaded)."""
    if not endpoint.startswith("tcp://"):
        return
    port = int(endpoint.rsplit(":", 1)[1])
    if port == http_port:
        raise BadInput(f"kv_events_endpoint: port {port} is the server's own HTTP port")
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))
    except OSError as exc:
        raise BadInput(
            f"kv_events_endpoint: cannot listen on 127.0.0.1:{port}: {exc.strerror}"
        ) from None


def event_body(event: KvEvent) -> dict[str, Any]:
    """One event as vLLM's msgspec encodes it (tagged map, defaulted fields left out)."""
    if isinstance(event, BlockStored):
        return {
            "type": "BlockStored",
            "block_hashes": list(event.block_hashes),
            "parent_block_hash": event.parent_block_hash,
            "token_ids": list(event.token_ids),
            "block_size": event.block_size,
            "lora_id": None,
            "medium": MEDIUM,
            "lora_name": event.lora_name,
        }
    if isinstance(event, BlockRemoved):
        return {"type": "BlockRemoved", "block_hashes": list(event.block_hashes), "medium": MEDIUM}
    assert isinstance(event, AllBlocksCleared)
    return {"type": "AllBlocksCleared"}


def encode(topic: str, seq: int, ts: float, events: Sequence[KvEvent]) -> list[bytes]:
    """The three frames of one published step."""
    import msgpack  # type: ignore[import-untyped]

    payload = msgpack.packb([ts, [event_body(e) for e in events]])
    return [topic.encode(), seq.to_bytes(8, "big", signed=True), payload]


class KvEventPublisher:
    """A PUB socket bound to `endpoint`; `publish` sends one step's events (none: nothing)."""

    def __init__(self, endpoint: str, topic: str = "") -> None:
        import zmq

        check_endpoint(endpoint)
        self.endpoint, self.topic = endpoint, topic
        self.seq = 0
        self._sock: Any = zmq.Context.instance().socket(zmq.PUB)
        self._sock.setsockopt(zmq.SNDHWM, 100_000)  # vLLM's default high-water mark
        self._sock.bind(endpoint)

    def publish(self, events: Sequence[KvEvent]) -> None:
        if not events:
            return
        self._sock.send_multipart(encode(self.topic, self.seq, time.time(), events))
        self.seq += 1

    def close(self) -> None:
        self._sock.close(linger=0)
