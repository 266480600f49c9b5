"""The field's load generators in their own environments (scripts/setup_clients.sh) for the live
client tests: `need` fails under CI=true (CI builds them) and skips elsewhere when one is missing;
`serving` runs the built-in server in this process with its request log, for the join."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.builtin_server.server import InProcessServer, compose_config, prepare
from tests.harness_util import ROOT

CLIENTS_HF_HOME = ROOT / ".venv-clients" / "hf"  # SmolLM2's tokenizer as an offline hub entry
TOKENIZER_REPO = "prefixbench/smollm2"  # its repo id there (scripts/client_tokenizer.py)
OFFLINE = {
    "HF_HOME": str(CLIENTS_HF_HOME),
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


def need(path: Path, setup: str = "scripts/setup_clients.sh", in_ci: bool = True) -> Path:
    """`path` (a client, or the tokenizer entry CLIENTS_HF_HOME), or fail (under CI=true, where
    CI builds it) or skip, naming the setup to run."""
    if path.exists():
        return path
    problem = f"needs {path.relative_to(ROOT)}: run bash {setup}"
    if in_ci and os.environ.get("CI") == "true":
        pytest.fail(problem)
    pytest.skip(problem)


def client_env() -> dict[str, str]:
    return {**os.environ, **OFFLINE}


@contextmanager
def serving(log: Path, name: str = TOKENIZER_REPO) -> Iterator[InProcessServer]:
    """`harness.builtin_server` (apc, smollm2-rand, served by default under the tokenizer's repo
    id, so a client that loads its tokenizer by the model's name finds it), request_log=`log`."""
    args = ["engine=apc", "model=smollm2-rand", "device=cpu"]
    names = [f"served_model_name={name}", f"request_log={log}"]
    with InProcessServer(prepare(compose_config([*args, *names]))) as server:
        yield server
