"""`python -m harness.builtin_server`: the built-in engines behind vLLM's OpenAI completions API.

server.py composes the config and runs uvicorn; app.py holds the routes; engine_thread.py runs
the engine's steps off the event loop (continuous batching); protocol.py checks request bodies
and shapes replies; metrics.py writes Prometheus text; step_log.py records each step's batch;
text.py encodes and decodes text for models with a real tokenizer (docs/servers.md).
"""
