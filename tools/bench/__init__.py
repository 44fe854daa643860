"""Benchmarks: the runs of record, their workers, specs, plots, timing."""
