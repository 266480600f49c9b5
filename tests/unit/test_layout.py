"""The intended layout: one config tree at the top (conf/), found by a checkout, an editable
install and the wheel alike (tests/live/test_wheel.py runs the wheel from another folder); harness/'s
folders on one ordered list of floors, each importing only those below it."""

from __future__ import annotations

from pathlib import Path

from harness.config.schema import CONF_DIR

ROOT = Path(__file__).resolve().parents[2]


def test_the_checkout_reads_the_top_level_conf():
    assert CONF_DIR == ROOT / "conf"
    assert not (ROOT / "harness" / "conf").exists()  # one source: the wheel maps conf/ in


# The floors of harness/ (docs/design.md §2), lowest first: a module imports from its own folder
# and from lower floors only, imports inside functions included. Folders on one floor are siblings
# that never import each other (the built-in server and the live-server client).
FLOORS: tuple[tuple[str, ...], ...] = (
    ("config",),  # the run's records and their checks, errors, the preflight, run folder names
    ("results",),  # run folders and their files: the rows' columns, identity, safe writes, loading
    ("metrics",),  # the per-request table and the summary
    ("export",),  # the field's formats: BR0.2 documents, trace writers, client outputs imported
    ("report",),  # results/** -> tables, figures and their statistics
    ("fleet",),  # N engines behind a router policy, in this process
    ("client",),  # arrivals, releases, the in-process driver (which drives a fleet too)
    ("run",),  # the pipeline, the target seam, the engine target, the CLI job
    ("live_server", "builtin_server"),  # a server as a target; an engine behind the OpenAI API
    ("routers",),  # real routers in front of real servers, with the routing twin
    ("claims",),  # the claims, each running arms through the pipeline
    ("advise",),  # python -m harness.advise: a grid of runs, the claims' verdict rules, advice.md
)
# The schema assembles each group's record from the floor that owns it, as it does engines.config's,
# and check_run_config runs each group's own checks: harness.config may import `harness.<floor>.config`.
GROUP_RECORD = "config"
FOLDERS = {folder for floor in FLOORS for folder in floor}
# The imports that run up, each with its reason; at most two in all of harness/.
UPWARD: dict[tuple[str, str], str] = {
    ("harness.run.targets", "harness.live_server.target"): (
        "the targets are registered in one visible place, beside the seam they implement"
    ),
    ("harness.run.targets", "harness.routers.target"): (
        "the real-router fleet is one more target of the same registry (fleet.real)"
    ),
}
MAX_UPWARD = 2
MAX_TOP_MODULES = 6  # harness/'s top holds the CLI entry; everything else lives on a floor
OUTSIDE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("engines", ("harness", "workloads")),
    ("workloads", ("harness",)),
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # `from harness.run import pipeline` imports harness.run.pipeline
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _floor(folder: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if folder in floor)


def _named_upward(module: str, name: str) -> bool:
    return any(_under(module, m) and _under(name, n) for m, n in UPWARD)


def _wrong_way(module: str, name: str) -> bool:
    """`module` (harness.<folder>...) importing `name`: from a higher floor or a sibling, and
    neither a group record the schema assembles nor a named upward import."""
    mine, theirs = module.split(".")[1], name.split(".")
    if theirs[0] != "harness" or len(theirs) < 2 or theirs[1] == mine:
        return False
    if theirs[1] not in FOLDERS:  # harness itself, or its top
        return theirs[1] in ("__main__",)
    if mine == GROUP_RECORD and theirs[2:3] == ["config"]:
        return False
    return _floor(theirs[1]) >= _floor(mine) and not _named_upward(module, name)


def _harness_imports() -> list[tuple[str, str]]:
    """(module, imported name) for every module in a floor's folder."""
    pairs = []
    for folder in sorted(FOLDERS):
        for path in sorted((ROOT / "harness" / folder).rglob("*.py")):
            pairs += [(_module_name(path), name) for name in sorted(_imports(path))]
    return pairs


def test_every_harness_folder_is_on_one_floor():
    folders = [f for floor in FLOORS for f in floor]
    packages = {p.name for p in (ROOT / "harness").iterdir() if (p / "__init__.py").is_file()}
    assert len(folders) == len(set(folders)) and set(folders) == packages


def test_no_floor_imports_a_higher_one_or_a_sibling():
    offenders = [f"{m} imports {n}" for m, n in _harness_imports() if _wrong_way(m, n)]
    assert offenders == []


def test_the_upward_imports_are_few_named_and_still_there():
    assert len(UPWARD) <= MAX_UPWARD and all(UPWARD.values())
    used = {(m, n) for m, n in _harness_imports() for key in UPWARD if key == (m, n)}
    assert used == set(UPWARD)  # an exception nothing needs any more is removed


def test_the_floor_check_catches_what_it_must():
    assert _wrong_way("harness.config.checks", "harness.client.arrivals.ARRIVALS")
    assert _wrong_way("harness.results.rowlog", "harness.metrics.table")
    assert _wrong_way("harness.live_server.driver", "harness.builtin_server.app")  # siblings
    assert not _wrong_way("harness.config.schema", "harness.live_server.config.ServerConfig")
    assert not _wrong_way("harness.live_server.record", "harness.run.target.Recorded")
    assert not _wrong_way("harness.run.targets", "harness.live_server.target.LiveServerTarget")
    assert _wrong_way("harness.report.build", "harness.run")  # `from harness import run`
    assert not _wrong_way("harness.fleet.fleet", "engines.engine.Engine")


def test_engines_and_workloads_import_no_harness():
    offenders = []
    for package, forbidden in OUTSIDE:
        for path in sorted((ROOT / package).rglob("*.py")):
            for name in sorted(_imports(path)):
                if any(_under(name, f) for f in forbidden):
                    offenders.append(f"{_module_name(path)} imports {name}")
    assert offenders == []


def test_harness_top_holds_only_the_entry_points():
    top = sorted(p.name for p in (ROOT / "harness").glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def test_test_files_have_unique_names_across_tiers():
    """pytest imports test modules by basename (the tiers have no __init__.py): two tiers' files
    of one name fail collection ("import file mismatch"), as tests/unit and tests/live's
    test_sglang_server_overlap.py did in CI."""
    seen: dict[str, Path] = {}
    for path in sorted((ROOT / "tests").glob("*/test_*.py")):
        assert path.name not in seen, f"{path} and {seen[path.name]} share a name"
        seen[path.name] = path
