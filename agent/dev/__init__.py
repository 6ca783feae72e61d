"""Developer benchmarks that drive the agent side (the bench, run folders) beside the harness: not part of the
user-facing commands."""
