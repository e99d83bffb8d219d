"""The HTTP API (FastAPI): transport only, over the pipelines; no Ray imports."""
