"""Workload parameter schemas, the family registry and `generate()`, the one entry point.

Each family is a dataclass subclass of `WorkloadParams` (upstream parameter names) plus a pure
function (params, seed, token_space) -> [Request], registered in `FAMILIES`. The harness stores
each schema in Hydra's ConfigStore as `workload/base_<family>`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from workloads.errors import BadInput
from workloads.readers import check_regular, loads_json
from workloads.registry import Registry
from workloads.request import Request
from workloads.tokens import TokenSpace

__all__ = [
    "DATA_DIR",
    "FAMILIES",
    "Family",
    "Generated",
    "TokenSpace",
    "WorkloadParams",
    "generate",
    "generate_with_notes",
    "resolve_data_path",
]

DATA_DIR = Path(__file__).resolve().parent / "data"


def fail(field: str, must: str, value: object) -> BadInput:
    return BadInput(f"workload.{field} must be {must}, got {value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    """A finite int or float: NaN and infinity are refused everywhere (they spin or overflow)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class WorkloadParams:
    """Fields every workload has. Subclasses list their checks in the class variables below."""

    name: str = ""
    family: str = ""
    version: int = 1
    seed_offset: int = 0  # added to the run seed: two workloads in one suite can differ
    # Multi-tenant runs: > 0 gives each session (or request) the cache salt "tenant<k>", round
    # robin in order of first appearance, so tenants never share cached KV (vLLM/SGLang cache_salt).
    num_tenants: int = 0

    positive: ClassVar[tuple[str, ...]] = ()  # integers > 0
    non_negative: ClassVar[tuple[str, ...]] = ()  # integers >= 0
    optional_positive: ClassVar[tuple[str, ...]] = ()  # None or an integer > 0
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}

    def validate(self) -> None:
        """Raise one BadInput naming the first bad field (`workload.<field> must be ...`)."""
        for name in ("version", *self.positive):
            value = getattr(self, name)
            if not _is_int(value) or value <= 0:
                raise fail(name, "a positive integer", value)
        for name in ("seed_offset", "num_tenants", *self.non_negative):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise fail(name, "a non-negative integer", value)
        for name in self.optional_positive:
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value <= 0):
                raise fail(name, "a positive integer or null", value)
        for name, valid in self.choices.items():
            value = getattr(self, name)
            if value not in valid:
                raise fail(name, f"one of {', '.join(valid)}", value)
        self.check()

    def check(self) -> None:
        """Family-specific checks beyond the declarative ones."""

    def prompt_tokens_estimate(self) -> int | None:
        """Total prompt tokens the generator will produce, computed from the parameters alone (so
        a run can refuse a workload too large for memory before generating it); None if unknown."""
        return None

    def requests_estimate(self) -> int | None:
        """Requests (engine sequences) the generator will make, from the parameters alone; each
        gets `output_len` scripted output tokens (harness.config.footprint). None if unknown."""
        return None


def check_fraction(params: WorkloadParams, name: str, low_open: bool = True) -> None:
    """`name` must lie in (0, 1] (or [0, 1] with low_open=False)."""
    value = getattr(params, name)
    ok = _is_number(value) and value <= 1
    ok = ok and (value > 0 if low_open else value >= 0)
    if not ok:
        raise fail(name, "in (0, 1]" if low_open else "in [0, 1]", value)


def check_non_negative_number(params: WorkloadParams, name: str, positive: bool = False) -> None:
    value = getattr(params, name)
    if not _is_number(value) or value < 0 or (positive and value == 0):
        raise fail(name, "a positive number" if positive else "a non-negative number", value)


def check_distinct(field: str, count: int, space: TokenSpace, what: str) -> None:
    """Pieces that must diverge at their first token need that many distinct ids."""
    if count > space.num_workload_ids:
        raise BadInput(
            f"workload.{field} asks for {count} {what}, each with its own first token, but the model "
            f"has only {space.num_workload_ids} workload ids"
        )


