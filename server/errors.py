"""Errors: one JSON shape (OpenAI's), the library's plain messages, the right status.

Every error the API returns is ``{"error": {"message", "type", "param", "code", "status"}}`` (``error_json``):
OpenAI's shape, so its client libraries raise the matching exception (openai.NotFoundError for a 404) and
show the message. ``type`` follows from the status (``error_type``); ``code`` and ``param`` are OpenAI's where
one applies ("context_length_exceeded" on "messages", "model_not_found" on "model"), else null; ``status``
repeats the HTTP status. ``status_and_message`` maps the library's exceptions to a status and the sentence
the app shows; anything unforeseen is a 500 naming the log.
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
import reading

log = logging.getLogger(__name__)

# -----------------------------------------------------------------------------
# Errors: one JSON shape, the app's plain messages, the right status


class ErrorMessage(str):
    """An error's plain message that also carries OpenAI's ``code`` and ``param``. A str, so it travels wherever
    a message does (an ApiError, the answer worker's error event, an exception handler) and ``error_json`` finds
    them at the end: ErrorMessage("Too long.", "context_length_exceeded", "messages")."""

    code: str | None
    param: str | None

    def __new__(cls, text: str, code: str | None = None, param: str | None = None) -> "ErrorMessage":
        message = super().__new__(cls, text)
        message.code, message.param = code, param
        return message


class ApiError(Exception):
    """An error the API answers with ``status`` and the plain ``message``; ``code`` and ``param`` where OpenAI has them."""

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = ErrorMessage(message, code, param) if code or param else message


def too_long(message: str) -> ErrorMessage:
    """OpenAI's context_length_exceeded: the question (the request's messages) is longer than the model reads."""
    return ErrorMessage(message, "context_length_exceeded", "messages")


# Most specific first: every ingest error is an IngestError.
_STATUS_OF = (
    (extract.FileTooLargeError, 413),
    (extract.NotAPDFError, 415),
    (ingest.StoreUnavailableError, 503),
    (ingest.EmbedderMismatchError, 409),
    (ingest.StoreWriteError, 500),  # the store refused a write (a full disk): the server's fault, said in a sentence
    (extract.IngestError, 400),
    (models.ModelUnavailableError, 503),
    (httpx.TransportError, 503),  # e.g. Ollama's embedder gone mid-search
)


def status_and_message(err: Exception) -> tuple[int, str]:
    """The HTTP status and plain message for an error raised by the library's modules."""
    if isinstance(err, ApiError):
        return err.status, err.message
    if isinstance(err, reading.QuestionTooLong):  # bad input, not a fault: a client that retries gets the same
        return 400, too_long(str(err))
    for kind, status in _STATUS_OF:
        if isinstance(err, kind):
            return status, models.explain_failure(err) if kind is httpx.TransportError else str(err)
    log.error("Unexpected error", exc_info=err)
    return 500, f"Something went wrong inside the server; the log ({config.LOG_FILE}) has the details."


# OpenAI's error types by status; any other 4xx is an invalid request, any 5xx a server error.
_TYPE_OF = {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 429: "rate_limit_error"}


def error_type(status: int) -> str:
    """error_type(404) -> "not_found_error"; error_type(503) -> "server_error"; error_type(413) -> "invalid_request_error" """
    return "server_error" if status >= 500 else _TYPE_OF.get(status, "invalid_request_error")


def error_json(status: int, message: str) -> dict:
    """The inside of every error body (and of a streamed reply's error chunk): the message, OpenAI's type,
    param and code (those two from an ErrorMessage, else null) and the status."""
    return {"message": str(message), "type": error_type(status), "param": getattr(message, "param", None),
            "code": getattr(message, "code", None), "status": status}


def error_response(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    """The one place every error reply of the API is made."""
    return JSONResponse({"error": error_json(status, message)}, status_code=status, headers=headers)



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
