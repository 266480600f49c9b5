"""The real executor: one model forward per step on the paged KV pool.

It packs the new tokens of every scheduled sequence into one varlen batch and runs the model
once. Block tables live on the device (engines/device_tables.py) and change only where the cache
says they did; the rest of a step's inputs are a few small host arrays in one packed copy
(engines/step_inputs.py). Decode-only steps replay a CUDA graph per padded batch size when
enabled (engines/cuda_graphs.py). Each sequence whose step reached its last known token gets a
token: the scripted reply's next token (scripted decoding, the default: no logits are computed
for it) or the greedy argmax (one argmax over the batch, one device-to-host copy).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from engines.attention.backend import AttentionBackend
from engines.cache.protocol import BlockTables
from engines.cache.tiers import HostTier
from engines.clock import RunClock
from engines.cuda_graphs import DecodeGraphs
from engines.device_tables import DeviceBlockTable
from engines.executor import DecodeRunResult
from engines.host_link import HostLinkPricing
from engines.host_pool import HostKVPool
from engines.kv_pool import KVPool
from engines.model.llama import LlamaModel
from engines.sched.base import DecodeRun, ScheduledSeq, StepPlan
from engines.sequence import Sequence
from engines.step_inputs import Packer, StepArrays, StepTensors, attention_metadata, step_arrays

# Attention backends whose forward reads only device tensors and sizes fixed by the batch shape,
# so a CUDA graph may capture it (the torch backend reads host lengths to group sequences).
GRAPH_SAFE_BACKENDS = ("triton",)


def next_token(seq: Sequence, logits_row: torch.Tensor | None) -> int:
    """Scripted decoding emits the script; otherwise greedy argmax of the row."""
    if seq.scripted_output_ids is not None:
        return seq.scripted_output_ids[seq.num_output_tokens]
    assert logits_row is not None
    return int(torch.argmax(logits_row).item())


@dataclass
class RealExecutor:
    decode_runs: ClassVar[bool] = False  # every step runs the model

    model: LlamaModel
    kv_pool: KVPool
    attn: AttentionBackend
    cache: BlockTables  # a cache, or calibrate.py's stand-in layout
    clock: RunClock
    device: torch.device
    # When a dict: each sequence's first-token logits (float32, CPU), keyed by id, reported
    # beside claim 7's served-K/V check (harness/claims/kv_tap.py decides it). None: not kept.
    first_logits: dict[str, torch.Tensor] | None = None
    max_num_seqs: int = 64  # rows of the device table (it grows if more hold KV at once)
    # Decode steps through padded static buffers: captured as CUDA graphs on CUDA with a
    # graph-safe backend; `cuda_graphs` False runs every step eagerly.
    cuda_graphs: bool = False
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    tables: DeviceBlockTable = field(init=False)
    graphs: DecodeGraphs | None = field(init=False, default=None)
    # A host tier's real copies (engines/host_pool.py) and its byte counts; None without a tier
    host_pool: HostKVPool | None = field(init=False, default=None)
    host_link: HostLinkPricing | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.cache.table_journal.enable()
        bs = self.cache.block_size
        self.max_len = self.max_model_len or self.model.cfg.max_position_embeddings
        width = -(-self.max_len // bs)
        self.tables = DeviceBlockTable(self.max_num_seqs, width, self.device)
        self.packer = Packer(self.device)
        tier = self.cache
        if isinstance(tier, HostTier):
            units, unit_tokens = tier.host_keep_events()
            self.host_pool = HostKVPool(self.kv_pool, units, unit_tokens)
            # bytes only: the copies' own wall time is the price (the step runs them)
            self.host_link = HostLinkPricing(
                None, self.kv_pool.bytes_per_token, tier.host_load_overlap, self.kv_pool.num_layers
            )
        if self.cuda_graphs:
            capture = self.device.type == "cuda" and self.attn.name in GRAPH_SAFE_BACKENDS
            self.graphs = DecodeGraphs(
                self.model,
                self.kv_pool,
                self.attn,
                self.tables,
                self.packer,
                bs,
                self.max_num_seqs,
                self.max_len,
                capture=capture,
            )
            self.graphs.capture_all()

    @torch.inference_mode()
    def host_idle(self) -> None:
        if self.host_pool is not None:
            tier = self.cache
            assert isinstance(tier, HostTier) and self.host_link is not None
            self.host_pool.before_forward(tier.host_take_events())
            self.host_pool.after_forward()  # nothing runs: every K/V offered is computed
            self.host_link.stores(self.clock.now(), tier.host_take_transfers())

    def host_waiting(self) -> None:
        """The real executor prices no storage read on a clock (it counts bytes): nothing."""

    def execute_decode_run(self, run: DecodeRun, until_s: float) -> DecodeRunResult:
        """Never called: `decode_runs` is False, so the engine steps every decode."""
        raise NotImplementedError("the real executor runs every step (decode_runs is False)")

    def _needs_logits(self, seq: Sequence) -> bool:
        return seq.scripted_output_ids is None or (
            self.first_logits is not None and seq.num_output_tokens == 0
        )

    def prepare(self, items: list[ScheduledSeq]) -> tuple[StepArrays, list[int]]:
        """The step's host arrays (the device table's pending updates included) and the items
        whose step samples a token. All host work of a step before the launches."""
        updates = self.tables.collect(self.cache)
        n = len(items)
        rows = self.tables.rows
        sampled = [i for i, it in enumerate(items) if it.end == it.seq.num_tokens]
        logits_seqs = [i for i in sampled if self._needs_logits(items[i].seq)]
        step = step_arrays(
            [tok for it in items for tok in it.seq.token_ids[it.start : it.end]],
            np.fromiter((it.start for it in items), dtype=np.int64, count=n),
            np.fromiter((it.num_new_tokens for it in items), dtype=np.int64, count=n),
            np.fromiter((rows[it.seq.seq_id] for it in items), dtype=np.int64, count=n),
            np.asarray(logits_seqs, dtype=np.int64),
            self.tables.width,
            self.cache.block_size,
            updates,
        )
        return step, sampled

    def forward(self, step: StepArrays) -> tuple[torch.Tensor, torch.Tensor]:
        """Hidden states of the step's tokens (decode: one per sequence) and the device index
        of the tokens whose logits are needed."""
        if self.graphs is not None and len(step.input_ids) == step.num_seqs:
            done = self.graphs.run(step)
            if done is not None:
                return done
        dev = StepTensors.unpack(self.packer.pack(step.parts()))
        self.tables.apply(dev.table_index, dev.table_ids)
        n = step.num_seqs
        seq_lens = step.lens[:n]
        max_seq_len = int(seq_lens.max()) if n else 0
        meta = attention_metadata(
            dev,
            self.tables.table,
            self.cache.block_size,
            max(-(-max_seq_len // self.cache.block_size), 1),
            tuple(step.query_lens.tolist()),
            tuple(step.lens[n : 2 * n].tolist()),
            max_seq_len,
        )
        hidden = self.model(dev.input_ids, meta, self.kv_pool, self.attn)
        return hidden, dev.logits_index

    @torch.inference_mode()
    def execute(self, plan: StepPlan) -> dict[str, int]:
        items = plan.scheduled
        if not items:
            return {}
        step, sampled = self.prepare(items)
        if self.host_pool is not None:  # loads land before the forward that reads them
            tier = self.cache
            assert isinstance(tier, HostTier) and self.host_link is not None
            self.host_pool.before_forward(tier.host_take_events())
            self.host_link.step(self.clock.now(), 0.0, tier.host_take_transfers())
        hidden, logits_index = self.forward(step)
        if self.host_pool is not None:
            self.host_pool.after_forward()
        greedy_tokens: dict[int, int] = {}  # item index -> argmax
        if len(step.logits_index):
            logits = self.model.logits_at(hidden, logits_index)
            seqs = [i for i in sampled if self._needs_logits(items[i].seq)]
            greedy = [row for row, i in enumerate(seqs) if items[i].seq.scripted_output_ids is None]
            if greedy:  # one argmax over the batch, one device-to-host copy
                argmax = torch.argmax(logits, dim=-1).tolist()
                greedy_tokens = {seqs[row]: argmax[row] for row in greedy}
            if self.first_logits is not None:
                for row, i in enumerate(seqs):
                    if items[i].seq.num_output_tokens == 0:
                        self.first_logits[items[i].seq.seq_id] = logits[row].float().cpu()
        out: dict[str, int] = {}
        for i in sampled:
            seq = items[i].seq
            script = seq.scripted_output_ids
            out[seq.seq_id] = greedy_tokens[i] if script is None else script[seq.num_output_tokens]
        return out
