"""The command-line preflight: every check that needs no data, before Hydra makes a directory.

Composes the configuration as Hydra would and applies `check_run_config`, so an unknown config
name, a value of the wrong type or out of range, or an unusable output directory is one line
(what, where, what is allowed) and no run directory. Problems that need data (trace lines,
dataset fields, a request longer than the context) fail inside the run, also as one line.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.config.errors import BAD_INPUT, config_errors, describe
from harness.config.processes import launcher_problem
from harness.config.run_dirs import holds_results
from harness.config.schema import CONF_DIR, RunConfig, to_schema

GROUPS = ("workload", "engine", "model", "hardware", "server", "suite")
OPTIONAL_GROUPS = ("hardware", "server")  # None unless a preset is chosen
SWEEP_FLAGS = ("-m", "--multirun")
SKIP_FLAGS = ("--help", "-h", "--cfg", "-c", "--info", "--hydra-help", "--shell-completion")
OUTPUT_KEYS = ("hydra.run.dir", "hydra.sweep.dir")


def options(group: str, search_dirs: tuple[Path, ...] = ()) -> list[str]:
    """Config names of `group`: the packaged ones plus those in `hydra.searchpath` folders."""
    return sorted({p.stem for d in (CONF_DIR, *search_dirs) for p in (d / group).glob("*.yaml")})


def search_dirs(argv: list[str]) -> tuple[Path, ...]:
    """The `file://` folders of a `hydra.searchpath=[...]` override (users' own configs)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    found: list[Path] = []
    for arg in argv:
        if arg.startswith("hydra.searchpath="):
            try:
                values = OverridesParser.create().parse_overrides([arg])[0].value()
            except HydraException:  # composing reports the syntax error as one line
                continue
            if isinstance(values, list):
                found += [p for p in map(_search_folder, values) if p is not None]
    return tuple(found)


def _search_folder(entry: object) -> Path | None:
    """A search-path entry's folder: `file://PATH` or a bare PATH (Hydra reads both as files,
    relative to the working directory); None for `pkg://` and other schemes."""
    text = str(entry)
    if text.startswith("file://"):
        return Path(text[len("file://") :])
    return None if "://" in text else Path(text)


def _searchpath_problem(dirs: tuple[Path, ...]) -> str | None:
    """A search-path folder that is not there: one line instead of an unknown config later."""
    for folder in dirs:
        if not folder.is_dir():
            return (
                f"hydra.searchpath: {str(folder)!r} is no folder ({folder.absolute()} does not "
                "exist; a relative path is taken from the working directory); it must hold "
                f"your configs in group folders: {', '.join(f'{g}/' for g in GROUPS)}"
            )
    return None


def preflight(argv: list[str]) -> str | None:
    """Return one line describing the first problem with the command line, or None.

    A sweep (`-m`) is checked for names and types only, value by value: a value of the wrong type
    would stop Hydra mid-sweep, while a job whose value is merely out of range runs and is recorded
    as failed next to the others.
    """
    if any(a in SKIP_FLAGS for a in argv):
        return None
    problem = output_dir_problem(argv) or _hydra_group_problem(argv) or launcher_problem(argv)
    if problem:
        return problem
    dirs = search_dirs(argv)
    if problem := _searchpath_problem(dirs):
        return problem
    # hydra.searchpath stays: composing a user's own config needs it.
    argv = [
        a
        for a in argv
        if a.startswith("hydra.searchpath=") or not a.startswith(("hydra.", "hydra/"))
    ]
    # A suite is a multirun by configuration (hydra.mode: MULTIRUN), even without -m.
    if any(a in SWEEP_FLAGS or a.lstrip("+").startswith("suite=") for a in argv):
        return _sweep_problem([a for a in argv if a not in SWEEP_FLAGS], dirs)
    return _group_problem(argv, dirs) or _compose_problem(argv, check=True)


DEFAULT_RESULTS = "results"  # conf/config.yaml's run and sweep directories start there
MIN_FREE_BYTES = 2**20  # a run's .hydra/ files, log, manifest and summary: tens of kilobytes


def output_dir_problem(argv: list[str]) -> str | None:
    """An output directory (given on the command line, or the default results folder) that no
    run could write into: not a directory, not writable, read-only, or a full file system."""
    if not any(a.partition("=")[0] in OUTPUT_KEYS for a in argv):
        problem = unusable_dir(DEFAULT_RESULTS)
        if problem:
            return f"hydra.run.dir: the default results folder: {problem}; give hydra.run.dir=<dir>"
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key in OUTPUT_KEYS:
            problem = unusable_dir(value)
            if problem:
                return f"{key}: {problem}"
        if sep and key == "hydra.run.dir" and "overwrite=true" not in argv:
            found = holds_results(Path(value).expanduser())  # refused before Hydra writes .hydra/
            if found:
                return (
                    f"{key}: {value!r} holds another run's results ({', '.join(found)}); "
                    "choose another directory or pass overwrite=true"
                )
    return None


def unusable_dir(value: str) -> str | None:
    """Why `value` cannot hold a run directory, or None."""
    if not value.strip():
        return "an empty path would write into the current directory; give a directory"
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        return f"{value!r} exists and is not a directory"
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot create or write {value!r}: {str(existing)!r} is not writable"
    try:
        st = os.statvfs(existing)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE_BYTES:
        return (
            f"cannot write {value!r}: its file system has {free:,} bytes free "
            f"(a run needs at least {MIN_FREE_BYTES:,})"
        )
    return None


def _hydra_group_problem(argv: list[str]) -> str | None:
    """A Hydra group of its own (`hydra/launcher=...`) that does not exist: composing it here
    gives one line instead of Hydra's traceback at start-up."""
    chosen = [a for a in argv if a.lstrip("+~").startswith("hydra/")]
    if not chosen:
        return None
    from hydra import compose, initialize_config_dir

    try:
        with initialize_config_dir(
            config_dir=str(CONF_DIR), version_base="1.3", job_name="harness"
        ):
            compose(config_name="config", overrides=chosen, return_hydra_config=True)
    except config_errors() as exc:
        return f"{chosen[0]}: {describe(exc)}"
    return None


def _group_problem(overrides: list[str], dirs: tuple[Path, ...] = ()) -> str | None:
    for arg in overrides:
        key, sep, value = arg.partition("=")
        key = key.lstrip("+")  # `+suite=main` appends the group: the same names apply
        if sep and key in GROUPS and value not in options(key, dirs):
            where = f" (in conf/{key}/" + "".join(f" and {d / key}/" for d in dirs) + ")"
            return f"unknown {key} {value!r}; valid: {', '.join(options(key, dirs))}{where}"
        if sep and key in GROUPS:
            problem = group_file_problem(key, value, dirs)
            if problem:
                return problem
    return None


def group_file_problem(group: str, name: str, dirs: tuple[Path, ...] = ()) -> str | None:
    """A config file (a custom workload, say) that is not YAML, or a workload file that does not
    reach its family's schema: `defaults: [base_<family>, _self_]`, or a shipped or user workload
    to extend (`defaults: [system_prompt, _self_]`, Hydra's way), whose own defaults reach one. A
    user's search-path folder comes before the packaged configs, as in Hydra's search order."""
    body, problem = _read_group_file(group, name, dirs)
    if problem or group != "workload":
        return problem
    return _workload_base_problem(name, body, dirs, seen=(name,))


def _group_file(group: str, name: str, dirs: tuple[Path, ...]) -> Path:
    candidates = [d / group / f"{name}.yaml" for d in (*dirs, CONF_DIR)]
    # The first that exists at all, as Hydra would pick it: a FIFO or a dangling link is refused
    # when it is read (workloads.readers) rather than hanging or failing inside Hydra.
    return next((c for c in candidates if c.exists() or c.is_symlink()), candidates[-1])


def _read_group_file(group: str, name: str, dirs: tuple[Path, ...]) -> tuple[dict, str | None]:
    import yaml

    from workloads.readers import MIB, load_yaml, read_text

    path = _group_file(group, name, dirs)
    try:
        body = load_yaml(read_text(path, f"{group}={name}: config file", MIB), str(path))
    except BAD_INPUT as exc:
        return {}, str(exc)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        return (
            {},
            f"{group}={name}: {path} is not valid YAML:{where} {getattr(exc, 'problem', exc)}",
        )
    if body is not None and not isinstance(body, dict):
        return {}, f"{group}={name}: {path} must hold a mapping of fields"
    return body or {}, None


def _workload_base_problem(
    name: str, body: dict, dirs: tuple[Path, ...], seen: tuple[str, ...]
) -> str | None:
    """None when `body`'s defaults name exactly one parent that is a family schema (`base_<f>`)
    or a workload file whose own chain ends in one (followed here as Hydra would compose it)."""
    from workloads.base import FAMILIES

    current = seen[-1]
    path = _group_file("workload", current, dirs)
    parents = [d for d in body.get("defaults") or [] if isinstance(d, str) and d != "_self_"]
    known = options("workload", dirs)
    valid = ", ".join(f"base_{f}" for f in FAMILIES.names())
    needs = (
        f"workload={current}: {path} needs `defaults: [<one of {valid}>, _self_]` naming its "
        "family's schema, or `defaults: [<a workload to extend>, _self_]`"
    )
    if len(parents) != 1:
        return needs
    parent = parents[0]
    if parent.startswith("base_"):
        return None if parent.removeprefix("base_") in FAMILIES else needs
    if parent not in known:
        return f"workload={current}: {path} extends {parent!r}, which is no workload; valid: {', '.join(known)}"
    if parent in seen:
        return f"workload={current}: {path} extends itself through {' -> '.join((*seen, parent))}"
    parent_body, problem = _read_group_file("workload", parent, dirs)
    return problem or _workload_base_problem(parent, parent_body, dirs, (*seen, parent))


def _sweep_problem(overrides: list[str], dirs: tuple[Path, ...] = ()) -> str | None:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        return describe(exc)
    fixed = [o.input_line for o in parsed if not o.is_sweep_override() and o.input_line]
    problem = _group_problem(fixed, dirs) or _compose_problem(fixed, check=False)
    for o in (o for o in parsed if o.is_sweep_override()):
        for value in o.sweep_string_iterator():
            single = [*fixed, f"{o.get_key_element()}={value}"]
            problem = (
                problem
                or _group_problem(single[-1:], dirs)
                or _compose_problem(single, check=False)
            )
    return problem


def _compose_problem(overrides: list[str], check: bool) -> str | None:
    """Compose like Hydra would (memoised on the group choices: a sweep composes once a value);
    with `check`, also apply check_run_config."""
    from hydra import initialize_config_dir

    from harness.config.checks import check_executor_hardware, check_known_keys, check_run_config
    from harness.config.compose_memo import compose_config

    try:
        with initialize_config_dir(
            config_dir=str(CONF_DIR), version_base="1.3", job_name="harness"
        ):
            dcfg = compose_config(overrides)
            check_known_keys(dcfg)
            cfg = to_schema(dcfg, RunConfig)
        # Static, so a sweep's jobs are held to it too: no job of either kind could run.
        check_executor_hardware(cfg.executor, cfg.hardware)
        if check:
            check_run_config(cfg)
    except config_errors() as exc:
        return describe(exc)
    except AssertionError:  # OmegaConf sets no key under a typed group left None
        problem = _unset_group_problem(overrides)
        if problem is None:
            raise
        return problem
    return None


def _unset_group_problem(overrides: list[str]) -> str | None:
    """`hardware.name=x` with no hardware preset chosen: the group is None and has no fields."""
    for arg in overrides:
        key = arg.partition("=")[0].lstrip("+~")
        group, dot, _ = key.partition(".")
        if dot and group in OPTIONAL_GROUPS:
            return (
                f"{key}: no {group} is selected, so it has no fields; select one first with "
                f"{group}=<name> (valid: {', '.join(n for n in options(group) if not n.startswith('base_'))})"
            )
    return None
