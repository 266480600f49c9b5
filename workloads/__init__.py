"""Request generators: each workload family is a pure function of (params, seed) -> [Request].

`workloads.generate(params, seed)` dispatches through the family registry in `base.py`. Nothing here
imports `engines` or `harness`.
"""
