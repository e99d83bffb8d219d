"""Fusion: of the strategies' result lists for one query (``strategies``: RRF, DBSF, weighted
min-max) and of the documents that several sub-queries found (``queries``: multi-query
aggregation). Pure functions, no I/O."""
