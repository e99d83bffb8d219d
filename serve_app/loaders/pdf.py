"""PDF text layer (pypdf): one section per page, titled by page number; no OCR."""

from __future__ import annotations

import io
from pathlib import Path

from pypdf import PdfReader
from pypdf.errors import PdfReadError, PyPdfError

from serve_app.errors import MalformedDocumentError, PayloadTooLargeError

MAX_PAGES = 2000
"""Pages one PDF may have (``limits.max_pdf_pages`` overrides it per call)."""


def _tidy(text: str) -> str:
    # str.rstrip per line: linear, where a ``[ \t]+\n`` pattern is quadratic on long blank runs.
    return "\n".join(line.rstrip(" \t") for line in text.split("\n")).strip()


def load_pdf(data: bytes, name: str, max_pages: int = MAX_PAGES) -> dict:
    try:
        reader = PdfReader(io.BytesIO(data))
        count = len(reader.pages)
        if count > max_pages:
            raise PayloadTooLargeError(
                f"{name}: PDF has {count} pages, over the limit of {max_pages} "
                "(limits.max_pdf_pages)"
            )
        pages = [page.extract_text() or "" for page in reader.pages]
        info = reader.metadata
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, RecursionError) as error:
        raise MalformedDocumentError(f"{name}: unreadable PDF ({error})") from None
    sections = [
        {"title": f"Page {number}", "text": _tidy(text)}
        for number, text in enumerate(pages, start=1)
        if text.strip()
    ]
    if not sections:
        raise MalformedDocumentError(f"{name}: PDF has no text layer (scanned images need OCR)")
    title = (info.title if info and info.title else "") or Path(name).stem
    return {"title": str(title), "sections": sections, "metadata": {"pages": len(pages)}}
