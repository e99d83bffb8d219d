"""Format detection and dispatch to the per-format loaders."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from serve_app.catalog import Catalog
from serve_app.errors import (
    MalformedDocumentError,
    PayloadTooLargeError,
    UnsupportedFormatError,
)
from serve_app.schemas import Document

EXTENSIONS = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".xml": "jats",
    ".nxml": "jats",
    ".pdf": "pdf",
}
SUPPORTED_FORMATS = ("text", "markdown", "html", "jats", "pdf")
# A loader parses raw bytes into Document fields (``loader(data, name)``; ``name`` is the file
# name, for titles and ids). Imported on first use: pypdf and lxml serve only their formats.
LOADERS: Catalog[dict] = Catalog("document format", "format")
LOADERS.register_lazy("text", "serve_app.loaders.text:load_text")
LOADERS.register_lazy("markdown", "serve_app.loaders.markdown:load_markdown")
LOADERS.register_lazy("html", "serve_app.loaders.html:load_html")
LOADERS.register_lazy("jats", "serve_app.loaders.jats:load_jats")
LOADERS.register_lazy("pdf", "serve_app.loaders.pdf:load_pdf")


def detect_format(name: str, head: bytes) -> str:
    """The format of a file from its content first, then its extension.

    Raises UnsupportedFormatError for anything else (binary files, unknown extensions).
    """
    sniff = head[:2048].lstrip()
    if sniff.startswith(b"%PDF-"):
        return "pdf"
    lowered = sniff.lower()
    is_xml = lowered.startswith(b"<?xml") or lowered.startswith(b"<!doctype article")
    if is_xml and (b"<article" in head.lower() or b"jats" in lowered):
        return "jats"
    if lowered.startswith(b"<!doctype html") or lowered.startswith(b"<html"):
        return "html"
    suffix = Path(name).suffix.lower()
    if suffix in EXTENSIONS:
        return EXTENSIONS[suffix]
    raise UnsupportedFormatError(
        f"unsupported format for {name!r} (extension {suffix or 'none'}); "
        f"supported: {', '.join(SUPPORTED_FORMATS)}"
    )


def default_doc_id(name: str) -> str:
    stem = Path(name).name
    stem = re.sub(r"\.(txt|text|md|markdown|html?|n?xml|pdf)$", "", stem, flags=re.I)
    return re.sub(r"[\s?#/]+", "_", stem) or "document"


def load_bytes(
    data: bytes,
    name: str,
    *,
    fmt: str | None = None,
    doc_id: str | None = None,
    max_chars: int | None = None,
    max_pages: int | None = None,
) -> Document:
    """Parse one file's bytes into a validated Document.

    Errors: UnsupportedFormatError, MalformedDocumentError (unparseable or no text),
    PayloadTooLargeError (over ``max_chars``, or a PDF over ``max_pages``).
    """
    fmt = fmt or detect_format(name, data[:4096])
    if fmt == "pdf" and max_pages is not None:
        from serve_app.loaders.pdf import load_pdf

        fields = load_pdf(data, name, max_pages=max_pages)
    else:
        fields = LOADERS.create(fmt, data, name)
    fields.setdefault("id", doc_id or default_doc_id(name))
    if doc_id:
        fields["id"] = doc_id
    fields.setdefault("source", name)
    fields.setdefault("metadata", {})
    fields["metadata"].setdefault("format", fmt)
    try:
        document = Document.model_validate(fields)
    except ValidationError as error:
        first = error.errors()[0]
        raise MalformedDocumentError(f"{name}: {first['msg']}") from None
    if max_chars is not None and document.char_count() > max_chars:
        raise PayloadTooLargeError(
            f"{name}: document has {document.char_count()} characters, over the limit of "
            f"{max_chars} (limits.max_document_chars)"
        )
    return document


def load_file(
    path: str | Path,
    *,
    max_chars: int | None = None,
    max_bytes: int | None = None,
) -> Document:
    path = Path(path)
    if not path.is_file():
        raise MalformedDocumentError(f"{path}: not a file")
    size = path.stat().st_size
    if max_bytes is not None and size > max_bytes:
        raise PayloadTooLargeError(
            f"{path}: file is {size} bytes, over the limit of {max_bytes} (limits.max_file_bytes)"
        )
    # Named as an upload names it (``ServiceClient.upload_paths`` sends the file's name):
    # the same file is the same document, with the same source and hash, whichever door
    # read it.
    return load_bytes(path.read_bytes(), path.name, max_chars=max_chars)


def iter_files(paths: list[str | Path]) -> Iterator[Path]:
    """Files named directly, and files with a supported extension inside named folders."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and child.suffix.lower() in EXTENSIONS:
                    yield child
        elif path.exists():
            yield path
        else:
            raise MalformedDocumentError(f"{path}: no such file or folder")


def decode_text(data: bytes, name: str) -> str:
    if b"\x00" in data[:8192]:
        raise MalformedDocumentError(f"{name}: binary content where text was expected")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise MalformedDocumentError(f"{name}: not valid UTF-8 text") from None
