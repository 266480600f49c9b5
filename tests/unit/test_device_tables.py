"""The real executor's device-resident block tables, packed inputs and decode graphs.

The device table must equal every cache's block tables whenever the executor reads it (both
caches, both pages, both schedulers, through eviction, preemption and chunked prefill); a freed
row reads as padding again; the executor's tokens equal those of the list-built metadata it
replaced; decode steps through the padded static buffers (the CUDA-graph path, eager on CPU)
give the same tokens; logits are computed for the sampled rows that need them only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from engines.attention.metadata import AttentionMetadata
from engines.batch import run_batch
from engines.cuda_graphs import bucket_for, capture_sizes, padding_step
from engines.real_executor import RealExecutor
from engines.sequence import Sequence
from engines.step_inputs import StepArrays, pad_decode, step_arrays
from tests.engine_util import by_id, make_engine, shared_prompt_requests

# (cache, block size, scheduler): the upstream pairings at both pages, and the swapped ones.
ARMS = [
    ("apc", 16, None),
    ("apc", 1, None),
    ("radix", 1, None),
    ("radix", 16, None),
    ("radix", 1, "vllm"),
    ("apc", 16, "sglang"),
]
ARM_IDS = [f"{c}-p{b}-{s or 'own'}" for c, b, s in ARMS]


def _holders(cache: Any) -> set[str]:
    """Sequences holding a block table in the cache (its own records, not the protocol)."""
    if cache.name == "apc":
        return {sid for sid, table in cache.manager.req_to_blocks.items() if table}
    return set(cache.reqs)


def _check_tables(executor: RealExecutor) -> None:
    cache, tables = executor.cache, executor.tables
    assert set(tables.rows) == _holders(cache)
    rows = tables.host_rows()
    for sid in tables.rows:
        assert rows[sid] == list(cache.block_table(Sequence(sid, [], 0, 0))), sid


def _watch_tables(executor: RealExecutor) -> list[int]:
    """Check the tables right after every scatter (the point the forward reads them)."""
    checks: list[int] = []
    apply = executor.tables.apply

    def apply_and_check(flat: torch.Tensor, block_ids: torch.Tensor) -> None:
        apply(flat, block_ids)
        _check_tables(executor)
        checks.append(1)

    executor.tables.apply = apply_and_check  # type: ignore[method-assign]
    return checks


def _pressure_engine(cache: str, block_size: int, scheduler: str | None, **kw: Any):
    """Capacity for about two sequences: eviction, preemption/retraction and chunked prefill."""
    if (scheduler or {"apc": "vllm", "radix": "sglang"}[cache]) == "sglang":
        kw.setdefault("schedule_conservativeness", 0.05)  # admit eagerly, so decode retracts
    return make_engine(
        cache,
        block_size=block_size,
        scheduler=scheduler,
        kv_capacity_tokens=192,
        max_num_batched_tokens=32,
        debug_checks=True,
        **kw,
    )


def _requests(**kw: Any):
    return shared_prompt_requests(
        groups=3, per_group=3, system_len=30, question_len=10, output_len=40, **kw
    )


@pytest.mark.parametrize(("cache", "block_size", "scheduler"), ARMS, ids=ARM_IDS)
def test_device_table_equals_cache_tables_every_step(cache, block_size, scheduler):
    engine = _pressure_engine(cache, block_size, scheduler)
    executor = engine.executor
    checks = _watch_tables(executor)
    records = run_batch(engine, _requests(scripted=True))
    assert len(checks) == engine.loop.num_steps
    assert sum(r.num_preemptions for r in records) > 0, "the run must preempt"
    assert engine.cache.stats().num_evictions > 0, "the run must evict"
    # After the run every table is released: the next drain frees and clears every row.
    executor.tables.collect(engine.cache)
    assert executor.tables.rows == {}
    assert int(executor.tables.table.abs().sum()) == 0


class ListBuiltExecutor(RealExecutor):
    """The executor's former path: metadata rebuilt from the cache's block-table lists."""

    def forward(self, step: StepArrays) -> tuple[torch.Tensor, torch.Tensor]:
        n = step.num_seqs
        sid_of = {row: sid for sid, row in self.tables.rows.items()}
        tables = [self.cache.block_table(Sequence(sid_of[int(r)], [], 0, 0)) for r in step.seq_rows]
        meta = AttentionMetadata.build(
            step.lens[n : 2 * n].tolist(), step.query_lens.tolist(), tables, self.cache.block_size
        )
        ids = torch.from_numpy(step.input_ids.copy())
        hidden = self.model(ids, meta, self.kv_pool, self.attn)
        return hidden, torch.from_numpy(step.logits_index.copy())


def _with_executor(engine, cls: type[RealExecutor], **kw: Any):
    old = engine.executor
    engine.executor = cls(old.model, old.kv_pool, old.attn, old.cache, old.clock, old.device, **kw)
    return engine


@pytest.mark.parametrize(("cache", "block_size", "scheduler"), ARMS[:4], ids=ARM_IDS[:4])
def test_greedy_tokens_equal_the_list_built_path(cache, block_size, scheduler):
    reqs = _requests()  # unscripted: greedy argmax of real logits
    new = by_id(run_batch(_pressure_engine(cache, block_size, scheduler), reqs))
    ref_engine = _with_executor(_pressure_engine(cache, block_size, scheduler), ListBuiltExecutor)
    old = by_id(run_batch(ref_engine, reqs))
    assert {k: r.output_ids for k, r in new.items()} == {k: r.output_ids for k, r in old.items()}


@pytest.mark.parametrize(("cache", "block_size"), [("apc", 16), ("radix", 1)])
def test_decode_through_padded_static_buffers_gives_the_same_tokens(cache, block_size):
    reqs = shared_prompt_requests(groups=2, per_group=5, output_len=8)
    eager = by_id(run_batch(make_engine(cache, block_size=block_size, cuda_graphs=False), reqs))
    engine = make_engine(cache, block_size=block_size, cuda_graphs=True, max_num_seqs=16)
    checks = _watch_tables(engine.executor)
    padded = by_id(run_batch(engine, reqs))
    assert {k: r.output_ids for k, r in padded.items()} == {
        k: r.output_ids for k, r in eager.items()
    }
    graphs = engine.executor.graphs
    assert graphs is not None and graphs.num_replays > 0 and checks
    assert graphs.captured_sizes() == []  # no CUDA: the same path, run eagerly


def test_capture_sizes_and_buckets():
    assert capture_sizes(256) == [1, 2, 4, 8, *range(16, 257, 8)]
    assert capture_sizes(5) == [1, 2, 4, 8]
    assert capture_sizes(8) == [1, 2, 4, 8]
    assert capture_sizes(300)[-3:] == [272, 288, 304]
    sizes = capture_sizes(64)
    assert [bucket_for(n, sizes) for n in (1, 3, 5, 8, 9, 17, 64)] == [1, 4, 8, 8, 16, 24, 64]
    assert bucket_for(65, sizes) is None


def test_pad_decode_appends_rows_that_read_padding():
    step = step_arrays(
        [7, 8, 9],
        np.array([5, 0, 2]),
        np.array([1, 1, 1]),
        np.array([3, 1, 2]),
        np.array([1]),
        table_width=10,
        block_size=4,
        updates=(np.array([31]), np.array([6])),
    )
    padded = pad_decode(step, 8)
    assert padded.input_ids.tolist() == [7, 8, 9, 0, 0, 0, 0, 0]
    assert padded.positions.tolist() == [5, 0, 2, 0, 0, 0, 0, 0]
    # row 3, block 5 // 4 = 1 -> 31; the padding rows read row 0, block 0
    assert padded.slot_index.tolist() == [31, 10, 20, 0, 0, 0, 0, 0]
    assert padded.slot_offset.tolist() == [1, 0, 2, 0, 0, 0, 0, 0]
    assert padded.seq_rows.tolist() == [3, 1, 2, 0, 0, 0, 0, 0]
    n = 8
    assert padded.lens[:n].tolist() == [6, 1, 3, 1, 1, 1, 1, 1]  # seq_lens
    assert padded.lens[n : 2 * n].tolist() == [5, 0, 2, 0, 0, 0, 0, 0]  # context_lens
    assert padded.lens[2 * n :].tolist() == list(range(9))  # query_start_loc
    assert padded.logits_index.tolist() == [1]  # real rows only
    assert padded.table_index.tolist() == [31] and padded.table_ids.tolist() == [6]
    assert padding_step(4).seq_rows.tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError):
        pad_decode(step, 2)


def test_step_arrays_of_a_mixed_batch():
    step = step_arrays(
        [1, 2, 3, 4, 5],
        np.array([5, 0]),
        np.array([3, 2]),
        np.array([2, 1]),
        np.array([0, 1]),
        table_width=4,
        block_size=4,
        updates=(np.zeros(0, np.int64), np.zeros(0, np.int64)),
    )
    assert step.positions.tolist() == [5, 6, 7, 0, 1]
    assert step.slot_index.tolist() == [9, 9, 9, 4, 4]
    assert step.slot_offset.tolist() == [1, 2, 3, 0, 1]
    assert step.lens.tolist() == [8, 2, 5, 0, 0, 3, 5]
    assert step.logits_index.tolist() == [2, 4]


@pytest.mark.parametrize("scripted", [True, False])
def test_logits_only_for_rows_that_need_them(scripted):
    engine = make_engine("radix", block_size=1)
    executor = engine.executor
    rows: list[int] = []
    logits_at = executor.model.logits_at

    def counting(hidden: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        rows.append(len(index))
        return logits_at(hidden, index)

    executor.model.logits_at = counting
    reqs = shared_prompt_requests(groups=2, per_group=3, output_len=5, scripted=scripted)
    run_batch(engine, reqs)
    num_tokens = sum(r.max_new_tokens for r in reqs)
    assert sum(rows) == (0 if scripted else num_tokens)


@pytest.mark.gpu
@pytest.mark.parametrize(("cache", "block_size", "scheduler"), ARMS, ids=ARM_IDS)
def test_cuda_device_table_equals_cache_tables_and_graphs_replay(cache, block_size, scheduler):
    """On CUDA with triton: the same table check through eviction, preemption and chunked
    prefill, eagerly and with decode graphs, and both give the same greedy tokens."""
    reqs = _requests()
    outputs = []
    for graphs in (False, True):
        engine = _cuda_engine(cache, block_size, scheduler, cuda_graphs=graphs)
        checks = _watch_tables(engine.executor)
        records = run_batch(engine, reqs)
        assert len(checks) == engine.loop.num_steps
        assert sum(r.num_preemptions for r in records) > 0
        outputs.append({r.request_id: r.output_ids for r in records})
        if graphs:
            runner = engine.executor.graphs
            assert runner is not None and runner.captured_sizes() == runner.sizes
            assert runner.num_replays > 0
    assert outputs[0] == outputs[1]


def _cuda_engine(cache: str, block_size: int, scheduler: str | None, **overrides: Any):
    from engines.build import build_engine
    from engines.config import EngineConfig
    from tests.engine_util import tiny_model

    fields: dict[str, Any] = dict(
        cache=cache,
        block_size=block_size,
        scheduler=scheduler,
        kv_capacity_tokens=192,
        max_num_batched_tokens=32,
        max_num_seqs=16,
        backend="triton",
        debug_checks=True,
    )
    if (scheduler or {"apc": "vllm", "radix": "sglang"}[cache]) == "sglang":
        fields["schedule_conservativeness"] = 0.05
    fields.update(overrides)
    return build_engine(EngineConfig(**fields), tiny_model(), executor="real", device="cuda")


# ------------------------------------------------------------------ weights' init device, manifest


def test_init_device_target_on_cpu_draws_the_default_weights():
    from dataclasses import replace

    from engines.model.weights import build_model
    from tests.engine_util import tiny_model

    default = build_model(tiny_model(), "cpu").state_dict()
    target = build_model(replace(tiny_model(), init_device="target"), "cpu").state_dict()
    assert all(torch.equal(default[k], target[k]) for k in default)


def test_init_device_is_checked():
    from dataclasses import replace

    from engines.errors import BadInput
    from tests.engine_util import tiny_model

    with pytest.raises(BadInput, match="model.init_device must be one of cpu, target"):
        replace(tiny_model(), init_device="gpu").validate()


@pytest.mark.parametrize("init", ["cpu", "target"])
def test_manifest_records_init_device_and_cuda_graphs(init):
    from harness.results.manifest import build_manifest
    from harness.run.compose import compose, identity

    composed = compose(["model=tiny", "executor=real", "device=cpu", f"model.init_device={init}"])
    manifest = build_manifest(composed.resolved, composed.cfg.seed, identity(composed))
    assert manifest["config"]["model"]["init_device"] == init
    assert manifest["weights_init_device"] == "cpu"  # target is the CPU here
    assert manifest["config"]["engine"]["cuda_graphs"] is None
    assert manifest["cuda_graphs"] == "off"
    asked = compose(["model=tiny", "executor=real", "device=cpu", "engine.cuda_graphs=true"])
    assert identity(asked)["cuda_graphs"] == "eager"


@pytest.mark.gpu
def test_init_device_target_draws_on_the_gpu():
    from dataclasses import replace

    from engines.model.weights import build_model
    from tests.engine_util import tiny_model

    model = build_model(replace(tiny_model(), init_device="target"), "cuda")
    assert all(p.device.type == "cuda" for p in model.parameters())
    again = build_model(replace(tiny_model(), init_device="target"), "cuda")
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
