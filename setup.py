"""Build hook for the two C extensions; all metadata lives in pyproject.toml.

- engines.cache.apc._pickle_chain writes and hashes vLLM's pickle-based block hashes in C (linked
  against OpenSSL's libcrypto, which hashlib already uses); docs/apc.md §1.7.
- engines.cache.apc._pool_loops runs the block pool's hot loops over a C KVCacheBlock;
  docs/apc.md §2.5.

Both are optional: without a C compiler (or, for the first, OpenSSL's headers) the install still
succeeds and APC runs the Python reference of each (hashing.py, pool_loops.py), with the same
keys, blocks and evictions, only slower.

It also maps the top-level conf/ into the wheel as harness/conf (see PACKAGES).
"""

from setuptools import Extension, find_namespace_packages, find_packages, setup

# conf/ is the repository's top-level Hydra tree; the wheel carries it as the data package
# harness.conf (harness/config/schema.py finds either), so there is one source of the configs. Its
# folders and workloads/data's are listed as (namespace) data packages: setuptools otherwise
# warns ~35 lines for each that Python could import ("Package would be ignored").
CONF_PACKAGES = ["harness.conf"] + [f"harness.conf.{p}" for p in find_namespace_packages("conf")]
DATA_PACKAGES = find_namespace_packages(include=["workloads.data", "workloads.data.*"])
PACKAGES = find_packages(include=["harness*", "engines*", "workloads*"]) + CONF_PACKAGES
PACKAGES += DATA_PACKAGES

setup(
    packages=PACKAGES,
    package_dir={"harness.conf": "conf"},
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
    ],
)
