"""Documents out of an upload request: a JSON body, or multipart files parsed by the loader
pool. Each file part is capped at ``limits.max_file_bytes`` while it streams in."""

from __future__ import annotations

import asyncio

from fastapi import Request
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from serve_app.api.models import IngestRequest
from serve_app.config import AppConfig
from serve_app.errors import InvalidInputError, PayloadTooLargeError, describe_validation_errors
from serve_app.loaders.pool import LoaderPool
from serve_app.schemas import Document


class _CappedParts(MultiPartParser):
    """Starlette's multipart parser with a per-file byte cap, checked on every data chunk
    (the 413 names the file as soon as it passes the cap, not after it is spooled)."""

    def __init__(self, *args, max_file_bytes: int, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.max_file_bytes = max_file_bytes
        self._file_bytes = 0

    def on_part_begin(self) -> None:
        super().on_part_begin()
        self._file_bytes = 0

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        file = self._current_part.file
        if file is not None:
            self._file_bytes += end - start
            if self._file_bytes > self.max_file_bytes:
                raise PayloadTooLargeError(
                    f"{file.filename or 'upload'}: file is over the limit of "
                    f"{self.max_file_bytes} bytes (limits.max_file_bytes)"
                )
        super().on_part_data(data, start, end)


async def read_documents(
    request: Request, config: AppConfig, loaders: LoaderPool
) -> list[Document]:
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        return await _multipart(request, config, loaders)
    if not content_type.startswith("application/json"):
        # A body without a type is not read as JSON: a web page can send one to any origin
        # without the browser asking first (serve_app.api.browser).
        raise InvalidInputError(
            f"unsupported content type {content_type[:100]!r}; send Content-Type: "
            "application/json or multipart/form-data",
            param="content-type",
        )
    body = await request.body()
    try:
        parsed = IngestRequest.model_validate_json(body)
        return [Document.model_validate(d.model_dump(exclude_none=True)) for d in parsed.documents]
    except ValidationError as error:
        raise InvalidInputError(describe_validation_errors(error.errors())) from None


async def _multipart(request: Request, config: AppConfig, loaders: LoaderPool) -> list[Document]:
    limits = config.limits
    parser = _CappedParts(
        request.headers,
        request.stream(),
        max_files=limits.max_documents_per_request,
        max_fields=16,
        max_file_bytes=limits.max_file_bytes,
    )
    try:
        form = await parser.parse()
    except MultiPartException as error:
        raise InvalidInputError(f"malformed multipart body: {error.message}") from None
    try:
        files = [f for f in form.getlist("files") if isinstance(f, UploadFile)]
        if not files:
            raise InvalidInputError("multipart upload needs one or more 'files' parts")

        async def one(upload: UploadFile) -> Document:
            data = await upload.read()
            return await loaders.load(data, upload.filename or "upload")

        return list(await asyncio.gather(*(one(f) for f in files)))
    finally:
        await form.close()
