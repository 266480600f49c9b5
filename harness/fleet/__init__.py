"""A fleet: N whole engines behind a router (docs/fleet.md).

config.py (the `fleet` group), policies.py (the router registry), approx_tree.py (sglang-router's
approximate per-worker tree), probe.py (read-only cached-prefix probes of a replica's cache),
fleet.py (N engines that the client drive loop steps like one), facts.py (per-replica facts),
tiers.py (the replicas' host tiers summed).
Real routers in front of real servers, twinned with these policies, are harness/routers/.
"""
