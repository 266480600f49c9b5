"""A Llama-style decoder (RMSNorm, RoPE, GQA, SwiGLU) on the shared paged-attention core.

The model sees one packed step: the new tokens of every scheduled sequence, `[T]` ids, and an
`AttentionMetadata` that says where their K/V go in the pool and which cached keys they see. Each
layer hands its own K/V cache tensors to the attention backend. Q/K/V and gate/up are fused
projections (one matmul each), as in nano-vllm; weight sources fill them (engines.model.weights).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from engines.attention.metadata import AttentionMetadata
from engines.model.config import ModelConfig

if TYPE_CHECKING:
    from engines.attention.backend import AttentionBackend
    from engines.kv_pool import KVPool


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 (as HF Llama does), scale in the model's dtype.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin `[T, head_dim]` for absolute `positions`, halves repeated (HF's layout)."""
    inv_freq = 1.0 / theta ** (
        torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim
    )
    freqs = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF's rotate_half RoPE on `x [T, H, D]`: dimension i pairs with i + D/2.

    x = [x1 | x2]  ->  [x1*cos - x2*sin | x2*cos + x1*sin]
    """
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.scale = cfg.head_dim**-0.5
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.qkv_proj = nn.Linear(cfg.hidden_size, cfg.q_size + 2 * cfg.kv_size, bias=False)
        self.o_proj = nn.Linear(cfg.q_size, cfg.hidden_size, bias=False)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def attention(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        meta: AttentionMetadata,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        attn: AttentionBackend,
    ) -> torch.Tensor:
        cfg, num_tokens = self.cfg, x.shape[0]
        q, k, v = self.qkv_proj(x).split([cfg.q_size, cfg.kv_size, cfg.kv_size], dim=-1)
        q = apply_rope(q.view(num_tokens, cfg.num_heads, cfg.head_dim), cos, sin)
        k = apply_rope(k.view(num_tokens, cfg.num_kv_heads, cfg.head_dim), cos, sin)
        v = v.view(num_tokens, cfg.num_kv_heads, cfg.head_dim)
        out = attn.forward(q, k, v, k_cache, v_cache, meta, self.scale)
        projected: torch.Tensor = self.o_proj(out.reshape(num_tokens, cfg.q_size))
        return projected

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        down: torch.Tensor = self.down_proj(F.silu(gate) * up)
        return down

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        meta: AttentionMetadata,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        attn: AttentionBackend,
    ) -> torch.Tensor:
        x = x + self.attention(self.attn_norm(x), cos, sin, meta, k_cache, v_cache, attn)
        out: torch.Tensor = x + self.mlp(self.mlp_norm(x))
        return out


class LlamaModel(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        # Tied: the output projection is the embedding matrix itself.
        self.lm_head = (
            None
            if cfg.tie_word_embeddings
            else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        )

    @torch.inference_mode()
    def forward(
        self, input_ids: torch.Tensor, meta: AttentionMetadata, kv: KVPool, attn: AttentionBackend
    ) -> torch.Tensor:
        """Hidden states `[T, hidden]` of the step's new tokens; writes their K/V into `kv`."""
        if meta.max_seq_len > self.cfg.max_position_embeddings:
            raise ValueError(
                f"sequence of {meta.max_seq_len} tokens exceeds "
                f"model.max_position_embeddings ({self.cfg.max_position_embeddings})"
            )
        h = self.embed(input_ids)
        cos, sin = rope_cos_sin(meta.positions, self.cfg.head_dim, self.cfg.rope_theta, h.dtype)
        for i, layer in enumerate(self.layers):
            h = layer(h, cos, sin, meta, kv.k_cache[i], kv.v_cache[i], attn)
        normed: torch.Tensor = self.norm(h)
        return normed

    @torch.inference_mode()
    def compute_logits(
        self, hidden: torch.Tensor, meta: AttentionMetadata, all_tokens: bool = False
    ) -> torch.Tensor:
        """fp32 logits of each sequence's last new token `[num_seqs, V]` (or of every token)."""
        if not all_tokens:
            last = torch.tensor(meta.query_lens_host).cumsum(0) - 1
            hidden = hidden[last.to(hidden.device)]
        weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(hidden, weight).float()

    @torch.inference_mode()
    def logits_at(self, hidden: torch.Tensor, token_index: torch.Tensor) -> torch.Tensor:
        """fp32 logits `[k, V]` of the tokens at `token_index` only (the rows a step samples)."""
        weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(hidden.index_select(0, token_index), weight).float()
