"""Runs under the vLLM venv's python (tests/live/test_apc_tier_vs_vllm_scheduler.py and
test_apc_storage_vs_vllm_tiering.py spawn it): vLLM's own async Scheduler with the
OffloadingConnector (scheduler side, the CPU manager and its policy, and the worker side), one
request at a time, and prints each request's device (local) and host (external) cached tokens, as
JSON. A run with "storage_dir" uses vLLM's TieringOffloadingSpec instead: the CPU tier as primary
and a real file-system secondary tier writing its files under that folder; each request then gets
a third number, the external tokens vLLM attributes to the disk (get_external_cache_hit_sources).

The only replacement is the GPU<->CPU transfer engine: vLLM's CPU worker refuses non-CUDA
platforms, so a stub reports every submitted transfer done when the worker side next polls it. The
file tier's own threads run for real; the driver waits for them between steps (its existence
checks after the plan that posted them, its reads and writes after the step's output is
processed), as a GPU step long enough for them would, so every run is deterministic.

One upstream order is fixed here: vLLM hands the connector a step's finished requests as a Python
set of request ids (Scheduler.finished_req_ids), and the CPU manager's LRU/ARC policy refreshes
each finished request's chunks in that iteration order, so which of two requests finishing in the
same step is evicted first follows str hashing, which PYTHONHASHSEED changes from process to
process (a burst stream gave a different host hit under 3 of 4 seeds). `FinishOrder` makes the set
iterate in the order the requests finished, the order the project's model follows (docs/tiers.md
§2.5); membership and everything else is vLLM's.

stdin: a list of runs {"num_gpu_blocks", "block_size", "num_chunks", "blocks_per_chunk",
"policy", "store_threshold", "offload_prompt_only", "model", "requests": [[id, prompt ids,
output ids], ...], optional "storage_dir"}. Writes to the file named by its argument, per run,
{id: [local, external, preemptions, recomputed]} or {id: [local, external, disk, preemptions,
recomputed]} (vLLM logs on stdout): recomputed counts, over the request's re-admissions, the
tokens it had computed when preempted that the re-admission's hits did not cover.
"""

from __future__ import annotations

import json
import mmap
import queue
import sys
import threading

import torch
from vllm import SamplingParams
from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.kv_offload.base import OffloadingWorker, TransferResult
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec
from vllm.v1.kv_offload.tiering.fs.manager import FileSystemTierManager, FsAsyncLookupManager
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec
from vllm.v1.metrics.cache_hit_source import CacheHitSource
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager


class StubTransfers(OffloadingWorker):
    """The transfer engine: every submitted job is done when polled."""

    def __init__(self) -> None:
        self.submitted: list[int] = []

    def submit_store(self, job_id, src_spec, dst_spec) -> bool:
        self.submitted.append(job_id)
        return True

    def submit_load(self, job_id, src_spec, dst_spec) -> bool:
        self.submitted.append(job_id)
        return True

    def get_finished(self) -> list[TransferResult]:
        done, self.submitted = self.submitted, []
        return [TransferResult(job_id=j, success=True) for j in done]

    def wait(self, job_ids: set[int]) -> None:
        """Nothing: every job is done when polled."""


class SizedCPUOffloadingSpec(CPUOffloadingSpec):
    """vLLM's CPU spec with its chunk count given (it derives it from worker tensor bytes)."""

    def __init__(self, config) -> None:
        super().__init__(config)
        self.num_chunks = int(self.extra_config["num_chunks"])


class SizedTieringSpec(TieringOffloadingSpec):
    """vLLM's tiering spec with its CPU chunk count given and one page per chunk (the chunk's
    bytes: the scheduler-side region the file tier reads and writes)."""

    def __init__(self, config) -> None:
        super().__init__(config)
        self.num_chunks = int(self.extra_config["num_chunks"])
        self.kv_bytes_per_chunk = mmap.PAGESIZE
        self.cpu_page_size_per_worker = mmap.PAGESIZE


