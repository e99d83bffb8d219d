"""An upload in bounded sub-batches, and the error of one that failed part-way."""

from __future__ import annotations

import asyncio

from serve_app.errors import ServeAppError
from serve_app.schemas import Document, IngestResult


def sub_batches(documents: list[Document], size: int, chars: int) -> list[list[Document]]:
    """Consecutive groups of at most ``size`` documents and ``chars`` characters (a document
    longer than ``chars`` alone in its group), in order."""
    groups: list[list[Document]] = []
    current: list[Document] = []
    budget = 0
    for document in documents:
        length = document.char_count()
        if current and (len(current) >= size or budget + length > chars):
            groups.append(current)
            current, budget = [], 0
        current.append(document)
        budget += length
    if current:
        groups.append(current)
    return groups


def partial_failure(failure: BaseExceptionGroup, done: list[IngestResult]) -> BaseException:
    """The error of a failed upload, naming what its finished sub-batches wrote: they stay
    written (each document whole); the rest of the request wrote nothing."""
    errors = failure.exceptions
    error = next((e for e in errors if isinstance(e, ServeAppError)), errors[0])
    if isinstance(error, asyncio.CancelledError):
        return error
    if not isinstance(error, ServeAppError):
        return error
    written = [doc for part in done for doc in part.written]
    unchanged = [doc for part in done for doc in part.unchanged]
    note = (
        f"; {len(written)} documents of this request were written and {len(unchanged)} "
        "were unchanged before the failure (error.details); nothing else was written: "
        "retry the request (unchanged documents are skipped)"
        if written or unchanged
        else "; nothing of this request was written"
    )
    return error.noted(note, {"written": written, "unchanged": unchanged})
