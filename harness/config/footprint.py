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
from typing import TYPE_CHECKING

from harness.config.errors import BadInput

if TYPE_CHECKING:  # the schema imports Hydra: only the type checker needs it here
    from engines.model.config import ModelConfig
    from harness.config.schema import RunConfig

BYTES_PER_PROMPT_TOKEN = 64  # measured ~12 for the requests; engine sequences and bounds add more
BOOKKEEPING_BYTES_PER_BLOCK = 200
GIB = 2**30


BYTES_PER_OUTPUT_TOKEN = 48  # the scripted output tuple (8 + a small int) and its token times
LOGITS_BYTES = 4  # float32 logits row per running sequence (the model's "token table" at the head)


@dataclass(frozen=True)
class Footprint:
    workload_bytes: int  # 0 when the family gives no estimate (traces, datasets: file-sized)
    bookkeeping_bytes: int
    kv_bytes: int  # KV tensors of the real executor; 0 for the simulated one
    kv_on_gpu: bool
    output_bytes: int = 0  # scripted output tokens of the synthetic families
    weights_bytes: int = 0  # the real executor's weights: embeddings, layers, head, logits rows

    @property
    def host_bytes(self) -> int:
        on_device = self.kv_bytes + self.weights_bytes if self.kv_on_gpu else 0
        return (
            self.workload_bytes
            + self.output_bytes
            + self.bookkeeping_bytes
            + self.kv_bytes
            + self.weights_bytes
            - on_device
        )

    @property
    def device_bytes(self) -> int:
        return self.kv_bytes + self.weights_bytes if self.kv_on_gpu else 0


def weights_bytes(m: ModelConfig, max_num_seqs: int) -> int:
    """Parameters times their element size, plus one float32 logits row per sequence."""
    h, v = m.hidden_size, m.vocab_size
    per_layer = 2 * h * m.q_size + 2 * h * m.kv_size + 3 * h * m.intermediate_size + 2 * h
    params = v * h * (1 if m.tie_word_embeddings else 2) + m.num_layers * per_layer + h
    element = 4 if m.dtype == "float32" else 2
    return params * element + max_num_seqs * v * LOGITS_BYTES


def estimate(cfg: RunConfig) -> Footprint:
    """What `cfg` would take: its requests, outputs, cache bookkeeping, KV pool and weights."""
    tokens = cfg.workload.prompt_tokens_estimate() or 0
    outputs = output_tokens_estimate(cfg.workload)
    num_blocks = cfg.engine.num_blocks
    kv_bytes, on_gpu, weights = 0, False, 0
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
        weights = weights_bytes(m, cfg.engine.max_num_seqs)
    return Footprint(
        tokens * BYTES_PER_PROMPT_TOKEN,
        num_blocks * BOOKKEEPING_BYTES_PER_BLOCK,
        kv_bytes,
        on_gpu,
        outputs * BYTES_PER_OUTPUT_TOKEN,
        weights,
    )


def output_tokens_estimate(params: object) -> int:
    """Requests times output_len for the families that say how many requests they make (the
    prompt estimate's families); 0 where unknown (file-backed families bound each request by the
    model's context as it is read, workloads.tokens)."""
    count = getattr(params, "requests_estimate", lambda: None)()
    length = getattr(params, "output_len", None)
    if not isinstance(count, int) or not isinstance(length, int):
        return 0
    return count * length


def check_footprint(cfg: RunConfig) -> None:
    """Raise BadInput when the estimate does not fit the host (or GPU) memory available now."""
    need = estimate(cfg)
    parts = (
        f"workload {need.workload_bytes / GIB:.1f} GiB, outputs {need.output_bytes / GIB:.1f} GiB, "
        f"cache bookkeeping {need.bookkeeping_bytes / GIB:.1f} GiB, "
        f"KV pool {need.kv_bytes / GIB:.1f} GiB, weights {need.weights_bytes / GIB:.1f} GiB"
    )
    free = memory_limit_bytes()
    if free is not None and need.host_bytes > free:
        field = _largest_field(need)
        raise BadInput(
            f"{field}: this run needs an estimated {need.host_bytes / GIB:.1f} GiB of memory ({parts}) "
            f"but {free / GIB:.1f} GiB are available ({LIMIT_ENV} sets the limit)"
        )
    if need.kv_on_gpu:
        import torch

        gpu_free, _ = torch.cuda.mem_get_info()
        if need.device_bytes > gpu_free:
            raise BadInput(
                f"engine.kv_capacity_tokens: the KV pool and weights need an estimated "
                f"{need.device_bytes / GIB:.1f} GiB but the GPU has {gpu_free / GIB:.1f} GiB free"
            )


def _largest_field(need: Footprint) -> str:
    by_field = {
        "workload": need.workload_bytes + need.output_bytes,
        "engine.kv_capacity_tokens": need.bookkeeping_bytes + need.kv_bytes,
        "model": need.weights_bytes,
    }
    return max(by_field, key=by_field.__getitem__)


LIMIT_ENV = "PREFIXBENCH_MEMORY_LIMIT"  # bytes (suffixes K, M, G): overrides the machine's figure


def memory_limit_bytes() -> int | None:
    """What a run may allocate: PREFIXBENCH_MEMORY_LIMIT if set, else the memory available now,
    lowered to the room left under this process's address-space limit (RLIMIT_AS) if it has one."""
    knob = os.environ.get(LIMIT_ENV, "").strip()
    if knob:
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(knob[-1].upper(), 1)
        try:
            return int(float(knob.rstrip("KMGkmg")) * scale)
        except ValueError:
            raise BadInput(
                f"{LIMIT_ENV} must be a number of bytes (K, M, G allowed), got {knob!r}"
            ) from None
    free = available_host_bytes()
    room = _address_space_room()
    if room is not None:
        free = room if free is None else min(free, room)
    return free


def _address_space_room() -> int | None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
    return max(0, soft - used)


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
