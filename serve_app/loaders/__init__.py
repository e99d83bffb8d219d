"""File loaders: each turns one file format into a ``Document`` with its section tree."""

from serve_app.loaders.base import (
    SUPPORTED_FORMATS,
    detect_format,
    iter_files,
    load_bytes,
    load_file,
)

__all__ = ["SUPPORTED_FORMATS", "detect_format", "iter_files", "load_bytes", "load_file"]
