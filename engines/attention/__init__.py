"""One paged-attention core for extend (prefill over a cached prefix) and decode.

Backends: `triton` (GPU; CPU under TRITON_INTERPRET=1 for tests) and `torch` (gather +
scaled_dot_product_attention; the fast CPU path), chosen by `backend=auto|triton|torch`.
"""
