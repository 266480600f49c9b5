"""prefixbench harness: the CLI (`python -m harness`) on floors of folders, lowest first: config,
results, metrics, report, fleet, client, run (the pipeline and its targets), live_server and
builtin_server, routers, claims (docs/design.md §2)."""
