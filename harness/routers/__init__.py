"""Real routers (sglang-router, vllm-router) in front of real servers, each request's worker
predicted by the routing twin (harness/fleet/policies.py): docs/fleet.md §5.

fleet.py starts built-in workers and the router (`python -m harness.routers.fleet`: its fixed
streams); vllm_workers.py starts vLLM-CPU workers; workers.py says which a run gets
(`fleet.workers`); drive.py sends a stream through the router with the twin (streamed.py: each
reply streamed, read by live_server's client), replay.py names each miss's cause (searching the
arrival orders, wave_shape.py what holds in every order), streams.py
holds the checks' fixed streams; target.py makes it a target of the run pipeline (`fleet.real`);
kv_index.py is the twin's index of the workers' KV events. This floor sits above live_server/, whose
launcher, metrics reader, streaming client and KV-event subscriber it uses.
"""
