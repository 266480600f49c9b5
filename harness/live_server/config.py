"""ServerConfig: which live server a run drives and what the twin needs that it does not expose.

Selected with `server=<vllm|sglang|openai>` (conf/server/*.yaml) plus overrides such as
`server.url=http://127.0.0.1:8421`. The server's engine facts (block or page size, KV capacity,
scheduling limits, SGLang's scheduling knobs) are read from the server where it states them
(vLLM's /metrics `vllm:cache_config_info`: block size and capacity; SGLang's GET
/get_server_info: all of them, harness/live_server/facts.py); a value set here wins over the
server's. vLLM states neither limit: keep `max_num_seqs` and `max_num_batched_tokens` equal to
the flags it was started with (conf/server/vllm.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

from engines.model.presets import PRESETS
from engines.sched.policies import POLICIES
from harness.config.errors import BadInput
from harness.live_server.replies import MAX_BLOCK_SIZE


@dataclass
class ServerConfig:
    flavour: str = "vllm"  # vllm | sglang | openai (harness/live_server/flavours.py)
    url: str = "http://127.0.0.1:8421"
    model: str | None = None  # served model name; None: the first of GET /v1/models
    # The workload's tokenizer, which must be the server's: the built-in smollm2-135m, or the
    # path of a local tokenizer.json or of the model folder holding one.
    tokenizer: str = "smollm2-135m"
    # The server's engine facts. None: read from the server; where it does not say, block_size
    # and kv_capacity_tokens are required and the limits default to 64 and 2048.
    block_size: int | None = None  # vLLM's block size, SGLang's page size
    kv_capacity_tokens: int | None = None  # usable KV tokens
    max_num_seqs: int | None = None  # SGLang: its scheduler's max running requests
    max_num_batched_tokens: int | None = None  # per-step budget; SGLang: chunked_prefill_size
    # SGLang's scheduling knobs the twin models (None: the server's, else the twin's engine.)
    schedule_policy: str | None = None  # --schedule-policy: engine.policy of the twin
    max_prefill_tokens: int | None = None
    schedule_conservativeness: float | None = None
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 600.0  # one request, first byte to last
    # The longest silence accepted from a server: no headers, no next chunk, no body byte for
    # this long and the request is given up on (a server that never answers ends, too).
    read_timeout_s: float = 300.0
    reset_cache: bool = True  # reset before measuring (and check it with a probe)
    closed_loop: bool = True  # turn k+1 holds the tokens the server returned for turn k
    twin: bool = True  # replay the run through the built-in caches afterwards
    # Subscribe to the server's KV-cache events (vLLM: GET /kv_event_sources names the
    # endpoint) and put the twin on the server's steps; false: the twin's own prediction.
    kv_events: bool = True
    # None: read from the server (vLLM's /server_info), else vLLM 0.33's default (true)
    async_scheduling: bool | None = None
    # SGLang's overlap loop. None: read from the server (its /get_server_info), else SGLang's
    # default (on); the twin's engine.overlap follows it
    overlap: bool | None = None
    # The nonce the launcher put in the served model name (scripts/start_vllm.sh prints it):
    # the run refuses a server that does not carry it. None: not checked (the manifest says so).
    expect_nonce: str | None = None
    # The built-in model preset (engines/model/presets.py) the served model was made from, e.g.
    # smollm2-rand for the launchers' llama-rand-smollm2: the report puts the run on that
    # preset's platform, beside the built-in runs of `model=<preset>`. None: the served name's.
    model_preset: str | None = None

    def validate(self) -> None:
        from harness.live_server.flavours import FLAVOURS

        FLAVOURS.get(self.flavour)
        self._check_preset()
        parsed = urlparse(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise BadInput(
                f"server.url must be an http(s) URL such as http://127.0.0.1:8421, got {self.url!r}"
            )
        for name in (
            "block_size",
            "kv_capacity_tokens",
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_prefill_tokens",
        ):
            if getattr(self, name) is not None:
                _positive_int(name, getattr(self, name))
        self._check_scheduling_knobs()
        if self.block_size is not None and self.block_size > MAX_BLOCK_SIZE:
            raise BadInput(
                f"server.block_size must be at most {MAX_BLOCK_SIZE} tokens, got {self.block_size}"
            )
        for name in ("connect_timeout_s", "request_timeout_s", "read_timeout_s"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 < value < float("inf")
            ):
                raise BadInput(
                    f"server.{name} must be a positive finite number of seconds, got {value!r}"
                )

    @property
    def base_url(self) -> str:
        return self.url.rstrip("/")

    def _check_scheduling_knobs(self) -> None:
        if self.schedule_policy is not None and self.schedule_policy not in POLICIES:
            raise BadInput(
                f"server.schedule_policy: unknown policy {self.schedule_policy!r}; "
                f"valid: {', '.join(POLICIES.names())}"
            )
        value = self.schedule_conservativeness
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 < value < float("inf")
        ):
            raise BadInput(
                f"server.schedule_conservativeness must be a positive number, got {value!r}"
            )

    def _check_preset(self) -> None:
        """A preset the served model can have been made from: a known one that takes text in
        the server's tokenizer (a preset of bare token ids shares no platform with a server).
        A tokenizer given as a path is not compared: only a built-in name says which it is."""
        if self.model_preset is None:
            return
        if self.model_preset not in PRESETS:
            raise BadInput(
                f"server.model_preset: unknown preset {self.model_preset!r}; "
                f"valid: {', '.join(PRESETS.names())}"
            )
        wants = PRESETS.get(self.model_preset).tokenizer
        named = "/" not in self.tokenizer and not self.tokenizer.endswith(".json")
        if wants is None or (named and wants != self.tokenizer):
            takes = "bare token ids" if wants is None else f"the {wants} tokenizer"
            raise BadInput(
                f"server.model_preset: preset {self.model_preset!r} takes {takes}, not the "
                f"server's ({self.tokenizer}); name the preset the served model was made from"
            )


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise BadInput(f"server.{name} must be a positive integer, got {value!r}")
