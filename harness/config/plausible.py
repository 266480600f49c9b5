"""Plausibility bounds: a hardware or model value no real machine or model has is bad input.

A schema's `validate()` checks types and signs; these bounds catch a value in the wrong unit or
an order of magnitude off (`hardware.peak_flops=989`, TFLOP/s typed where FLOP/s is meant; a step
overhead of 1e308 s; a vocabulary of 1e10 tokens) before it sizes an allocation or turns a run's
numbers into nonsense. Each bound is wide (well beyond today's largest parts and models) and each
refusal names the unit the field is in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.config.errors import BadInput


@dataclass(frozen=True)
class Bound:
    low: float  # inclusive, as is high (a zero the cost model cannot use, `need` refuses)
    high: float
    unit: str  # what the value is counted in, for the message
    hint: str = ""  # a likely mix-up, for the message


def _g(x: float) -> str:
    """2**24 as 16,777,216, 1e18 as 1e+18."""
    return f"{int(x):,}" if x == int(x) and abs(x) < 1e8 else f"{x:g}"


# Hardware constants per GPU, in base SI units (conf/hardware/*.yaml).
HARDWARE: dict[str, Bound] = {
    "num_gpus": Bound(1, 4096, "GPUs"),
    "peak_flops": Bound(1e9, 1e18, "FLOP/s", "a datasheet's 989 TFLOP/s is 9.89e14"),
    "flops_utilization": Bound(0, 1, "(a fraction of peak_flops)"),
    "memory_bandwidth": Bound(1e8, 1e15, "bytes/s", "a datasheet's 4.8 TB/s is 4.8e12"),
    "bandwidth_efficiency": Bound(0, 1, "(a fraction of memory_bandwidth)"),
    "gpu_memory_bytes": Bound(2**27, 1e14, "bytes", "141 GB is 1.41e11"),
    "memory_fraction": Bound(0, 1, "(a fraction of gpu_memory_bytes)"),
    "interconnect_bandwidth": Bound(1e8, 1e15, "bytes/s", "450 GB/s is 4.5e11"),
    "host_link_bandwidth": Bound(1e8, 1e13, "bytes/s", "PCIe Gen5's ~50 GB/s is 5e10"),
    "storage_bandwidth": Bound(1e7, 1e12, "bytes/s", "an NVMe SSD's ~5 GB/s is 5e9"),
    "allreduce_latency_s": Bound(0, 1, "seconds", "8 us is 8e-06"),
    "activation_bytes": Bound(0, 16, "bytes per element"),
    "num_params": Bound(1, 1e14, "parameters"),
    "num_layers": Bound(1, 4096, "layers"),
    "hidden_size": Bound(1, 2**20, "elements"),
    "num_heads": Bound(1, 4096, "heads"),
    "num_kv_heads": Bound(1, 4096, "heads"),
    "head_dim": Bound(1, 2**14, "elements"),
    "bytes_per_param": Bound(0, 16, "bytes per parameter"),
    "kv_bytes_per_element": Bound(0, 16, "bytes per element"),
    "step_overhead_s": Bound(0, 10, "seconds per step", "1 ms is 1e-03"),
    "fit_per_token_s": Bound(0, 1, "seconds per token"),
    "fit_per_attention_pair_s": Bound(0, 1, "seconds per query-key pair"),
    "fit_per_prefill_seq_s": Bound(0, 10, "seconds per sequence"),
    "fit_per_decode_seq_s": Bound(0, 10, "seconds per sequence"),
    "fit_per_kv_token_s": Bound(0, 1, "seconds per KV token"),
    "fit_per_kv_block_s": Bound(0, 1, "seconds per KV block"),
    "fit_cache_kv_tokens": Bound(1, 2**40, "KV tokens"),
    "fit_per_kv_token_beyond_cache_s": Bound(0, 1, "seconds per KV token"),
}

# Model shape (engines/model/config.py): a 1e10 vocabulary would size a 1e10-row embedding.
MODEL: dict[str, Bound] = {
    "vocab_size": Bound(2, 2**24, "tokens"),
    "hidden_size": Bound(1, 2**17, "elements"),
    "intermediate_size": Bound(1, 2**19, "elements"),
    "num_layers": Bound(1, 1024, "layers"),
    "num_heads": Bound(1, 1024, "heads"),
    "num_kv_heads": Bound(1, 1024, "heads"),
    "head_dim": Bound(2, 2**12, "elements"),
    "max_position_embeddings": Bound(1, 2**24, "tokens"),
    "rope_theta": Bound(1, 1e12, "(a RoPE base)"),
    "rms_norm_eps": Bound(0, 1, "(an epsilon)"),
}

# Engine sizes (engines/config.py); KV capacity and the batch shape are bounded by memory too
# (harness.config.footprint), these catch values no engine step could be planned with.
ENGINE: dict[str, Bound] = {
    "block_size": Bound(1, 2**16, "tokens per block"),
    "kv_capacity_tokens": Bound(1, 2**40, "tokens"),
    "max_num_seqs": Bound(1, 2**20, "sequences"),
    "max_num_batched_tokens": Bound(1, 2**30, "tokens per step"),
}


def check_plausible(prefix: str, obj: object, bounds: dict[str, Bound]) -> None:
    """Raise BadInput naming the first field of `obj` outside its bound (None: not stated)."""
    for name, bound in bounds.items():
        value = getattr(obj, name, None)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue  # unset, or a type the schema's validate() refuses
        if math.isfinite(value) and bound.low <= value <= bound.high:
            continue
        hint = f" ({bound.hint})" if bound.hint else ""
        raise BadInput(
            f"{prefix}.{name} must be between {_g(bound.low)} and {_g(bound.high)} {bound.unit}"
            f"{hint}; got {value!r}"
        )


def check_model_and_engine(model: object, engine: object) -> None:
    check_plausible("model", model, MODEL)
    check_plausible("engine", engine, ENGINE)


def check_hardware(hardware: object) -> None:
    check_plausible("hardware", hardware, HARDWARE)
