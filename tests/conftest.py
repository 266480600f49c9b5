"""Test setup: offline Hugging Face, Triton's CPU interpreter when there is no GPU, one CPU thread
per process, markers, slow tests first, a worker's end-of-session work done before it reports, and
the session fixtures several files share (the vLLM server, the quick claims), each group of files
one xdist work unit.

TRITON_INTERPRET must be set before any Triton kernel module is imported, hence at conftest import.
The suite runs on pytest-xdist workers (pyproject addopts); every worker imports this file.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

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

from tests.tier_guard import TIERS, guarded  # noqa: E402

if TYPE_CHECKING:
    from tests.quick_claims import QuickClaims

# One thread: on a 2-core box two torch threads collapse whenever anything else runs.
torch.set_num_threads(1)


def tier_of(path: Path) -> str | None:
    """`unit`, `run` or `live` for a test file under tests/<tier>/, else None."""
    parts = path.resolve().relative_to(ROOT / "tests").parts
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """pytest-xdist 3 under `-q` (our addopts) on a non-terminal writes its status line "bringing up
    nodes..." at start and again, unchanged, once the workers have collected: write each line once."""
    reporter = config.pluginmanager.get_plugin("terminaldistreporter")
    if reporter is None or not hasattr(reporter, "ensure_show_status"):
        return
    show, written = reporter.ensure_show_status, set()

    def show_once() -> None:
        line = reporter.getstatus()
        if line not in written:
            written.add(line)
            show()

    reporter.ensure_show_status = show_once


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)
        if tier_of(item.path) == "live":  # slow by where it lives, never by hand
            item.add_marker(pytest.mark.slow)
    # Whole modules holding a slow test go first (a stable sort keeps each module's tests together
    # and in order), so no long test is handed to a worker at the very end of the run; among
    # them the CPU-timed files last (RUN_ORDER).
    slow = {getattr(item, "module", None) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: run_rank(item.nodeid, getattr(item, "module", None) in slow))


# Where a slow file runs among the slow files. The files timing CPU go last among them, once
# every server has been started and the other worker is on in-process tests: run at the start of a
# CI rehearsal, beside three vLLM starts (load average 17), the two invocations of
# tests/live/test_claims_reproduce.py labelled claim 1 differently (2026-12-07). The port-taken
# test's vLLM start goes first, beside the session server's, rather than beside that file. Putting
# every file with vLLM starts of its own first was tried: their starts then overlapped, and the
# README's compiled start took 267 s instead of 101 (pytest 2,083 s against 1,874).
RUN_ORDER = {
    "tests/live/test_vllm_port_taken.py": 0,
    "tests/live/test_claims_reproduce.py": 2,
}


def run_rank(nodeid: str, slow: bool) -> int:
    """0 the port-taken test's vLLM start, 1 another slow file, 2 a slow file timing CPU, 3 the
    rest."""
    return RUN_ORDER.get(file_of(nodeid), 1) if slow else 3


# An xdist worker is told to terminate as soon as every worker has reported finished, and execnet
# sends a worker still busy 5 s later a SIGINT. What a worker did after reporting took 2.3-4.7 s
# on the 2-core box (more on a slower one): hypothesis's terminal summary importing hypothesis in a
# worker that ran no hypothesis test (2.5-3.7 s: pytest rewrites its asserts, again on every run
# where no bytecode is written) and pytest's two end-of-session collections walking the whole heap
# (0.2-0.8 s each). Past 5 s the KeyboardInterrupt lands wherever the worker is; in a finaliser or a
# gc callback (hypothesis installs one) it is "PytestUnraisableExceptionWarning: Exception ignored
# in: ... KeyboardInterrupt" after a run where nothing failed. So that work is done before the
# worker reports: the garbage is collected in the last test's teardown (an unraisable there fails
# that test: pyproject filterwarnings), hypothesis is imported, and what is left is frozen, so
# pytest's collections after the report have next to nothing to walk.
@pytest.fixture(scope="session", autouse=True)
def _collect_garbage_in_the_last_teardown() -> Iterator[None]:
    yield
    gc.collect()


def pytest_sessionstart(session: pytest.Session) -> None:
    """What every run's manifest records and a child process answers, asked once before any test
    so those children belong to the session, not to a fast-tier test (tests/tier_guard.py): the
    checkout's git state (`git`), and the platform string (`platform` asks `uname -p` once)."""
    import platform

    from harness.results.manifest import repo_git_state

    repo_git_state()
    platform.platform()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Runs before the xdist worker reports finished (xdist reports after every sessionfinish)."""
    if not hasattr(session.config, "workerinput"):
        return  # not a worker: nothing ends this process early
    import hypothesis  # noqa: F401  (what its pytest plugin's terminal summary imports)

    gc.freeze()


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A word-level tokenizer.json over the tiny model's 1,024 ids, id 0 special: what a built-in
    or fake server of model=tiny serves (server.tokenizer), and the token space an in-process run
    of model=tiny draws from (ids 1..1023), so a served run and an in-process run generate the
    same prompts."""
    from tokenizers import AddedToken, Tokenizer, models

    vocab = {f"t{i}": i for i in range(1, 1024)} | {"<unk>": 0}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.add_special_tokens([AddedToken("<unk>", special=True)])
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


