"""Runs in the field's formats: llm-d's Benchmark Report v0.2 (one document per run) and the
public prefix traces (Mooncake, Qwen-Bailian) of any run's workload.

`python -m harness.export --format FORMAT RUN_DIR... --out DIR` (harness/export/cli.py); the
formats are registered in harness/export/formats.py. docs/interop.md maps every field.
"""
