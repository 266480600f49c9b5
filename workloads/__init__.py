"""Request generators: each workload family is a pure function of (params, seed, token space).

`workloads.base.generate(params, seed, token_space)` validates the params and dispatches through
the family registry (`FAMILIES`); `workloads.bounds` computes theoretical hit rates from the
generated token ids. Nothing here imports `engines` or `harness`.
"""
