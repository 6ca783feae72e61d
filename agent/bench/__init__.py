"""Benchmarks over many runs: plans, scores, reports, plots and replay, all read from run folders."""
