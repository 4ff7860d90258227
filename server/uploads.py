"""Uploads: a multipart body parsed as it arrives, straight to disk, each file checked before it is queued.

    request body -> UploadReader (python-multipart) -> one folder per file (dropped past MAX_FILE_MB)
                 -> check_upload (opens as a PDF?) -> IngestJob
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from fastapi import Request
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

import config
import extract
import ingest

from server.errors import without_server_path, ApiError
from server.jobs import IngestJob


# -- documents and jobs ---------------------------------------------------------


NAME_MAX_BYTES = 255  # the longest file name Linux, macOS and Windows file systems store: bytes, not characters


def upload_name(filename: str | None) -> str:
    """The file name an upload is shown and stored under: its last part, cut from the front to fit
    NAME_MAX_BYTES in UTF-8 (the end, with ".pdf", is kept); an ApiError (400) for a name holding a
    control character (NUL, a line break...), which no file system or log line should be handed.

    upload_name("../a/b.pdf") -> "b.pdf"; upload_name("文" * 90 + ".pdf") -> "文" * 83 + ".pdf" (253 bytes)
    """
    name = Path(filename or "").name
    if any(unicodedata.category(c) == "Cc" for c in name):
        raise ApiError(400, "A file name holds a control character (such as NUL or a line break); rename the file. Nothing was added.")
    name = name.encode()[-NAME_MAX_BYTES:].decode("utf-8", "ignore")  # "ignore": a character cut in half is dropped
    return name if name not in ("", ".", "..") else "upload.pdf"


NO_FILES = (
    "Send the PDFs as multipart/form-data, each in a part named 'files' "
    "(curl -F files=@report.pdf http://127.0.0.1:8765/api/documents)."
)


@dataclass
class UploadPart:
    """One file of an upload as it arrives, written to its own folder under the API's upload
    folder until it passes MAX_FILE_MB; then the bytes written are deleted and only counted on."""

    name: str  # upload_name of its file name
    folder: Path | None = None
    out: BinaryIO | None = None
    size: int = 0  # bytes received, kept or not
    too_large: bool = False

    @property
    def path(self) -> Path:
        return self.folder / self.name


class UploadReader:
    """The multipart body of an upload, parsed as it arrives (python-multipart's parser, as Starlette
    uses it) straight into the upload folder: each part named "files" into its own folder, no copy
    elsewhere first. A file over MAX_FILE_MB is deleted the moment it passes the limit and its size
    counted on for the message; more than API_MAX_FILES files is a 413 at once; the bytes of the whole
    request are bounded by BodyLimit (API_MAX_REQUEST_MB). Other fields are read past, not kept.
    The parser's callbacks only note what to do with the disk; ``_apply`` does it, off the event loop."""

    def __init__(self, uploads: Path):
        self.uploads = uploads
        self.parts: list[UploadPart] = []
        self._part: UploadPart | None = None  # the file part being received; None in any other part
        self._ops: list[tuple[str, UploadPart, bytes]] = []
        self._header_name, self._header_value, self._disposition = b"", b"", b""

    def _on_part_begin(self) -> None:
        self._part, self._disposition = None, b""

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _on_header_end(self) -> None:
        if self._header_name.strip().lower() == b"content-disposition":
            self._disposition = self._header_value
        self._header_name, self._header_value = b"", b""

    def _on_headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        if options.get(b"name") != b"files":
            return
        if len(self.parts) >= config.API_MAX_FILES:
            limit = config.API_MAX_FILES
            raise ApiError(413, f"More than {limit} files in one request; the limit is {limit} (setting API_MAX_FILES). Nothing was added.")
        self._part = UploadPart(upload_name(options.get(b"filename", b"").decode("utf-8", "replace")))
        self.parts.append(self._part)
        self._ops.append(("open", self._part, b""))

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        part = self._part
        if part is None:
            return
        part.size += end - start
        if part.too_large:
            return
        if part.size / 2**20 > config.MAX_FILE_MB:
            part.too_large = True
            self._ops.append(("drop", part, b""))
        else:
            self._ops.append(("write", part, data[start:end]))

    def _on_part_end(self) -> None:
        if self._part is not None and not self._part.too_large:
            self._ops.append(("close", self._part, b""))
        self._part = None

    def _apply(self, ops: list[tuple[str, UploadPart, bytes]]) -> None:
        for op, part, data in ops:
            if op == "open":
                part.folder = Path(tempfile.mkdtemp(dir=self.uploads))
                part.out = open(part.path, "wb")
            elif op == "write":
                part.out.write(data)
            else:
                part.out.close()
                if op == "drop":
                    shutil.rmtree(part.folder, ignore_errors=True)

    def discard(self) -> None:
        """Delete every file of this upload (nothing of it is queued)."""
        for part in self.parts:
            if part.out is not None:
                part.out.close()
            if part.folder is not None:
                shutil.rmtree(part.folder, ignore_errors=True)

    async def read(self, request: Request) -> list[UploadPart]:
        """Every file part of the request, saved (or, too large, counted); an ApiError for a request
        that is no multipart upload with files, and whatever reading the body raised (BodyTooLarge),
        each with nothing of the upload left on disk."""
        kind, params = parse_options_header(request.headers.get("content-type", ""))
        if kind != b"multipart/form-data" or not params.get(b"boundary"):
            raise ApiError(400, NO_FILES)
        callbacks = {
            "on_part_begin": self._on_part_begin,
            "on_part_data": self._on_part_data,
            "on_part_end": self._on_part_end,
            "on_header_field": self._on_header_field,
            "on_header_value": self._on_header_value,
            "on_header_end": self._on_header_end,
            "on_headers_finished": self._on_headers_finished,
        }
        try:
            parser = MultipartParser(params[b"boundary"], callbacks)
            async for chunk in request.stream():
                parser.write(chunk)
                if self._ops:
                    ops, self._ops = self._ops, []
                    await asyncio.to_thread(self._apply, ops)
            parser.finalize()
            if self._part is not None or self._ops:  # the body ended inside a file
                raise ApiError(400, "The upload ended in the middle of a file; nothing was added.")
        except FormParserError:
            self.discard()
            raise ApiError(400, "The upload is not valid multipart/form-data; nothing was added.") from None
        except BaseException:
            self.discard()
            raise
        if not self.parts:
            raise ApiError(400, NO_FILES)
        return self.parts


def check_upload(part: UploadPart) -> IngestJob:
    """A queued job for a saved upload that opens as a PDF; else the IngestError saying what is wrong with it."""
    if part.too_large:
        raise extract.FileTooLargeError(
            f"{part.name} is {part.size / 2**20:.0f} MB; the limit is {config.MAX_FILE_MB} MB (setting MAX_FILE_MB)."
        )
    try:
        extract.open_pdf(part.path).close()
    except extract.IngestError as err:  # PyMuPDF's reason may name the path the upload was saved at
        raise type(err)(without_server_path(str(err), part.path)) from err
    return IngestJob(file=part.name, path=part.path, document_id=ingest.collection_name_for(ingest.file_sha256(part.path)))


UPLOAD_BODY = {  # the request body for the OpenAPI page (read by UploadReader, not by FastAPI)
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["files"],
                    "properties": {"files": {"type": "array", "items": {"type": "string", "format": "binary"},
                                             "description": "one or more PDFs"}},
                }
            }
        },
    }
}
