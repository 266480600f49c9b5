"""Run configuration: dataclass schemas registered in Hydra's ConfigStore; YAML only selects/overrides.

Groups: `engine` (EngineConfig), `model` (ModelConfig), `workload` (one schema per family,
registered as `base_<family>`), `hardware` (cost models of the simulated executor), `server`
(ServerConfig: a live server as the target, `engine` then names its twin). Every entry
point imports this module, so the schemas exist before Hydra composes (docs/benchmarking.md §13).
Code below the CLI receives these dataclasses, never a DictConfig.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from engines.config import EngineConfig
from engines.model.config import ModelConfig
from engines.model.presets import PRESETS
from engines.simulate.cost_model import HardwareConfig
from harness.client.config import LoadConfig
from harness.config.run_dirs import register_resolvers
from harness.fleet.config import FleetConfig
from harness.live_server.config import ServerConfig
from harness.metrics.config import MetricsConfig
from workloads.base import WorkloadParams


def _conf_dir() -> Path:
    """The Hydra config tree. A wheel ships the top-level `conf/` as `harness/conf` (setup.py's
    package_dir mapping: one source, no copy); a checkout or an editable install reads `conf/`
    at the repository's top. The packaged copy is looked for first, since only a wheel has it."""
    harness_dir = Path(__file__).resolve().parents[1]
    for candidate in (harness_dir / "conf", harness_dir.parent / "conf"):
        if (candidate / "config.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"no conf/config.yaml beside or above {harness_dir}")


CONF_DIR = _conf_dir()


@dataclass
class WarmupConfig:
    """Warm-up on unrelated tokens before measuring, then a flushed cache (docs/benchmarking.md §4)."""

    enabled: bool = True
    num_requests: int = 2
    prompt_len: int = 64
    output_len: int = 4


@dataclass
class BoundsConfig:
    """Which hit-rate references to compute from the token streams (docs/benchmarking.md §5.3).

    The ideal (unbounded) hit rate at each of `granularities`, plus the engine's own granularity
    unless `include_engine_granularity` is false; with `capped`, LRU and Belady at the run's KV
    capacity too. Token-granular bounds of a whole production trace need tens of GB: replays of
    whole traces use `bounds.granularities=[512] bounds.include_engine_granularity=false
    bounds.capped=false`. Skipped bounds are written as null.
    """

    granularities: list[int] = field(default_factory=lambda: [1, 16, 512])
    include_engine_granularity: bool = True
    capped: bool = True
    # Above this many prompt tokens (a whole Mooncake trace holds ~1.5e8), granularities below
    # 16 are skipped and recorded in `bounds_skipped`: they would need tens of GB.
    max_fine_prompt_tokens: int = 20_000_000


@dataclass
class RunConfig:
    # a family's params: the subclass of WorkloadParams its file's `defaults: [base_<family>]` names
    workload: WorkloadParams = MISSING
    engine: EngineConfig = field(default_factory=EngineConfig)
    model: ModelConfig = MISSING
    load: LoadConfig = field(default_factory=LoadConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    bounds: BoundsConfig = field(default_factory=BoundsConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    hardware: HardwareConfig | None = None  # cost model of the simulated executor
    server: ServerConfig | None = None  # a live server as the target
    fleet: FleetConfig = field(default_factory=FleetConfig)  # N replicas behind a router
    seed: int = 0
    decode: str = "scripted"  # scripted | greedy
    executor: str = "real"  # real | simulated
    device: str = "auto"
    threads: int = 1  # torch CPU threads (2 collapse when anything else runs on a 2-core box)
    save_tokens: bool = False
    label: str | None = None
    overwrite: bool = False  # write into a run directory that holds another run's results


@dataclass
class ServeConfig:
    """`python -m harness.builtin_server` (conf/serve.yaml): one engine behind the OpenAI API (harness/builtin_server).

    The engine and model groups are the harness's, so every engine knob works. Decoding is greedy.
    served_model_name: the name clients send as `model` (None: the model preset's name).
    step_log: a JSON-lines file of every step (step index, requests with their new tokens);
    None keeps the last `step_log_size` steps in memory only (GET /step_log serves both).
    request_log: a JSON-lines file, a line per finished completion with the client's
    X-Request-Id (harness/builtin_server/request_log.py); None keeps none.
    """

    engine: EngineConfig = field(default_factory=EngineConfig)
    model: ModelConfig = MISSING
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str | None = None
    max_tokens_default: int = 16  # `max_tokens` of a request that sends none (OpenAI's default)
    step_log: str | None = None
    step_log_size: int = 100_000
    request_log: str | None = None
    device: str = "auto"
    threads: int = 1  # torch CPU threads of the engine thread
    timeout_graceful_shutdown_s: float = 10.0  # SIGTERM: in-flight requests get this long
    # What one client may cost: a request body's size, and how long its head and body may take
    # to arrive (a client sending a byte at a time is cut off instead of holding a connection).
    max_body_bytes: int = 32 * 2**20
    header_timeout_s: float = 10.0
    body_timeout_s: float = 20.0
    log_level: str = "warning"  # uvicorn's
    # A fleet behind a router (docs/fleet.md §5): each reply's `system_fingerprint` carries this
    # tag, so the client learns which worker served it through any router. None: null, as vLLM.
    worker_tag: str | None = None
    # vLLM's KV-cache events on a ZMQ PUB socket (tcp://127.0.0.1:PORT or ipc://PATH), for a
    # router's kv_aware policy or any vLLM-events consumer; apc only (docs/fleet.md §5). None: off.
    kv_events_endpoint: str | None = None


T = TypeVar("T")


def to_schema(node: Any, schema: type[T]) -> T:
    """`OmegaConf.to_object(node)`, the dataclass of a node composed from `schema`'s structured
    config (a RunConfig from `compose("config")`, a HardwareConfig from `hardware/<preset>`)."""
    obj = OmegaConf.to_object(node)
    if not isinstance(obj, schema):
        raise TypeError(f"composed {type(obj).__name__}, not a {schema.__name__}")
    return obj


def register_configs() -> None:
    """Store every schema in Hydra's ConfigStore (idempotent)."""
    from workloads.base import FAMILIES

    cs = ConfigStore.instance()
    cs.store(name="base_config", node=RunConfig)
    cs.store(name="base_serve", node=ServeConfig)
    cs.store(group="engine", name="base_engine", node=EngineConfig)
    cs.store(group="model", name="base_model", node=ModelConfig)
    # The model presets' values live in engines/model/presets.py alone; conf/model/<name>.yaml
    # only selects `preset_<name>` (so engines need no Hydra and the YAML holds no second copy).
    for name in PRESETS.names():
        cs.store(group="model", name=f"preset_{name}", node=PRESETS.get(name))
    cs.store(group="server", name="base_server", node=ServerConfig)
    for family in FAMILIES.names():
        cs.store(group="workload", name=f"base_{family}", node=FAMILIES.get(family).params_cls)
    cs.store(group="hardware", name="base_hardware", node=HardwareConfig)


register_configs()
register_resolvers()
