"""prefixbench harness: CLI, configs, runner, metrics, results, report."""
