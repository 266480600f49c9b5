"""CUDA graphs for decode-only steps, one per padded batch size (vLLM's capture sizes).

A decode step of n sequences is padded to the smallest capture size N >= n (`pad_decode`) and
packed into one fixed device buffer at offsets that depend on N alone; the graph of size N was
captured reading exactly those views (and the persistent block table), so a step is one packed
copy, one table scatter and one replay. Prefill and mixed steps run eagerly. Without CUDA the
same padded static-buffer path runs eagerly (`capture=False`): that is what the CPU tests check.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from engines.step_inputs import StepArrays, StepTensors, attention_metadata, pad_decode

if TYPE_CHECKING:
    from engines.attention.backend import AttentionBackend
    from engines.device_tables import DeviceBlockTable
    from engines.kv_pool import KVPool
    from engines.model.llama import LlamaModel
    from engines.step_inputs import Packer

# Block-table updates a graphed step may carry in its buffer; a step with more runs eagerly.
UPDATE_CAPACITY = 8192


def capture_sizes(max_num_seqs: int) -> list[int]:
    """1, 2, 4, 8, then every 8 up to 256 and every 16 beyond, up to the first size that holds
    `max_num_seqs` (vLLM's default capture sizes follow the same steps)."""
    sizes = [1, 2, 4, 8]
    while sizes[-1] < max_num_seqs:
        sizes.append(sizes[-1] + (8 if sizes[-1] < 256 else 16))
    first_fit = bisect.bisect_left(sizes, max_num_seqs)
    return sizes[: first_fit + 1]


def bucket_for(num_seqs: int, sizes: list[int]) -> int | None:
    """The smallest capture size holding `num_seqs` sequences; None above the largest."""
    i = bisect.bisect_left(sizes, num_seqs)
    return sizes[i] if i < len(sizes) else None


def graph_layout(size: int) -> list[int]:
    """Lengths of the fixed part of a padded step of `size` rows (`StepArrays.parts()` up to and
    including `lens`): ids, positions, slot index, slot offset, rows, lens."""
    return [size, size, size, size, size, 3 * size + 1]


@dataclass
class _Entry:
    graph: Any  # torch.cuda.CUDAGraph, or None when running eagerly
    hidden: torch.Tensor | None  # the graph's output, [size, hidden]


class DecodeGraphs:
    """Decode steps through per-size static buffers: captured on CUDA, eager elsewhere."""

    def __init__(
        self,
        model: LlamaModel,
        kv_pool: KVPool,
        attn: AttentionBackend,
        tables: DeviceBlockTable,
        packer: Packer,
        block_size: int,
        max_num_seqs: int,
        max_seq_len: int,
        capture: bool,
    ) -> None:
        self.model, self.kv_pool, self.attn = model, kv_pool, attn
        self.tables, self.packer = tables, packer
        self.block_size = block_size
        self.sizes = capture_sizes(max_num_seqs)
        self.max_seq_len = max_seq_len  # what a captured kernel is sized for
        self.capture = capture
        largest = self.sizes[-1]
        self.buffer = torch.zeros(
            sum(graph_layout(largest)) + largest + 2 * UPDATE_CAPACITY,
            dtype=torch.int64,
            device=tables.device,
        )
        self.entries: dict[int, _Entry] = {}
        self.generation = tables.generation
        self.pool: Any = None
        self.num_replays = 0

    def _views(self, size: int) -> StepTensors:
        """The fixed views a step of `size` rows is read through (captured graphs hold them)."""
        views, offset = [], 0
        for length in graph_layout(size):
            views.append(self.buffer[offset : offset + length])
            offset += length
        empty = self.buffer[:0]
        ids, positions, slot_index, slot_offset, rows, lens = views
        return StepTensors(ids, positions, slot_index, slot_offset, rows, lens, empty, empty, empty)

    def _forward(self, size: int, context_lens: tuple[int, ...] | None = None) -> torch.Tensor:
        """The model on the views of `size` rows. A captured graph bakes in the host lengths,
        which graph-safe backends never read; the eager path passes the step's own."""
        dev = self._views(size)
        meta = attention_metadata(
            dev,
            self.tables.table,
            self.block_size,
            self.tables.width,
            (1,) * size,
            context_lens or (0,) * size,
            self.max_seq_len,
        )
        hidden: torch.Tensor = self.model(dev.input_ids, meta, self.kv_pool, self.attn)
        return hidden

    def run(self, step: StepArrays) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(hidden states [n, H], logits index on the device) of a decode step, or None when it
        cannot run here (larger than every size, or too many table updates)."""
        n = step.num_seqs
        size = bucket_for(n, self.sizes)
        if size is None or len(step.input_ids) != n or len(step.table_index) > UPDATE_CAPACITY:
            return None
        padded = pad_decode(step, size)
        parts = padded.parts()
        views = self.packer.pack(parts, out=self.buffer)
        tail = StepTensors.unpack(views)
        self.tables.apply(tail.table_index, tail.table_ids)
        if self.tables.generation != self.generation:  # the table moved: recapture
            self.entries.clear()
            self.generation = self.tables.generation
        entry = self.entries.get(size)
        if entry is None:
            entry = self.entries[size] = self._capture(size)
        if entry.graph is None:
            hidden = self._forward(size, tuple(padded.lens[size : 2 * size].tolist()))
        else:
            entry.graph.replay()
            assert entry.hidden is not None
            hidden = entry.hidden
        self.num_replays += 1
        return hidden[:n], tail.logits_index

    def _capture(self, size: int) -> _Entry:
        """Warm up on a side stream (compiles kernels, settles allocations), then capture. The
        buffer holds this step's inputs, so the warm-up runs do the step's own work, which the
        replay that follows repeats identically."""
        if not self.capture:
            return _Entry(None, None)
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._forward(size)
        torch.cuda.current_stream().wait_stream(stream)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            hidden = self._forward(size)
        return _Entry(graph, hidden)

    def capture_all(self) -> None:
        """Capture every size up front, largest first (its memory is then reused by the rest),
        on padding-only inputs: outside any timed run, as vLLM captures at start-up."""
        if not self.capture:
            return
        for size in reversed(self.sizes):
            if size not in self.entries:
                self.packer.pack(padding_step(size).parts(), out=self.buffer)
                self.entries[size] = self._capture(size)

    def captured_sizes(self) -> list[int]:
        return sorted(size for size, e in self.entries.items() if e.graph is not None)


def padding_step(size: int) -> StepArrays:
    """A decode step of `size` padding rows only (what `pad_decode` appends)."""
    none = np.zeros(0, dtype=np.int64)
    empty = StepArrays(
        none, none, none, none, none, np.zeros(1, dtype=np.int64), none, none, none, none
    )
    return pad_decode(empty, size)