class Generated(NamedTuple):
    """What a generator made, plus notes about its input for the run summary (records read and
    skipped, by reason). A generator may return this or a bare list of requests (no notes)."""

    requests: list[Request]
    notes: dict[str, object]


class Family(NamedTuple):
    params_cls: type[WorkloadParams]
    # takes a `params_cls` instance (generate() builds it from the config, so the pair matches)
    generate_fn: Callable[[Any, int, TokenSpace], list[Request] | Generated]


# Filled in workloads/__init__.py, the one place every family is registered.
FAMILIES: Registry[Family] = Registry("workload family")


def params_from_mapping(values: Mapping[str, object]) -> WorkloadParams:
    """A params dataclass from a plain mapping (tests, notebooks); unknown keys fail clearly."""
    family = FAMILIES.get(str(values.get("family", "")))
    known = {f.name for f in fields(family.params_cls)}
    extra = sorted(set(values) - known)
    if extra:
        raise BadInput(
            f"workload.{extra[0]} is not a parameter of family {values['family']!r}; valid: {', '.join(sorted(known))}"
        )
    kwargs: dict[str, Any] = dict(values)  # checked against the family's fields above
    return family.params_cls(**kwargs)


def generate(
    params: WorkloadParams | Mapping[str, object], seed: int, token_space: TokenSpace
) -> list[Request]:
    """Validate `params` and run its family's generator; requests come in arrival order."""
    return generate_with_notes(params, seed, token_space).requests


def generate_with_notes(
    params: WorkloadParams | Mapping[str, object], seed: int, token_space: TokenSpace
) -> Generated:
    """`generate`, plus the generator's notes about its input (empty for synthetic families)."""
    if isinstance(params, Mapping):
        params = params_from_mapping(params)
    family = FAMILIES.get(params.family)
    if not isinstance(params, family.params_cls):
        raise TypeError(
            f"workload family {params.family!r} takes {family.params_cls.__name__}, got {type(params).__name__}"
        )
    params.validate()
    made = family.generate_fn(params, seed + params.seed_offset, token_space)
    requests, notes = made if isinstance(made, Generated) else (made, {})
    ids = [r.request_id for r in requests]
    if len(set(ids)) != len(ids):
        raise AssertionError(f"workload {params.name!r} produced duplicate request ids")
    if params.num_tenants:
        requests = assign_tenants(requests, params.num_tenants)
    return Generated(requests, notes)


def assign_tenants(requests: list[Request], num_tenants: int) -> list[Request]:
    """Salt every request with its tenant; turns of one session stay with one tenant. The ground
    truth `shared_prefix_len` is recomputed, since tenants never share."""
    from workloads.bounds import shared_prefix_lens

    tenant_of: dict[str, str] = {}
    salted = []
    for req in requests:
        key = req.session_id or req.request_id
        salt = tenant_of.setdefault(key, f"tenant{len(tenant_of) % num_tenants}")
        salted.append(dataclasses.replace(req, salt=salt))
    lens = shared_prefix_lens(salted)
    return [dataclasses.replace(r, shared_prefix_len=n) for r, n in zip(salted, lens)]


def resolve_data_path(path: str, what: str) -> Path:
    """A relative path is looked up in the package's data dir first, then the current directory."""
    raw = Path(path).expanduser()
    candidates = [raw] if raw.is_absolute() else [DATA_DIR / raw, Path.cwd() / raw]
    for candidate in candidates:
        if candidate.exists() or candidate.is_symlink():
            check_regular(candidate, what)  # a FIFO, a directory, a dangling link: say so
            return candidate
    looked = ", ".join(str(c) for c in candidates)
    raise BadInput(f"{what} {path!r} not found (looked at {looked})")


def json_object(line: str, where: str) -> dict:
    """One JSONL line that must hold a JSON object; `where` (`file:line`) starts each error."""
    obj = loads_json(line, where)
    if not isinstance(obj, dict):
        raise BadInput(f"{where}: expected a JSON object, got {type(obj).__name__}")
    return obj
