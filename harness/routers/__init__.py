"""Real routers (sglang-router, vllm-router) in front of real servers, each request's worker
predicted by the routing twin (harness/fleet/policies.py): docs/fleet.md §5.

fleet.py starts the workers and the router (`python -m harness.routers.fleet`: built-in servers);
drive.py sends a stream through it with the twin (streamed.py: each reply streamed, read by
live_server's client), replay.py names each miss's cause, streams.py
holds the checks' fixed streams; target.py makes it a target of the run pipeline (`fleet.real`);
vllm_fleet.py does it over vLLM-CPU workers (`python -m harness.routers.vllm_fleet`); kv_index.py
is the twin's index of the workers' KV events. This floor sits above live_server/, whose
launcher, metrics reader, streaming client and KV-event subscriber it uses.
"""
