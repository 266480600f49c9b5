"""Batch metadata for the paged-attention core (vLLM's names, docs/apc.md §14.3).

A step packs the new tokens of every scheduled sequence into one varlen batch:

    seq 0: context 5, 3 new   seq 1: context 0, 4 new
    tokens:  [a0 a1 a2 | b0 b1 b2 b3]        query_start_loc = [0, 3, 7]
    seq_lens = context + new = [8, 4]        positions = [5 6 7 | 0 1 2 3]

Key position j of sequence s lives in block `block_table[s, j // B]` at offset `j % B`, and is
visible to local query i iff `j <= context_len + i` (the single rule for cached and new keys).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AttentionMetadata:
    query_start_loc: torch.Tensor  # int32 [num_seqs + 1]
    seq_lens: torch.Tensor  # int32 [num_seqs]: context + new tokens
    context_lens: torch.Tensor  # int32 [num_seqs]: tokens already in the pool
    block_table: torch.Tensor  # int32 [num_seqs, max_blocks], unused entries 0 (reserved block)
    slot_mapping: torch.Tensor  # int64 [num_tokens]: where each new token's K/V is stored
    positions: torch.Tensor  # int64 [num_tokens]: absolute position of each new token
    block_size: int
    max_query_len: int
    max_seq_len: int
    # Host copies, so CPU paths never synchronise on device tensors.
    query_lens_host: tuple[int, ...]
    context_lens_host: tuple[int, ...]

    @property
    def num_seqs(self) -> int:
        return len(self.query_lens_host)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens_host)

    @classmethod
    def build(
        cls,
        context_lens: list[int],
        query_lens: list[int],
        block_tables: list[list[int]],
        block_size: int,
        device: torch.device | str = "cpu",
    ) -> AttentionMetadata:
        """Metadata for sequences with `context_lens[s]` cached and `query_lens[s]` new tokens.

        `block_tables[s]` must cover all `context_lens[s] + query_lens[s]` tokens.
        """
        if not (len(context_lens) == len(query_lens) == len(block_tables)):
            raise ValueError("context_lens, query_lens and block_tables must have equal length")
        seq_lens = [c + q for c, q in zip(context_lens, query_lens)]
        for s, (n, blocks_of_s) in enumerate(zip(seq_lens, block_tables)):
            if len(blocks_of_s) * block_size < n:
                raise ValueError(
                    f"block table of sequence {s} covers {len(blocks_of_s) * block_size} < {n} "
                    "tokens"
                )
        max_blocks = max((len(t) for t in block_tables), default=0)
        table = torch.zeros((len(block_tables), max(max_blocks, 1)), dtype=torch.int32)
        for s, t in enumerate(block_tables):
            if t:
                table[s, : len(t)] = torch.tensor(t, dtype=torch.int32)
        positions = torch.cat(
            [torch.arange(c, c + q, dtype=torch.int64) for c, q in zip(context_lens, query_lens)]
            or [torch.empty(0, dtype=torch.int64)]
        )
        seq_index = torch.repeat_interleave(
            torch.arange(len(query_lens)), torch.tensor(query_lens, dtype=torch.int64)
        )
        blocks = table[seq_index, positions // block_size].to(torch.int64)
        slot_mapping = blocks * block_size + positions % block_size
        qsl = torch.zeros(len(query_lens) + 1, dtype=torch.int32)
        qsl[1:] = torch.cumsum(torch.tensor(query_lens, dtype=torch.int32), 0)
        dev = torch.device(device)
        return cls(
            query_start_loc=qsl.to(dev),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=dev),
            context_lens=torch.tensor(context_lens, dtype=torch.int32, device=dev),
            block_table=table.to(dev),
            slot_mapping=slot_mapping.to(dev),
            positions=positions.to(dev),
            block_size=block_size,
            max_query_len=max(query_lens, default=0),
            max_seq_len=max(seq_lens, default=0),
            query_lens_host=tuple(query_lens),
            context_lens_host=tuple(context_lens),
        )
