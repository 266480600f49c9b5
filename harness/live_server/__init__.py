"""A live server as a target: the same workloads against vLLM, SGLang or any OpenAI-compatible
endpoint, token-exact, with its cached tokens predicted request by request by a twin.

config (ServerConfig) -> flavours (per-server endpoints and metric names) -> http_client (async,
streaming) -> driver (closed-loop release over the client layer) -> twin (replay through the
built-in caches) -> target (one run: warm-up, reset, probe, measure, files). docs/servers.md.
"""
