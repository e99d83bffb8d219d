"""PDF text layer (pypdf): one section per page, titled by page number; no OCR."""

from __future__ import annotations

import io
import re
from pathlib import Path

from pypdf import PdfReader
from pypdf.errors import PdfReadError

from serve_app.errors import MalformedDocumentError

_TRAILING_SPACE = re.compile(r"[ \t]+\n")


def load_pdf(data: bytes, name: str) -> dict:
    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
        info = reader.metadata
    except (PdfReadError, ValueError, KeyError, TypeError) as error:
        raise MalformedDocumentError(f"{name}: unreadable PDF ({error})") from None
    sections = [
        {"title": f"Page {number}", "text": _TRAILING_SPACE.sub("\n", text).strip()}
        for number, text in enumerate(pages, start=1)
        if text.strip()
    ]
    if not sections:
        raise MalformedDocumentError(f"{name}: PDF has no text layer (scanned images need OCR)")
    title = (info.title if info and info.title else "") or Path(name).stem
    return {"title": str(title), "sections": sections, "metadata": {"pages": len(pages)}}
