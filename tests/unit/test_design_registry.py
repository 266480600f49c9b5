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
"""

from __future__ import annotations

import ast
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
