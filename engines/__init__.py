"""prefixbench engines: one small inference engine (scheduler, KV pool, paged attention, Llama model)
with pluggable prefix caches (`apc`: vLLM V1 hash APC; `radix`: SGLang RadixAttention; `none`).

This package never imports hydra, datasets, `workloads` or `harness`: it sees token ids only, so it
runs on a bare GPU image with just torch (and triton).
"""
