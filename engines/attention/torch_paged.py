"""The torch paged-attention backend: the fast CPU path (and a portable fallback anywhere).

Store the step's new K/V at `slot_mapping`, then gather each sequence's pages through the block
table and call scaled_dot_product_attention with a bottom-right-aligned causal mask. Long queries
run in chunks of CHUNK_ROWS rows; decode rows (query length 1) of similar lengths share one call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engines.attention.metadata import AttentionMetadata

# 256-row chunks beat one masked call by ~1.3-2x on CPU (the mask shrinks to the visible keys).
CHUNK_ROWS = 256
# Decode rows are padded to the longest key length of their group; a new group starts when a
# sequence is this many times longer than the group's shortest, bounding the wasted work.
DECODE_GROUP_RATIO = 2.0
# ...and when its gathered keys would exceed this many elements (4 MiB of fp32): the gathered
# copy then stays cache-resident for SDPA instead of streaming a second time from DRAM.
DECODE_GROUP_KEY_ELEMENTS = 1 << 20


def store_kv_torch(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write k/v `[T, Hkv, D]` at flat slots (block * B + offset); slots < 0 are padding, skipped."""
    slots = slot_mapping.to(torch.int64)
    valid = slots >= 0
    if not bool(valid.all()):
        slots, k, v = slots[valid], k[valid], v[valid]
    flat = (-1, *k_cache.shape[2:])
    k_cache.view(flat).index_copy_(0, slots, k.to(k_cache.dtype))
    v_cache.view(flat).index_copy_(0, slots, v.to(v_cache.dtype))


class GatherScratch:
    """Reusable buffers for gathered pages. A fresh multi-MiB tensor per layer and step costs a
    page fault per 4 KiB on first touch, which on a VM is slower than the copy itself."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}

    def gather(self, slot: int, cache: torch.Tensor, pages: torch.Tensor) -> torch.Tensor:
        """`[*pages.shape, B, Hkv, D]` copies of whole blocks into buffer `slot` (index_select:
        ~6x faster on CPU than advanced indexing). Valid until the next gather into `slot`."""
        shape = (*pages.shape, *cache.shape[1:])
        numel = pages.numel() * cache[0].numel()
        key = (slot, cache.dtype, cache.device)
        buf = self._buffers.get(key)
        if buf is None or buf.numel() < numel:
            buf = self._buffers[key] = torch.empty(numel, dtype=cache.dtype, device=cache.device)
        out = buf[:numel].view(-1, *cache.shape[1:])
        torch.index_select(cache, 0, pages.reshape(-1), out=out)
        return out.view(shape)


def _attend_sequence(
    q_seq: torch.Tensor, k_seq: torch.Tensor, v_seq: torch.Tensor, context_len: int, scale: float
) -> torch.Tensor:
    """One sequence: q `[n, Hq, D]`, k/v `[context_len + n, Hkv, D]` -> `[n, Hq, D]`.

    A chunk of rows [r0, r1) sees keys [0, ctx + r1); inside that window the rule j <= ctx + i is
    exactly a bottom-right-aligned causal mask:

        keys   0 ... ctx+r0 ... ctx+r1-1
        r0     x x x x x  x  .  .  .
        r1-1   x x x x x  x  x  x  x
    """
    n = q_seq.shape[0]
    # Strided views are fine here: SDPA's CPU kernel reads them as fast as contiguous copies.
    q4 = q_seq.transpose(0, 1).unsqueeze(0)  # [1, Hq, n, D]
    k4 = k_seq.transpose(0, 1).unsqueeze(0)  # [1, Hkv, L, D]
    v4 = v_seq.transpose(0, 1).unsqueeze(0)
    pieces = []
    for r0 in range(0, n, CHUNK_ROWS):
        r1 = min(n, r0 + CHUNK_ROWS)
        num_keys = context_len + r1
        mask = None
        if r1 - r0 > 1:
            mask = torch.ones(r1 - r0, num_keys, dtype=torch.bool, device=q_seq.device)
            mask = mask.tril(diagonal=context_len + r0)
        pieces.append(
            F.scaled_dot_product_attention(
                q4[:, :, r0:r1],
                k4[:, :, :num_keys],
                v4[:, :, :num_keys],
                attn_mask=mask,
                scale=scale,
                enable_gqa=True,
            )
        )
    return torch.cat(pieces, dim=2)[0].transpose(0, 1)


def _decode_groups(seq_ids: list[int], seq_lens: list[int], key_elements: int) -> list[list[int]]:
    """Decode sequences sorted by key length, cut where padding would more than double the work
    or the group's gathered keys (`key_elements` per key) would outgrow the cache budget."""
    order = sorted(seq_ids, key=lambda s: seq_lens[s])
    groups: list[list[int]] = []
    for s in order:
        if groups:
            padded = (len(groups[-1]) + 1) * seq_lens[s] * key_elements
            similar = seq_lens[s] <= DECODE_GROUP_RATIO * seq_lens[groups[-1][0]]
            if similar and padded <= DECODE_GROUP_KEY_ELEMENTS:
                groups[-1].append(s)
                continue
        groups.append([s])
    return groups


