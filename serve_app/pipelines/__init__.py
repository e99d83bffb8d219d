"""Async pipelines over the component protocols: ingest and search."""
