"""Build hook for the one C extension; all metadata lives in pyproject.toml.

engines.cache.apc._pickle_chain writes and hashes vLLM's pickle-based block hashes in C (linked
against OpenSSL's libcrypto, which hashlib already uses). It is optional: without a C compiler or
the OpenSSL headers the install still succeeds and APC hashes through the Python chain, which
gives the same keys, only slower (docs/apc.md §1.7, engines/cache/apc/hashing.py).
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
        )
    ]
)
