"""Build hook for the two C extensions; all metadata lives in pyproject.toml.

- engines.cache.apc._pickle_chain writes and hashes vLLM's pickle-based block hashes in C (linked
  against OpenSSL's libcrypto, which hashlib already uses); docs/apc.md §1.7.
- engines.cache.apc._pool_loops runs the block pool's hot loops over a C KVCacheBlock;
  docs/apc.md §2.5.

Both are optional: without a C compiler (or, for the first, OpenSSL's headers) the install still
succeeds and APC runs the Python reference of each (hashing.py, pool_loops.py), with the same
keys, blocks and evictions, only slower.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "engines.cache.apc._pickle_chain",
            sources=["engines/cache/apc/_pickle_chain.c"],
            libraries=["crypto"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "engines.cache.apc._pool_loops",
            sources=["engines/cache/apc/_pool_loops.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
