"""A run on disk: its directory and atomic writes, the rows file, identity and locks, safe writes,
the manifest, and loading runs back for the report."""
