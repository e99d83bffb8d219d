"""Profiling tools, each run as ``python -m benchmarks.dev.<tool>``."""