class CountingQueue(queue.SimpleQueue):
    """A queue that counts what was put in it (the driver waits on the counts)."""

    def __init__(self, done: threading.Condition) -> None:
        super().__init__()
        self.count = 0
        self.done = done

    def put(self, item, block=True, timeout=None) -> None:
        super().put(item, block, timeout)
        if item is not None:
            with self.done:
                self.count += 1
                self.done.notify_all()


class WaitableLookups(FsAsyncLookupManager):
    """vLLM's file-tier lookup manager, unchanged, whose two queues count the batches posted and
    the answers returned (its thread starts on them: it waits until they are in place)."""

    def __init__(self, tier: FileSystemTierManager, tier_type: str) -> None:
        self.in_place = threading.Event()
        super().__init__(tier=tier, tier_type=tier_type)
        self.answered = threading.Condition()
        self.posted_q = CountingQueue(self.answered)
        self.answers_q = CountingQueue(self.answered)
        self._lookup_queue = self.posted_q
        self._pending_results = self.answers_q
        self.in_place.set()

    def _worker(self) -> None:
        self.in_place.wait()
        super()._worker()

    def wait(self) -> None:
        with self.answered:
            self.answered.wait_for(lambda: self.answers_q.count >= self.posted_q.count)


class WaitableFsTier(FileSystemTierManager):
    """vLLM's file-system tier, unchanged, with the lookup manager above."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # upstream's own lookup manager, set by the base class (untyped here: vLLM is not
        # installed where mypy runs)
        self._lookup_manager.shutdown()  # type: ignore[has-type]
        self._lookup_manager = WaitableLookups(tier=self, tier_type=self.tier_type)

    def wait_lookups(self) -> None:
        self._lookup_manager.wait()

    def submit_load(self, job_metadata) -> None:
        """Held until the plan is built: a file read outlasts the rest of the plan, so the
        prepare_store calls after on_schedule_end never see a promotion finished."""
        self.held_loads = [*getattr(self, "held_loads", []), job_metadata]

    def release_loads(self) -> None:
        held, self.held_loads = getattr(self, "held_loads", []), []
        for job in held:
            super().submit_load(job)


class FinishOrder(set):
    """A step's finished request ids (the set vLLM builds), iterated in the order they finished."""

    def __init__(self, ids: set, order: list) -> None:
        super().__init__(ids)
        self.order = [i for i in order if i in ids]

    def __iter__(self):
        return iter(self.order)


def in_finish_order(sched: AsyncScheduler) -> None:
    """Record the order requests finish in, and give the connector each step's finished ids in
    it (see the module docstring)."""
    order: list[str] = []
    free, build_meta = sched._free_request, sched.connector.build_connector_meta

    def freed(request, *args, **kwargs):
        order.append(request.request_id)
        return free(request, *args, **kwargs)

    def meta(out):
        ids = out.finished_req_ids
        out.finished_req_ids = FinishOrder(ids, order)
        order[:] = [i for i in order if i not in ids]
        return build_meta(out)

    sched._free_request = freed
    sched.connector.build_connector_meta = meta


