"""A live server as a target: the same workloads against vLLM, SGLang or any OpenAI-compatible
endpoint, token-exact, with its cached tokens predicted request by request by a twin.

config (ServerConfig) -> flavours (per-server endpoints and metric names) -> http_client (async,
streaming) -> discovery (model, version, cache facts) and cache_state (counters, reset) -> driver
(closed-loop release over the client layer) -> twin (replay through the built-in caches) ->
target (the target's parts for the one pipeline, harness/run/pipeline.py) -> record (its table,
figures and manifest facts). docs/servers.md.
"""
