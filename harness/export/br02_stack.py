"""BR0.2 `scenario.stack`: the serving stack as components. The engine (prefixbench's own, or
the live server it measured) is an `inference_engine`; the prefix cache's design and knobs, the
live server's step-locked twin and a fleet's router are `generic` components, whose extra fields
the schema allows. Each component's full native config rides in `native.config`."""

from __future__ import annotations

from harness.export.run_view import RunView
from harness.results.identity import fingerprint

ENGINE_LABEL = "engine"
CACHE_LABEL = "prefix-cache"


def _component(label: str, standardized: dict, config: object, args: dict | None = None) -> dict:
    native: dict[str, object] = {"config": config}
    if args:
        native["args"] = args
    return {
        "metadata": {
            "label": label,
            "cfg_id": fingerprint({"standardized": standardized, "config": config}, data=False),
        },
        "standardized": standardized,
        "native": native,
    }


def accelerator(run: RunView) -> dict[str, object]:
    """The hardware that ran it: a simulated run's preset, a real run's CUDA device or CPU; a live
    server does not report its hardware (count 0, model named so)."""
    hardware, manifest = run.group("hardware"), run.manifest
    if run.kind in ("server", "client"):
        return {"model": "not reported by the server", "count": 0, "parallelism": {}}
    if hardware:
        gpus = int(hardware.get("num_gpus") or 1)
        model = f"simulated: {hardware.get('name')} ({hardware.get('description', '')})"
        return {"model": model, "count": gpus, "parallelism": {"tp": gpus}}
    if manifest.get("cuda_device"):
        return {"model": str(manifest["cuda_device"]), "count": 1, "parallelism": {}}
    return {"model": f"cpu: {manifest.get('cpu_model')}", "count": 0, "parallelism": {}}


def engine_component(run: RunView, version: str) -> dict:
    summary, engine = run.summary, run.group("engine")
    if run.kind == "server":
        tool = f"{summary.get('server_flavour') or 'server'}-server"
        tool_version = str(summary.get("server_version") or "unknown")
        model = run.group("server").get("model") or summary.get("model_id") or "unknown"
    elif run.kind == "client":  # an imported client's run: the server is known by its URL only
        tool, tool_version = "server", "unknown"
        model = summary.get("model_id") or "unknown"
    else:
        tool, tool_version = f"prefixbench-{engine.get('cache')}", version
        model = run.group("model").get("name") or summary.get("model_id") or "unknown"
    standardized = {
        "kind": "inference_engine",
        "tool": tool,
        "tool_version": tool_version,
        "role": "replica",
        "replicas": int(run.group("fleet").get("replicas") or 1),
        "model": {"name": str(model)},
        "accelerator": accelerator(run),
    }
    args = {"executor": run.config.get("executor"), "device": run.manifest.get("device")}
    if run.kind == "server":
        args["url"] = summary.get("server_url")
    if run.kind == "client":
        args = {"urls": (run.manifest.get("client") or {}).get("urls")}
    config = run.group("server") if run.kind == "server" else engine
    return _component(ENGINE_LABEL, standardized, config, args)


def cache_component(run: RunView, version: str) -> dict:
    """The prefix cache as configured: design, scheduler, block/page size, KV capacity (every
    capacity field of the engine config, one per tier where the engine has tiers), executor,
    hardware preset, device and the package versions. A live server's are what the harness
    discovered from it (the twin's engine config), not the harness's own engine group."""
    summary = run.summary
    engine = summary.get("twin_engine") or run.group("engine")
    if run.kind == "server" and not summary.get("twin_engine"):
        engine = {"cache": summary.get("backend")}  # a server without a twin: only what it said
    capacities = {k: v for k, v in engine.items() if "capacity" in k or "tier" in k}
    standardized = {
        "kind": "generic",
        "tool": f"prefixbench-{engine.get('cache')}",
        "tool_version": version,
        "design": engine.get("cache"),
        "scheduler": engine.get("scheduler"),
        "schedule_policy": engine.get("policy", engine.get("schedule_policy")),
        "prefix_caching": run.group("engine").get("prefix_caching"),
        "block_size_tokens": summary.get("block_size_or_page_size", engine.get("block_size")),
        "kv_capacity_tokens": summary.get("kv_capacity_tokens", engine.get("kv_capacity_tokens")),
        "kv_capacity_by_field": capacities,
        "hash_algo": engine.get("hash_algo"),
        "eviction_policy": engine.get("eviction_policy"),
        "executor": "live server" if run.kind == "server" else run.config.get("executor"),
        "clock": summary.get("clock"),
        "hardware_preset": run.group("hardware").get("name"),
        "device": run.manifest.get("device"),
        "versions": run.manifest.get("packages") or {},
        "git_sha": run.manifest.get("git_sha"),
    }
    standardized = {k: v for k, v in standardized.items() if v is not None}
    return _component(CACHE_LABEL, standardized, summary.get("policy_profile") or engine)


def twin_component(run: RunView, version: str) -> dict:
    """The live server's step-locked twin: the in-process engine predicting its cached tokens."""
    twin = run.summary.get("twin_engine") or {}
    standardized = {
        "kind": "generic",
        "tool": "prefixbench-twin",
        "tool_version": version,
        "design": twin.get("cache"),
        "timeline": run.summary.get("twin_timeline"),
        "semantics": run.summary.get("twin_semantics"),
    }
    return _component("twin", standardized, twin)


def router_component(run: RunView, version: str) -> dict:
    fleet = run.group("fleet")
    standardized = {
        "kind": "generic",
        "tool": "prefixbench-fleet",
        "tool_version": version,
        "router": fleet.get("router"),
        "replicas": fleet.get("replicas"),
    }
    return _component("router", standardized, fleet)


def scenario_stack(run: RunView, version: str) -> list[dict]:
    stack = [engine_component(run, version)]
    if run.kind != "client":  # a client sees no cache configuration
        stack.append(cache_component(run, version))
    if run.kind == "server" and run.summary.get("twin_engine"):
        stack.append(twin_component(run, version))
    if run.kind == "fleet":
        stack.append(router_component(run, version))
    return stack
