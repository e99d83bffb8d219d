"""Retrieval quality evaluation on BEIR-layout datasets."""
