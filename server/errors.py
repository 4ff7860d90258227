"""Errors: one JSON shape (OpenAI's), the library's plain messages, the right status.

Every error the API returns is ``{"error": {"message": ..., "status": ...}}``: ``status_and_message`` maps the
library's exceptions to a status and the sentence the app shows; anything unforeseen is a 500 naming the log.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.sse import format_sse_event

import config
import extract
import ingest
import models

log = logging.getLogger(__name__)

# -----------------------------------------------------------------------------
# Errors: one JSON shape, the app's plain messages, the right status


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


# Most specific first: every ingest error is an IngestError.
_STATUS_OF = (
    (extract.FileTooLargeError, 413),
    (extract.NotAPDFError, 415),
    (ingest.StoreUnavailableError, 503),
    (ingest.EmbedderMismatchError, 409),
    (extract.IngestError, 400),
    (models.ModelUnavailableError, 503),
    (httpx.TransportError, 503),  # e.g. Ollama's embedder gone mid-search
)


def status_and_message(err: Exception) -> tuple[int, str]:
    """The HTTP status and plain message for an error raised by the library's modules."""
    if isinstance(err, ApiError):
        return err.status, err.message
    for kind, status in _STATUS_OF:
        if isinstance(err, kind):
            return status, models.explain_failure(err) if kind is httpx.TransportError else str(err)
    log.error("Unexpected error", exc_info=err)
    return 500, f"Something went wrong inside the server; the log ({config.LOG_FILE}) has the details."


def error_response(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "status": status}}, status_code=status, headers=headers)


def validation_message(err: RequestValidationError) -> str:
    """One plain line per problem: ``k: Input should be less than or equal to 20``."""
    lines = []
    for problem in err.errors():
        if problem["type"] == "json_invalid":
            return "The request body is not valid JSON."
        where = ".".join(str(part) for part in problem["loc"][1:]) or "request body"
        lines.append(f"{where}: {problem['msg']}")
    return "; ".join(lines) or "The request is not valid."


def sse(event: str, data) -> bytes:
    """One server-sent event whose data is JSON: sse("token", {"text": "Hi"}) -> b'event: token\\ndata: {"text": "Hi"}\\n\\n'"""
    return format_sse_event(event=event, data_str=json.dumps(data, ensure_ascii=False))


def without_server_path(message: str, path: Path) -> str:
    """A message about the upload kept at ``path`` naming it only by its file name: where the server keeps
    uploads is none of a client's business (and tells an attacker about the machine).

    without_server_path("Failed to open file '/tmp/up-1/x/a.pdf'.", Path("/tmp/up-1/x/a.pdf")) -> "Failed to open file 'a.pdf'."
    """
    return message.replace(str(path), path.name).replace(str(path.parent), "")
