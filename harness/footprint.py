"""Memory a run will need, estimated before the workload or the KV pool exists.

Three parts: the workload's requests (prompt tokens held as Python tuples, engine sequences and
the bounds' hashes: about BYTES_PER_PROMPT_TOKEN each), the cache's bookkeeping (one block or page
record per BOOKKEEPING_BYTES_PER_BLOCK) and, for the real executor, the KV pool's tensors. A run
whose estimate exceeds the memory available now is refused with the estimate in the message,
instead of growing until the machine swaps or the kernel kills it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from harness.errors import BadInput

BYTES_PER_PROMPT_TOKEN = 64  # measured ~12 for the requests; engine sequences and bounds add more
BOOKKEEPING_BYTES_PER_BLOCK = 200
GIB = 2**30


@dataclass(frozen=True)
class Footprint:
    workload_bytes: int  # 0 when the family gives no estimate (traces, datasets: file-sized)
    bookkeeping_bytes: int
    kv_bytes: int  # KV tensors of the real executor; 0 for the simulated one
    kv_on_gpu: bool

    @property
    def host_bytes(self) -> int:
        return (
            self.workload_bytes + self.bookkeeping_bytes + (0 if self.kv_on_gpu else self.kv_bytes)
        )


def estimate(cfg) -> Footprint:
    tokens = cfg.workload.prompt_tokens_estimate() or 0
    num_blocks = cfg.engine.num_blocks
    kv_bytes, on_gpu = 0, False
    if cfg.executor == "real":
        from engines.build import resolve_device
        from engines.kv_pool import KVPoolShape

        m = cfg.model
        shape = KVPoolShape(
            m.num_layers,
            num_blocks,
            cfg.engine.block_size,
            m.num_kv_heads,
            m.head_dim,
            m.torch_dtype,
        )
        kv_bytes, on_gpu = shape.total_bytes, resolve_device(cfg.device).type == "cuda"
    return Footprint(
        tokens * BYTES_PER_PROMPT_TOKEN, num_blocks * BOOKKEEPING_BYTES_PER_BLOCK, kv_bytes, on_gpu
    )


def check_footprint(cfg) -> None:
    """Raise BadInput when the estimate does not fit the host (or GPU) memory available now."""
    need = estimate(cfg)
    parts = (
        f"workload {need.workload_bytes / GIB:.1f} GiB, cache bookkeeping {need.bookkeeping_bytes / GIB:.1f} GiB, "
        f"KV pool {need.kv_bytes / GIB:.1f} GiB"
    )
    free = available_host_bytes()
    if free is not None and need.host_bytes > free:
        field = (
            "workload" if need.workload_bytes > need.host_bytes / 2 else "engine.kv_capacity_tokens"
        )
        raise BadInput(
            f"{field}: this run needs an estimated {need.host_bytes / GIB:.1f} GiB of memory ({parts}) "
            f"but {free / GIB:.1f} GiB are available"
        )
    if need.kv_on_gpu:
        import torch

        gpu_free, _ = torch.cuda.mem_get_info()
        if need.kv_bytes > gpu_free:
            raise BadInput(
                f"engine.kv_capacity_tokens: the KV pool needs an estimated {need.kv_bytes / GIB:.1f} GiB "
                f"but the GPU has {gpu_free / GIB:.1f} GiB free"
            )


def available_host_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else free physical pages; None if unknown."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