def build(run: dict) -> tuple[AsyncScheduler, OffloadingConnector]:
    bs = run["block_size"]
    module = __name__ if __name__ != "__main__" else "vllm_offload_scheduler_driver"
    extra = {
        "spec_name": "SizedCPUOffloadingSpec",
        "spec_module_path": module,
        "cpu_bytes_to_use": 1 << 30,
        "num_chunks": run["num_chunks"],
        "block_size": bs * run["blocks_per_chunk"],
        "eviction_policy": run["policy"],
        "store_threshold": run["store_threshold"],
        "offload_prompt_only": run["offload_prompt_only"],
    }
    if run.get("storage_dir"):
        extra["spec_name"] = "SizedTieringSpec"
        extra["secondary_tiers"] = [
            {
                "type": "WaitableFsTier",
                "module_path": module,
                "root_dir": run["storage_dir"],
                "n_read_threads": 2,
                "n_write_threads": 2,
            }
        ]
    cfg = VllmConfig(
        model_config=ModelConfig(
            model=run["model"],
            dtype="float32",
            seed=0,
            max_model_len=4096,
            skip_tokenizer_init=True,
        ),
        scheduler_config=SchedulerConfig(
            max_num_seqs=16,
            max_num_batched_tokens=512,
            max_model_len=4096,
            enable_chunked_prefill=True,
            is_encoder_decoder=False,
            async_scheduling=True,
        ),
        cache_config=CacheConfig(block_size=bs, enable_prefix_caching=True),
        kv_transfer_config=KVTransferConfig(
            kv_connector="OffloadingConnector", kv_role="kv_both", kv_connector_extra_config=extra
        ),
    )
    spec = FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv = KVCacheConfig(
        num_blocks=run["num_gpu_blocks"],
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
    cfg.cache_config.num_gpu_blocks = run["num_gpu_blocks"]
    sched = AsyncScheduler(
        vllm_config=cfg,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(cfg),
        block_size=bs,
        log_stats=True,
    )
    # vLLM's CPU platform turns async scheduling off in the config (the scheduler class above is
    # async all the same); on CUDA it stays on, and with a connector that consumes KV the
    # scheduler then returns a preempted request's blocks only once the step that last ran it
    # has been processed (Scheduler.defer_block_free), as here.
    sched.defer_block_free = True
    worker = OffloadingConnector(cfg, KVConnectorRole.WORKER, kv)
    worker.connector_worker.worker = StubTransfers()  # the transfer engine, nothing else
    in_finish_order(sched)
    return sched, worker


def waves(requests: list) -> list[list]:
    """Consecutive requests with the same wave number (a 4th field, default: each its own) are
    added together, before one scheduling step."""
    out: list[list] = []
    last = None
    for k, entry in enumerate(requests):
        wave = entry[3] if len(entry) > 3 else ("solo", k)
        if not out or wave != last:
            out.append([])
        out[-1].append(entry)
        last = wave
    return out


def fs_tiers(sched: AsyncScheduler) -> list[WaitableFsTier]:
    manager = sched.connector.connector_scheduler.manager
    return list(getattr(manager, "secondary_tiers", []))


def disk_tokens(sched: AsyncScheduler, request: Request, external: int) -> int:
    """The external tokens vLLM attributes to the disk tier (its per-source hit accounting)."""
    sources = sched.connector.get_external_cache_hit_sources(request, external)
    return sources.get(CacheHitSource.DISK, 0)


class Recomputed:
    """Each request's preemptions and the tokens it computes again after them: at a
    re-admission, its computed tokens when preempted less the hits it was admitted with (device
    and external). The connector's running loop never preempts a request the step in flight
    runs (`defer_block_free`), so its computed tokens then were all processed."""

    def __init__(self) -> None:
        self.computed: dict[str, int] = {}  # after the last plan
        self.at_preemption: dict[str, int] = {}
        self.preemptions: dict[str, int] = {}
        self.tokens: dict[str, int] = {}
        self.readmitted: set[tuple[str, int]] = set()

    def after_schedule(self, sched: AsyncScheduler, out) -> None:
        for rid in out.preempted_req_ids or ():
            self.at_preemption[rid] = self.computed.get(rid, 0)
            self.preemptions[rid] = self.preemptions.get(rid, 0) + 1
        for r in sched.requests.values():
            rid, key = r.request_id, (r.request_id, r.num_preemptions)
            admitted = r.status in (RequestStatus.RUNNING, RequestStatus.WAITING_FOR_REMOTE_KVS)
            if r.num_preemptions and admitted and key not in self.readmitted:
                self.readmitted.add(key)
                hits = r.num_computed_tokens - out.num_scheduled_tokens.get(rid, 0)
                again = max(self.at_preemption.get(rid, 0) - hits, 0)
                self.tokens[rid] = self.tokens.get(rid, 0) + again
            self.computed[rid] = r.num_computed_tokens

    def of(self, rid: str) -> list[int]:
        return [self.preemptions.get(rid, 0), self.tokens.get(rid, 0)]


def run_one(run: dict) -> dict[str, list[int]]:
    sched, worker = build(run)
    storage = fs_tiers(sched)
    init_none_hash(sha256)
    hasher = get_request_block_hasher(run["block_size"], sha256)
    tiers: dict[str, list[int]] = {}
    scripts: dict[str, list[int]] = {}
    emitted: dict[str, int] = {}
    admitted: set[str] = set()
    redo = Recomputed()
    prev = None
    for wave in waves(run["requests"]):
        for rid, prompt, output, *_ in wave:
            params = SamplingParams(max_tokens=len(output), ignore_eos=True)
            req = Request(rid, prompt, params, None, block_hasher=hasher)
            scripts[rid] = list(output)
            sched.add_request(req)
        idle = 0
        while idle < 4:  # until the wave finished and the connector's transfers settled
            out = sched.schedule()
            redo.after_schedule(sched, out)
            for r in sched.requests.values():  # the stats of the lookup that admitted it
                st = r.prefill_stats  # (a lookup whose allocation failed sets them too)
                if r.request_id in admitted or st is None or not st.num_prompt_tokens:
                    continue
                local, ext = st.num_local_cached_tokens, st.num_external_cached_tokens
                tiers[r.request_id] = [local, ext]
                if storage:
                    tiers[r.request_id].append(disk_tokens(sched, r, ext) if ext else 0)
                if r.status in (RequestStatus.RUNNING, RequestStatus.WAITING_FOR_REMOTE_KVS):
                    admitted.add(r.request_id)
            for tier in storage:  # the plan's reads start; the checks it posted are answered
                tier.release_loads()
                tier.wait_lookups()
            meta = out.kv_connector_metadata
            worker.handle_preemptions(meta)
            worker.bind_connector_metadata(meta)
            worker.start_load_kv(None)
            worker.wait_for_save()  # the model runner does so with nothing scheduled too
            sending, recving = worker.get_finished(out.finished_req_ids)
            worker_meta = worker.build_connector_worker_meta()
            worker.clear_connector_metadata()
            ids = list(out.num_scheduled_tokens)
            sampled: list[list[int]] = []
            for i in ids:  # a step that ends a request's prefill or decodes samples a token
                r = sched.requests.get(i)
                if r is not None and r.num_computed_tokens < r.num_prompt_tokens:
                    sampled.append([])  # a prefill chunk short of the prompt's end
                    continue
                script = scripts[i]
                sampled.append([script[min(emitted.get(i, 0), len(script) - 1)]])
                emitted[i] = emitted.get(i, 0) + 1
            mro = ModelRunnerOutput(
                req_ids=ids,
                req_id_to_index={i: k for k, i in enumerate(ids)},
                sampled_token_ids=sampled,
                kv_connector_output=KVConnectorOutput(
                    finished_sending=sending,
                    finished_recving=recving,
                    kv_connector_worker_meta=worker_meta,
                ),
            )
            if prev is not None:
                sched.update_from_output(*prev)
            prev = (out, mro)
            for tier in storage:  # the reads and writes in flight are done
                tier.drain_jobs()
            idle = 0 if sched.has_unfinished_requests() or ids else idle + 1
    return {rid: [*counts, *redo.of(rid)] for rid, counts in tiers.items()}


def main() -> None:
    sys.path.insert(0, __file__.rsplit("/", 1)[0])  # the spec module is this file
    results = [run_one(run) for run in json.load(sys.stdin)]
    with open(sys.argv[1], "w") as out:
        json.dump(results, out)


if __name__ == "__main__":
    main()
