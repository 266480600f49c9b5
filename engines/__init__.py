"""prefixbench engines: one small inference engine (step loop, KV pool, paged attention, Llama model)
with pluggable scheduler designs (`engines/sched/`: vLLM's, SGLang's) and prefix cache designs
(`engines/cache/`: `apc`, vLLM V1 hash APC; `radix`, SGLang RadixAttention); caching off is a
design's disabled mode (`prefix_caching=false`), not a third design.

This package never imports hydra, datasets, `workloads` or `harness`: it sees token ids only, so it
runs on a bare GPU image with just torch (and triton).
"""
