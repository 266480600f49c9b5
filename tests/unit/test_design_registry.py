"""One registry of cache designs (engines/cache/__init__.py `DESIGNS`), and nothing else names one.

A cache design is a package under engines/cache plus its registration (`DESIGN` in the package).
Python code outside that package and the registry takes a design's name from the registration
(`DESIGNS`, `designs()`, or `<package>.DESIGN.name` where a claim is about one design), never from
a literal: so a third design is one package and one line, and renaming one is one change.

What counts as naming a design in a string literal (docstrings and comments are prose and do not
count; YAML under conf/, docs and tests are data): the literal is the design's name, an arm or
series label that starts with it (`radix-lpm`, `apc v024`, `radix+vllm`), an engine preset
(`apc_sglang`), or an override that selects it (`engine=apc`, `engine.cache=radix`). f-strings
count part by part. Scanned: engines/, harness/, scripts/.

Nor does code outside a design's package reach into the design: no import from
`engines.cache.<name>` and no `isinstance(x, <its cache class>)` in engines/, harness/ or
scripts/; it asks a capability (engines/cache/protocol.py) instead. Tests follow the same rule
outside the design's own test files (`test_<name>_*.py`, `<name>_support.py`). `ALLOWED` lists
the exceptions, each with its reason.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest

from engines.cache import DEFAULT_DESIGN, DESIGNS, build_cache, designs
from engines.config import DESIGN_KNOBS, UPSTREAM_SCHEDULER, EngineConfig

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("engines", "harness", "scripts")
REGISTRY = ROOT / "engines" / "cache" / "__init__.py"


def _naming(name: str) -> re.Pattern[str]:
    # the name as a whole literal, a label's first token (`radix-lpm`, `apc v024`, `apc+vllm`,
    # `radix_vllm`), a path or folder segment (`-radix-front`, `cache/apc`), or an override value
    token = rf"(?:^|[-_/=+]){name}(?=$|[-_/+:,.]| \S+$)"
    return re.compile(rf"{token}|engine(?:\.cache)?={name}\b")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
    ]


def _own(path: Path, name: str) -> bool:
    return path == REGISTRY or (ROOT / "engines" / "cache" / name) in path.parents


def offenders() -> list[str]:
    patterns = {d.name: _naming(d.name) for d in designs()}
    found = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            for lineno, text in _literals(path):
                for name, pattern in patterns.items():
                    if not _own(path, name) and pattern.search(text):
                        found.append(f"{path.relative_to(ROOT)}:{lineno}: {text!r} names {name}")
    return found


def test_no_design_name_outside_its_package_and_the_registry():
    found = offenders()
    assert not found, "design names as literals (take them from engines.cache DESIGNS):\n" + (
        "\n".join(found)
    )


def test_the_rule_catches_labels_presets_and_overrides_not_prose():
    pattern = _naming("radix")
    named = ("radix", "radix-lpm", "radix p16", "radix+vllm", "radix_vllm", "engine=radix")
    for text in (*named, "cache/radix", "-radix-front", "engine.cache=radix"):
        assert pattern.search(text), text
    for text in ("the radix tree's leaf LRU", "RadixAttention", "radix with SGLang's scheduler"):
        assert not pattern.search(text), text


@pytest.mark.parametrize("name", DESIGNS.names())
def test_every_design_is_a_package_with_its_registration(name):
    design = DESIGNS.get(name)
    assert design.name == name
    assert (ROOT / design.source / "__init__.py").is_file()
    cache = build_cache(EngineConfig(cache=name, block_size=design.block_size))
    assert cache.name == name and cache.block_size == design.block_size
    assert design.unit in ("block", "page") and design.label


def test_config_lists_come_from_the_registry():
    assert sorted(UPSTREAM_SCHEDULER) == DESIGNS.names()
    assert DEFAULT_DESIGN in DESIGNS and EngineConfig().cache == DEFAULT_DESIGN
    for design in designs():
        assert DESIGN_KNOBS[design.name] == design.knobs
        assert UPSTREAM_SCHEDULER[design.name] == design.upstream_scheduler
        chosen = EngineConfig(cache=design.name, block_size=design.block_size)
        chosen.validate()
        assert set(design.knobs) <= set(chosen.design_knobs())  # the policy profile reports them


def test_every_design_has_its_engine_presets_and_a_docs_row():
    """conf/engine has `<design>.yaml` (its upstream pairing) and `<design>_<other scheduler>`
    (the cross arm); docs/design.md's design table has a row per design with its label."""
    schedulers = sorted(set(UPSTREAM_SCHEDULER.values()))
    table = (ROOT / "docs" / "design.md").read_text()
    for design in designs():
        assert (ROOT / "conf" / "engine" / f"{design.name}.yaml").is_file()
        for scheduler in schedulers:
            if scheduler != design.upstream_scheduler:
                assert (ROOT / "conf" / "engine" / f"{design.name}_{scheduler}.yaml").is_file()
        assert f"| `{design.name}` | {design.label} |" in table, design.name


def test_one_palette_gives_each_design_one_colour_in_every_figure():
    from harness.report.palette import ARM_COLOURS, colour, series_colours

    for design in designs():
        assert colour(design.name) == ARM_COLOURS[design.name] == design.style.colour
        assert series_colours([design.name, "other"])[design.name] == design.style.colour
    shipped = [d.style.colour for d in designs()]
    assert len(set(shipped)) == len(shipped)  # no two designs share a colour


