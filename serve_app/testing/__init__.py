"""Test suites that ship with the package (pytest needed), for every implementation of a
protocol: a new store topology or proxy passes them to be a ``ChunkIndex``."""
