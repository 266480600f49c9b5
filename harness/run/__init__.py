"""Running one configuration: the one pipeline (prepare, warm up, measure, finish), the CLI job and
its exit codes, and the overhead tool built on it."""