# Files outside a design's package that may import it or test its class, each with its reason
# (a glob relative to the repository root -> why).
ALLOWED: dict[str, str] = {
    "harness/claims/arms.py": (
        "the claims re-measure published statements about the two shipped designs, named "
        "through their packages' registrations (`apc.DESIGN.name`)"
    ),
    "harness/claims/bookkeeping.py": "claim 11 is about APC's block free queue itself",
    "harness/claims/hash_algos.py": "the claim is about APC's block hash algorithms themselves",
    "harness/claims/hash_timing.py": "claim 21's timing of APC's block hash algorithms, per process",
    "harness/live_server/kv_events.py": (
        "vLLM's KV-event wire format: the 64-bit hash a vLLM server publishes is an APC block "
        "key, computed by APC's hash chain (the one reader of the format, re-exported from here)"
    ),
    "engines/sched/sglang_policy.py": (
        "SGLang's in-batch prefix check matches the waiting queue against a scratch radix tree "
        "of its own, whatever the cache (upstream's SchedulePolicy does the same)"
    ),
    "scripts/bench_*.py": "micro-benchmarks of one design's own structures",
    "tests/unit/test_collision.py": "APC's verify_tokens_on_hit against an injected weak digest",
    "tests/unit/test_free_direction.py": "APC's free_direction knob on its free queue (claim 8)",
    "tests/run/test_run_faults.py": "fault injection into each design's allocator free path",
    "tests/live/test_wheel.py": "the wheel ships APC's C extensions and its native hash chain",
    "tests/live/test_engines_standalone.py": "imports every engines package without the harness",
    "tests/unit/test_device_tables.py": (
        "checks the executor's device tables against each design's own record of who holds a "
        "table, which no protocol exposes"
    ),
}
SCANNED_FOR_REACH = (*SCANNED, "tests")


def _allowed(rel: str) -> bool:
    return any(fnmatch.fnmatch(rel, pattern) for pattern in ALLOWED)


def _design_test(path: Path, name: str) -> bool:
    """A design's own test file (tests/**/test_<name>_*.py, tests/**/<name>_support.py)."""
    if "tests" not in path.relative_to(ROOT).parts[:1]:
        return False
    return path.name.startswith(f"test_{name}_") or path.name == f"{name}_support.py"


def _cache_classes() -> dict[str, str]:
    """Each design's cache class name -> the design."""
    out = {}
    for design in designs():
        cache = build_cache(EngineConfig(cache=design.name, block_size=design.block_size))
        out[type(cache).__name__] = design.name
    return out


def _is_isinstance(call: ast.Call) -> bool:
    return getattr(call.func, "id", None) == "isinstance" and len(call.args) == 2


def _reaches(tree: ast.AST, classes: dict[str, str]) -> list[tuple[int, str, str]]:
    """(line, design, what) for each import of a design's package and isinstance on its class."""
    names = set(classes.values())
    found = []
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module]
            if node.module == "engines.cache":
                modules += [f"engines.cache.{alias.name}" for alias in node.names]
        for module in modules:
            parts = module.split(".")
            if parts[:2] == ["engines", "cache"] and len(parts) > 2 and parts[2] in names:
                found.append((getattr(node, "lineno", 0), parts[2], f"imports {module}"))
        if isinstance(node, ast.Call) and _is_isinstance(node):
            for leaf in ast.walk(node.args[1]):
                cls = leaf.id if isinstance(leaf, ast.Name) else getattr(leaf, "attr", None)
                if cls in classes:
                    found.append((node.lineno, classes[cls], f"isinstance(..., {cls})"))
    return found


def reach_offenders() -> list[str]:
    classes = _cache_classes()
    found = []
    for top in SCANNED_FOR_REACH:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if _allowed(rel):
                continue
            tree = ast.parse(path.read_text(), filename=rel)
            for lineno, name, what in _reaches(tree, classes):
                if not _own(path, name) and not _design_test(path, name):
                    found.append(f"{rel}:{lineno}: {what} (design {name})")
    return found


def test_nothing_outside_a_design_reaches_into_it():
    found = reach_offenders()
    assert not found, (
        "ask a capability (engines/cache/protocol.py) instead, or add the file to ALLOWED with "
        "its reason:\n" + "\n".join(found)
    )


def test_every_allowance_is_used_and_has_a_reason():
    for pattern, reason in ALLOWED.items():
        assert reason.strip(), pattern
        assert any(ROOT.glob(pattern)), f"{pattern} matches no file: drop it from ALLOWED"


def test_the_reach_rule_catches_imports_and_class_tests():
    classes = {"ApcCache": "apc", "RadixCache": "radix"}
    code = (
        "from engines.cache.apc.cache import ApcCache\n"
        "from engines.cache import radix\n"
        "import engines.cache.radix.tree\n"
        "from engines.cache.protocol import PrefixPeek\n"
        "isinstance(c, (ApcCache, PrefixPeek))\n"
        "isinstance(c, radix.RadixCache)\n"
        "isinstance(c, PrefixPeek)\n"
    )
    found = [(line, name) for line, name, _ in _reaches(ast.parse(code), classes)]
    assert found == [(1, "apc"), (2, "radix"), (3, "radix"), (5, "apc"), (6, "radix")]
