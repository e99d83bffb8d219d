"""The project's benchmark suites (``python -m benchmarks``); profiling tools in ``dev``."""
