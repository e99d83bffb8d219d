"""An ASGI app served by uvicorn on 127.0.0.1 and a free port, for tests over a real socket."""

from benchmarks.uvicorn_app import served

__all__ = ["served"]
