"""What the engine reports per finished request: times on the run clock and token counts.

Times are seconds since the start of the measured run (wall clock for the real executor, virtual
clock for the simulated one). The harness joins these rows with the workload's Request fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestRecord:
    request_id: str  # the child id ("{index}_{parent}" for n > 1, vLLM's form; parent id otherwise)
    parent_id: str
    sample_index: int
    prompt_tokens: int
    cached_tokens: int  # prompt tokens reused at the first admission (0 if never admitted)
    output_tokens: int
    recomputed_tokens: int  # tokens recomputed after preemption/retraction
    num_preemptions: int
    arrival_s: float  # when the request was released to the engine
    scheduled_s: float  # first admission
    first_token_s: float
    finish_s: float
    token_times_s: Sequence[float]  # emission time of every output token (ITL source), array('d')
    output_ids: tuple[int, ...]
    host_cached_tokens: int = 0  # of cached_tokens, those a host tier supplied (device: the rest)
    host_load_bytes: int = 0  # KV bytes loaded from the host tier (host link, host -> device)
    host_store_bytes: int = 0  # its KV bytes stored to the host tier until it finished
    host_load_s: float = 0.0  # seconds its loads took on the host link, queueing included
    storage_cached_tokens: int = 0  # of cached_tokens, from a storage tier (not among the host's)
