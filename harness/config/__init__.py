"""Configuration: the run config's dataclass schema, its checks before anything is built, the
command line's preflight, the memory footprint estimate, bad-input errors and the token space."""
