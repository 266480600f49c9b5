"""A step's inputs in one packed copy: small host arrays in, device views out.

The executor builds a handful of int64 arrays per step (token ids, positions, table indices,
lengths, query offsets, block-table updates), each O(sequences + new tokens). `Packer.pack` lays
them end to end in one host buffer (pinned on CUDA) and copies it with one non-blocking transfer;
the views it returns are slices of the device copy. On CPU the host buffer is the device buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engines.attention.metadata import AttentionMetadata


class Packer:
    """Packs int64 arrays into one host buffer and one host-to-device copy per step."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.on_cpu = device.type == "cpu"
        # Two host buffers in turn on CUDA, each reused only after its last copy has left it.
        self._host: list[torch.Tensor] = [torch.empty(0, dtype=torch.int64) for _ in range(2)]
        self._events: list[torch.cuda.Event | None] = [None, None]
        self._turn = 0
        self._device_buf = torch.empty(0, dtype=torch.int64, device=device)

    def _host_buffer(self, size: int) -> tuple[torch.Tensor, int]:
        turn = self._turn = 1 - self._turn
        event = self._events[turn]
        if event is not None:
            event.synchronize()  # long done: the copy was enqueued a whole step ago
        buf = self._host[turn]
        if buf.numel() < size:
            size = max(size, 2 * buf.numel(), 1024)
            buf = torch.empty(size, dtype=torch.int64, pin_memory=not self.on_cpu)
            self._host[turn] = buf
        return buf, turn

    def pack(self, parts: list[np.ndarray], out: torch.Tensor | None = None) -> list[torch.Tensor]:
        """`parts` end to end in one buffer, copied once to the device (into `out` when given:
        a fixed buffer a CUDA graph reads); returns one device view per part."""
        sizes = [len(p) for p in parts]
        total = sum(sizes)
        buf, turn = self._host_buffer(total)
        host = buf.numpy()
        offset = 0
        for part, size in zip(parts, sizes):
            host[offset : offset + size] = part
            offset += size
        if out is not None:
            out[:total].copy_(buf[:total], non_blocking=True)
            dev = out
        elif self.on_cpu:
            dev = buf
        else:
            if self._device_buf.numel() < total:
                self._device_buf = torch.empty(
                    max(total, 2 * self._device_buf.numel()), dtype=torch.int64, device=self.device
                )
            dev = self._device_buf
            dev[:total].copy_(buf[:total], non_blocking=True)
        if not self.on_cpu:
            event = self._events[turn] = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record()
        views, offset = [], 0
        for size in sizes:
            views.append(dev[offset : offset + size])
            offset += size
        return views


@dataclass(frozen=True)
class StepArrays:
    """The host side of one step, int64 arrays: n scheduled sequences, T new tokens."""

    input_ids: np.ndarray  # [T]
    positions: np.ndarray  # [T] absolute position of each new token
    slot_index: np.ndarray  # [T] flat table index of the block each new token's K/V goes to
    slot_offset: np.ndarray  # [T] its offset in that block (position % block_size)
    seq_rows: np.ndarray  # [n] each sequence's device-table row
    lens: np.ndarray  # [3n + 1]: seq_lens [n] | context_lens [n] | query_start_loc [n + 1]
    logits_index: np.ndarray  # [k] token index of each row whose logits are needed
    table_index: np.ndarray  # [U] block-table updates: flat index ...
    table_ids: np.ndarray  # [U] ... and block id
    query_lens: np.ndarray  # [n] (host only)

    @property
    def num_seqs(self) -> int:
        return len(self.seq_rows)

    def parts(self) -> list[np.ndarray]:
        """What `Packer.pack` copies, in this order (`unpack` names the views)."""
        return [
            self.input_ids,
            self.positions,
            self.slot_index,
            self.slot_offset,
            self.seq_rows,
            self.lens,
            self.logits_index,
            self.table_index,
            self.table_ids,
        ]