def _attend_decode_group(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    seq_ids: list[int],
    token_ids: list[int],
    seq_lens: list[int],
    scale: float,
    scratch: GatherScratch,
) -> torch.Tensor:
    """Single-token queries of several sequences in one SDPA call, keys padded with a length mask.

    The qpk query heads of a KV head become qpk "query rows" of that head (q.view(N, Hkv, qpk, D)):
    one query token needs no causal mask, and SDPA then never expands K/V for GQA.
    """
    device = q.device
    num_seqs, num_kv_heads, head_dim = len(seq_ids), k_cache.shape[2], q.shape[2]
    num_keys = max(seq_lens[s] for s in seq_ids)
    num_pages = -(-num_keys // meta.block_size)
    rows = torch.tensor(seq_ids, dtype=torch.int64, device=device)
    pages = meta.block_table[rows, :num_pages].long()  # [N, P]; padding pages are block 0
    kv_shape = (num_seqs, num_pages * meta.block_size, num_kv_heads, head_dim)
    k = scratch.gather(0, k_cache, pages).view(kv_shape).transpose(1, 2)  # [N, Hkv, P*B, D]
    v = scratch.gather(1, v_cache, pages).view(kv_shape).transpose(1, 2)
    lens = torch.tensor([seq_lens[s] for s in seq_ids], device=device)
    mask = torch.arange(num_pages * meta.block_size, device=device)[None, :] < lens[:, None]
    tokens = torch.tensor(token_ids, dtype=torch.int64, device=device)
    q_grouped = q.index_select(0, tokens).view(num_seqs, num_kv_heads, -1, head_dim)
    out = F.scaled_dot_product_attention(
        q_grouped, k, v, attn_mask=mask[:, None, None, :], scale=scale
    )
    return out.reshape(num_seqs, -1, head_dim)


def paged_attention_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    scratch: GatherScratch | None = None,
) -> torch.Tensor:
    """q `[T, Hq, D]` against K/V already in the paged cache (new tokens included) -> `[T, Hq, D]`."""
    scratch = scratch or GatherScratch()
    out = torch.empty_like(q)
    seq_lens = [c + n for c, n in zip(meta.context_lens_host, meta.query_lens_host)]
    starts = [0]
    for n in meta.query_lens_host:
        starts.append(starts[-1] + n)
    decode_ids = [s for s, n in enumerate(meta.query_lens_host) if n == 1]
    for s, n in enumerate(meta.query_lens_host):
        if n <= 1:
            continue
        num_keys = seq_lens[s]
        pages = meta.block_table[s, : -(-num_keys // meta.block_size)].long()
        k_seq = scratch.gather(0, k_cache, pages).flatten(0, 1)[:num_keys]  # [L, Hkv, D]
        v_seq = scratch.gather(1, v_cache, pages).flatten(0, 1)[:num_keys]
        out[starts[s] : starts[s + 1]] = _attend_sequence(
            q[starts[s] : starts[s + 1]], k_seq, v_seq, meta.context_lens_host[s], scale
        )
    key_elements = k_cache.shape[2] * k_cache.shape[3]
    for group in _decode_groups(decode_ids, seq_lens, key_elements):
        token_ids = [starts[s] for s in group]
        out[token_ids] = _attend_decode_group(
            q, k_cache, v_cache, meta, group, token_ids, seq_lens, scale, scratch
        )
    return out


class TorchPagedBackend:
    """`backend=torch`: store, then gather + SDPA. Works on any device torch supports."""

    name = "torch"

    def __init__(self) -> None:
        self.scratch = GatherScratch()  # shared by all layers: they run one after another

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        # Write before read: this step's queries (and other sequences sharing a freshly matched
        # block) read the K/V stored here.
        store_kv_torch(k, v, k_cache, v_cache, meta.slot_mapping)
        return paged_attention_torch(q, k_cache, v_cache, meta, scale, self.scratch)