# KV blocks of the shared vLLM server (block 0 is its null block): 128 usable blocks of 32 tokens
# hold one 4,096-token context, small enough that the workloads of tests/live/test_real_server.py also
# evict, so one server start serves the matched-capacity case too. The README's own command runs
# against vLLM-CPU at its default size (32,768 blocks) in tests/live/test_readme_live.py.
VLLM_TEST_BLOCKS = 129


@dataclass(frozen=True)
class RunningServer:
    url: str
    model: str | None = None  # the served name (the launcher's carries its nonce)
    nonce: str | None = None


@pytest.fixture(scope="session")
def vllm_server():
    """A real vLLM server (scripts/setup_vllm.sh's .venv-vllm) on a free 127.0.0.1 port, started
    once per test session and ended by its PID, publishing its KV-cache events on an ipc
    endpoint (the twin steps along them). Missing: a failure under CI=true, else a skip.
    PREFIXBENCH_VLLM_URL points the tests at a running one instead (started by
    `bash scripts/start_vllm.sh --port 0 --num-gpu-blocks 129 --kv-events ipc://PATH --eager`).
    It starts eagerly (no torch.compile: 40-60 s less on the 2-core box); which blocks it caches,
    evicts and reports does not depend on that, and the README's own command (compiled, vLLM's
    default) runs in tests/live/test_readme_live.py."""
    import tempfile

    from harness.live_server.launch import VllmLaunch, start_vllm, stop
    from tests.vllm_need import need_vllm

    given = os.environ.get("PREFIXBENCH_VLLM_URL")  # a server already started with these flags
    if given:
        yield RunningServer(given.rstrip("/"), os.environ.get("PREFIXBENCH_VLLM_MODEL"))
        return
    need_vllm()
    events_dir = Path(tempfile.mkdtemp(prefix="prefixbench-kv-"))
    launch = VllmLaunch(
        port=0,  # any free one; start_vllm moves to another should it be taken meanwhile
        num_gpu_blocks=VLLM_TEST_BLOCKS,
        kv_events_endpoint=f"ipc://{events_dir / 'kv.ipc'}",
        eager=True,
    )
    started = start_vllm(launch)
    print(f"vLLM test server healthy after {started.start_s:.0f} s", file=sys.stderr)
    try:
        yield RunningServer(started.url, started.model, started.nonce)
    finally:
        stop(started.process)
        (events_dir / "kv.ipc").unlink(missing_ok=True)
        events_dir.rmdir()


@pytest.fixture(scope="session")
def quick_claims(tmp_path_factory: pytest.TempPathFactory) -> QuickClaims:
    """The in-process claims measured once at the quick size, files written (tests/quick_claims.py):
    several minutes on the 2-core box, asked for by every test file about the claims."""
    from tests.quick_claims import measure_quick_claims

    return measure_quick_claims(tmp_path_factory.mktemp("claims"))


# The test files sharing a session fixture, by the fixture's name. A session fixture is made once
# per process, and under `--dist loadfile` each xdist worker that runs one of these files would make
# its own: two vLLM-CPU starts of 1-2 minutes each on the 2-core box (and two servers competing for
# its cores), or the quick claims measured twice (320 s each, quiet). Each group is one work unit
# instead (pytest_xdist_make_scheduler below), so one worker makes the fixture for all its files.
# tests/unit/test_xdist_groups.py keeps each group equal to the files whose tests take the fixture.
SHARED_FIXTURE_FILES = {
    "vllm_server": (
        "tests/live/test_clients_vs_vllm.py",
        "tests/live/test_readme_rows.py",
        "tests/live/test_real_server.py",
    ),
    "quick_claims": (
        "tests/run/test_claim_overlap.py",
        "tests/run/test_claim_tiers.py",
        "tests/run/test_claims.py",
        "tests/run/test_claims_article.py",
    ),
}
_UNIT_OF_FILE = {path: unit for unit, paths in SHARED_FIXTURE_FILES.items() for path in paths}


def work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: its file, or the fixture's name for the files of a group of
    SHARED_FIXTURE_FILES."""
    path = file_of(nodeid)
    return _UNIT_OF_FILE.get(path, path)


def file_of(nodeid: str) -> str:
    """The test file of a node id (a parameter may hold "::" itself)."""
    return nodeid.split("::", 1)[0]


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist loadfile` in the work units of `work_unit`; any other mode is xdist's own (None)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

    class SharedFixtureScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return SharedFixtureScheduling(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Setup, call and teardown of a fast-tier test (module fixtures included) run under its
    tier's guard: tests/unit starts no process and opens no network socket, tests/run starts no
    process (tests/tier_guard.py)."""
    with guarded(tier_of(item.path)):
        yield