def step_arrays(
    token_ids: list[int],
    context_lens: np.ndarray,
    query_lens: np.ndarray,
    seq_rows: np.ndarray,
    logits_seqs: np.ndarray,
    table_width: int,
    block_size: int,
    updates: tuple[np.ndarray, np.ndarray],
) -> StepArrays:
    """Vectorised over the step's tokens: sequence s has context_lens[s] cached tokens and
    query_lens[s] new ones (`token_ids`, packed); `logits_seqs` are the sequences whose last
    new token needs logits."""
    n = len(query_lens)
    qsl = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(query_lens, out=qsl[1:])
    num_tokens = int(qsl[-1])
    # position of token t of sequence s = context_lens[s] + (t - qsl[s])
    positions = np.arange(num_tokens, dtype=np.int64) + np.repeat(
        context_lens - qsl[:-1], query_lens
    )
    rows = np.repeat(seq_rows, query_lens)
    seq_lens = context_lens + query_lens
    return StepArrays(
        input_ids=np.asarray(token_ids, dtype=np.int64),
        positions=positions,
        slot_index=rows * table_width + positions // block_size,
        slot_offset=positions % block_size,
        seq_rows=seq_rows,
        lens=np.concatenate([seq_lens, context_lens, qsl]),
        logits_index=qsl[logits_seqs + 1] - 1,
        table_index=updates[0],
        table_ids=updates[1],
        query_lens=query_lens,
    )


def pad_decode(step: StepArrays, size: int) -> StepArrays:
    """A decode step (one token per sequence) padded to `size` rows for a CUDA graph. Padding
    rows read table row 0 (all block 0, the reserved block), store their K/V there, attend to
    one key and are never sampled."""
    n = step.num_seqs
    pad = size - n
    if pad < 0 or len(step.input_ids) != n:
        raise ValueError(f"pad_decode takes a decode step of at most {size} sequences")
    zeros = np.zeros(pad, dtype=np.int64)
    seq_lens, context_lens = step.lens[:n], step.lens[n : 2 * n]
    qsl = np.arange(size + 1, dtype=np.int64)
    return StepArrays(
        input_ids=np.concatenate([step.input_ids, zeros]),
        positions=np.concatenate([step.positions, zeros]),
        slot_index=np.concatenate([step.slot_index, zeros]),
        slot_offset=np.concatenate([step.slot_offset, zeros]),
        seq_rows=np.concatenate([step.seq_rows, zeros]),
        lens=np.concatenate([seq_lens, zeros + 1, context_lens, zeros, qsl]),
        logits_index=step.logits_index,
        table_index=step.table_index,
        table_ids=step.table_ids,
        query_lens=np.concatenate([step.query_lens, zeros + 1]),
    )


@dataclass(frozen=True)
class StepTensors:
    """`StepArrays.parts()` as device views."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_index: torch.Tensor
    slot_offset: torch.Tensor
    seq_rows: torch.Tensor
    lens: torch.Tensor
    logits_index: torch.Tensor
    table_index: torch.Tensor
    table_ids: torch.Tensor

    @classmethod
    def unpack(cls, views: list[torch.Tensor]) -> StepTensors:
        return cls(*views)


def attention_metadata(
    dev: StepTensors,
    table: torch.Tensor,
    block_size: int,
    num_blocks: int,
    query_lens: tuple[int, ...],
    context_lens: tuple[int, ...],
    max_seq_len: int,
) -> AttentionMetadata:
    """The step's metadata from its device views: slot mapping gathered from the device table,
    and the first `num_blocks` table columns of each scheduled row. Launches a few small kernels
    and never synchronises (a CUDA graph captures it as is)."""
    n = len(query_lens)
    lens = dev.lens.to(torch.int32)
    blocks = table.view(-1).index_select(0, dev.slot_index).to(torch.int64)
    return AttentionMetadata(
        query_start_loc=lens[2 * n :],
        seq_lens=lens[:n],
        context_lens=lens[n : 2 * n],
        block_table=table[:, :num_blocks].index_select(0, dev.seq_rows),
        slot_mapping=blocks * block_size + dev.slot_offset,
        positions=dev.positions,
        block_size=block_size,
        max_query_len=max(query_lens, default=0),
        max_seq_len=max_seq_len,
        query_lens_host=query_lens,
        context_lens_host=context_lens,
    )
