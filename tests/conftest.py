"""Test setup: offline Hugging Face, Triton's CPU interpreter when there is no GPU, one CPU thread
per process, markers, and slow tests first.

TRITON_INTERPRET must be set before any Triton kernel module is imported, hence at conftest import.
The suite runs on pytest-xdist workers (pyproject addopts); every worker imports this file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# One thread in every process the tests start too: two workers already fill a 2-core box.
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


HAS_CUDA = _has_cuda()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

# One thread: on a 2-core box two torch threads collapse whenever anything else runs.
torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)
    # Whole modules holding a slow test go first (a stable sort keeps each module's tests together
    # and in order), so no long test is handed to a worker at the very end of the run.
    slow = {getattr(item, "module", None) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: getattr(item, "module", None) not in slow)
