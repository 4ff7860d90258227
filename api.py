"""An HTTP API over the library: the same store, modules and locks as the Streamlit app.

    POST /api/documents (multipart "files")   each file checked at once (size, PDF, opens) -> a job
         -> one ingest worker, first come first served: ingest.ingest_pdf(progress=job.report)
         -> searchable; page labelling queued on ingest.BackgroundEnricher (as in the app)
         GET /api/jobs/{id}, or the same progress as server-sent events at /api/jobs/{id}/events
    GET /api/documents[/{id}], DELETE /api/documents/{id}     ingest.list_documents / delete_document
    POST /api/search                         retriever.Retriever.search: ranked pages with their trace,
                                             or ("unit": "line") evidence.best_lines: the lines that answer
    GET /api/models                          models.chat_choices: the chat models that can answer now
    POST /api/ask                            one answer worker, first come first served: qa.ask
                                             (by the model the request names, else the settings' default)
                                             -> JSON with the evidence lines, or server-sent events:
                                                the evidence lines, tokens, then one "answer"
    GET /api/documents/{id}/pages/{n}.png    preview.render_page, a passage optionally highlighted
    GET /api/documents/{id}/outline          outline.document_outline: its sections and their pages
    POST /v1/chat/completions, GET /v1/models    the library as an OpenAI-compatible model (sources
                                                 and evidence lines at the end of the reply); its
                                                 models: API_MODEL_ID (the default) and each choice id
    GET /api/health                          store, default chat model, embedder, Ollama
    GET/POST /api/conversations, GET/PATCH/DELETE /api/conversations/{id}, GET .../{id}/export
                                             conversations.py: the chats kept beside the store (the app's
                                             too); "conversation" in /api/ask appends the question and
                                             its answer to one when the answer is out

Every error is JSON ``{"error": {"message": ..., "status": ...}}`` (OpenAI's shape, so
its client libraries show the message) with the same plain sentence the app shows and
a fitting status (400 bad input or a model no one can answer with, 404 unknown, 409
conflicting state, 413 too large, 415 not a PDF, 503 a store or model that does not
answer); never a traceback. A model failing mid-answer (server gone, key refused,
connection cut, slower than LLM_TIMEOUT) is the same: a sentence, and the next
question is answered. With
API_TOKEN set every request needs it as a bearer token; without it only requests whose
Host header is local are served (so a web page cannot reach this server by DNS tricks).
Token or not, a request that changes something (any method but GET, HEAD, OPTIONS) which a
browser sent for a page of another origin (its Origin or Sec-Fetch-Site says so) is refused
with 403: a form or no-cors fetch on a page elsewhere cannot upload, delete or ask. Bodies are
counted as they arrive: past MAX_FILE_MB a file is deleted, past API_MAX_FILES files or
API_MAX_REQUEST_MB (API_MAX_JSON_MB for JSON) the request is refused with 413 at once.
A document's id is its collection name, the same one the app and the CLIs use.

Deliberately simple: questions are answered one at a time in arrival order (the
embedded model has a single context anyway, and a queue is fair where a lock is not);
uploads are ingested one at a time; jobs live in memory, so a restart forgets them
(the documents themselves are in the store), and a finished job is forgotten after
API_JOB_KEEP_SECONDS or beyond the API_JOB_KEEP_COUNT most recent.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import queue
import shutil
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager, closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, BinaryIO, Literal
from urllib.parse import urlsplit

import httpx
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.sse import format_sse_event
from pydantic import BaseModel, Field
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException

import config
import conversations
import evidence
import extract
import ingest
import models
import outline
import preview
import qa
from checker import Citation
from retriever import Hit, Retriever

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


# -----------------------------------------------------------------------------
# Access: a bearer token when API_TOKEN is set, else local Host headers only

_LOCAL_HOSTS = {"localhost", "127.0.0.1", "[::1]"}


def host_is_local(host: str) -> bool:
    """host_is_local("localhost:8765") -> True; host_is_local("evil.example:8765") -> False"""
    host = host.strip().lower()
    name = host[: host.find("]") + 1] if host.startswith("[") else host.rsplit(":", 1)[0]
    return name in _LOCAL_HOSTS


def access_refused(headers: Headers) -> JSONResponse | None:
    """The 401/403 reply for a request this server must not serve, or None to serve it."""
    if config.API_TOKEN:
        given = headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, f"Bearer {config.API_TOKEN}".encode()):
            message = "This server needs its token: send the header 'Authorization: Bearer <API_TOKEN>'."
            return error_response(401, message, {"WWW-Authenticate": "Bearer"})
    elif not host_is_local(headers.get("host", "")):
        message = "Without API_TOKEN this server only answers requests addressed to localhost; set API_TOKEN to serve others."
        return error_response(403, message)
    return None


# A page on any site can make the browser POST here without asking first (a plain HTML form, or
# fetch with mode "no-cors"): the Host check passes, since the request really goes to 127.0.0.1,
# and a token does not help a browser that holds none. But browsers say who asks: Origin on every
# POST, PUT, PATCH and DELETE, and Sec-Fetch-Site. Programs (curl, scripts, the OpenAI client) send neither.
_SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
_OWN_SITE = {"same-origin", "none"}  # Sec-Fetch-Site of this server's own pages (/docs) and of a typed address
CROSS_SITE_MESSAGE = (
    "Refused: a web page of another site sent this request through a browser. This server takes changes "
    "(uploads, deletions, questions, searches) only from programs such as curl or the OpenAI client, "
    "and from its own pages (/docs)."
)


def origin_of(scheme: str, host: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) as a browser compares origins; None when it is no origin.

    origin_of("http", "localhost:8765") -> ("http", "localhost", 8765); origin_of("https", "[::1]") -> ("https", "::1", 443)
    """
    try:
        url = urlsplit(f"{scheme.strip().lower()}://{host.strip()}")
        return url.scheme, url.hostname or "", url.port or {"http": 80, "https": 443}.get(url.scheme, 0)
    except ValueError:  # a port that is not a number
        return None


def from_another_site(scope, headers: Headers) -> bool:
    """Whether a browser sent this request for a page that is not this server's own: its
    Sec-Fetch-Site is present and not same-origin/none (another port of localhost is "same-site",
    and foreign too), or its Origin is present and not the scheme://host:port it was sent to."""
    site = headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() not in _OWN_SITE:
        return True
    origin = headers.get("origin")
    if origin is None:
        return False
    scheme, _, host = origin.partition("://")
    own = origin_of(scope.get("scheme", "http"), headers.get("host", ""))
    return own is None or not host or origin_of(scheme, host) != own  # Origin "null" (a sandboxed page) too


def cross_site_refused(scope, headers: Headers) -> JSONResponse | None:
    """The 403 for a request that would change something (any method but GET, HEAD, OPTIONS: uploads,
    deletions, questions, searches) sent by a page of another site; None to serve it. Token or not."""
    if scope["method"] in _SAFE_METHODS or not from_another_site(scope, headers):
        return None
    log.warning(
        "Refused %s %s from another site (Origin %r, Sec-Fetch-Site %r)",
        scope["method"], scope["path"], headers.get("origin"), headers.get("sec-fetch-site"),
    )
    return error_response(403, CROSS_SITE_MESSAGE)


class AccessCheck:
    """ASGI middleware applying ``access_refused``, then ``cross_site_refused``, to every HTTP request
    (streams pass through untouched). A refused request's body is never read."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            refusal = access_refused(headers) or cross_site_refused(scope, headers)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


# -----------------------------------------------------------------------------
# Bounded input: a body is counted as it arrives, and refused (413) once over its limit


class BodyTooLarge(ApiError):
    def __init__(self, message: str):
        super().__init__(413, message)


def body_limit(headers: Headers) -> tuple[int, str]:
    """The most bytes this request's body may hold, and the sentence for one that holds more:
    API_MAX_REQUEST_MB for an upload (multipart/form-data), API_MAX_JSON_MB for any other body."""
    if headers.get("content-type", "").strip().lower().startswith("multipart/form-data"):
        mb = config.API_MAX_REQUEST_MB
        return mb * 2**20, (
            f"This upload is over {mb} MB, the limit for one request with all its files (setting API_MAX_REQUEST_MB); "
            "nothing was added. Send the files in several requests."
        )
    mb = config.API_MAX_JSON_MB
    return mb * 2**20, f"This request's body is over {mb} MB, the limit (setting API_MAX_JSON_MB)."


class BodyLimit:
    """ASGI middleware: a body over ``body_limit`` ends in 413 as soon as that is known: at once when
    Content-Length says so (the body is never read), else when the bytes received so far pass the limit
    (a chunked body): the app's read then fails, and whatever it would reply is replaced by the 413.
    The server reads past the rest of such a body without keeping it, so the client gets the reply."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        limit, message = body_limit(headers)
        declared = headers.get("content-length", "").strip()
        if declared.isdigit() and int(declared) > limit:
            log.warning("Refused %s %s: Content-Length %s is over the limit of %d bytes", scope["method"], scope["path"], declared, limit)
            await error_response(413, message)(scope, receive, send)
            return
        received, over, started = 0, False, False

        async def counted_receive():
            nonlocal received, over
            event = await receive()
            if event["type"] == "http.request":
                received += len(event.get("body", b""))
                if received > limit:
                    if not over:
                        log.warning("Refused %s %s: its body passed the limit of %d bytes", scope["method"], scope["path"], limit)
                    over = True
                    raise BodyTooLarge(message)
            return event

        async def guarded_send(event):
            nonlocal started
            if over:  # the app's reply to a read that failed: the 413 below replaces it
                return
            started = started or event["type"] == "http.response.start"
            await send(event)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except Exception:
            if not over:
                raise
        if over and not started:
            await error_response(413, message)(scope, receive, send)


# -----------------------------------------------------------------------------
# Ingest jobs: one worker thread, first come first served


@dataclass
class IngestJob:
    file: str
    path: Path  # the upload, saved until the job ends
    document_id: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    state: str = "queued"  # queued | running | done | failed
    message: str = "Waiting for its turn"
    current: int = 0
    total: int = 0
    status: int | None = None  # the HTTP status of the error, when failed
    result: dict = field(default_factory=dict)
    version: int = 0  # bumped on every change, so the event stream knows when to send
    finished_at: float | None = None  # time.monotonic() when it ended (done or failed)

    def report(self, current: int, total: int, message: str) -> None:
        """ingest's progress callback: page ``current`` of ``total``, and what is happening."""
        self.current, self.total, self.message = current, total, message
        self.version += 1

    def finish(self, state: str, message: str, status: int | None = None, **result) -> None:
        self.state, self.message, self.status, self.result = state, message, status, result
        self.finished_at = time.monotonic()
        self.version += 1

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "file": self.file,
            "state": self.state,
            "document_id": self.document_id,
            "message": self.message,
            "current": self.current,
            "total": self.total,
            "progress": round(self.current / self.total, 3) if self.total else (1.0 if self.state == "done" else 0.0),
            **({"status": self.status} if self.status else {}),
            **self.result,
        }


class IngestWorker:
    """Ingests queued uploads one at a time in a background thread; jobs are kept for lookup, a
    finished one for API_JOB_KEEP_SECONDS and only the API_JOB_KEEP_COUNT most recent (``prune``)."""

    FORGOTTEN_KEPT = 10_000  # ids of pruned jobs remembered, so their 404 can say why

    def __init__(self, library: Library):
        self.library = library
        self.jobs: dict[str, IngestJob] = {}
        self.forgotten: OrderedDict[str, str] = OrderedDict()  # pruned job id -> its document id
        self._lock = threading.Lock()  # jobs is changed by request threads and the worker
        self._queue: queue.Queue[IngestJob] = queue.Queue()
        threading.Thread(target=self._work, name="ingest-worker", daemon=True).start()

    def submit(self, job: IngestJob) -> None:
        with self._lock:
            self.jobs[job.id] = job
            self._prune()
        self._queue.put(job)

    def job(self, job_id: str) -> IngestJob | None:
        with self._lock:
            self._prune()
            return self.jobs.get(job_id)

    def busy_with(self, document_id: str) -> IngestJob | None:
        with self._lock:
            jobs = list(self.jobs.values())
        return next((j for j in jobs if j.document_id == document_id and j.state in ("queued", "running")), None)

    def _prune(self) -> None:
        """Forget finished jobs older than API_JOB_KEEP_SECONDS, and the oldest beyond API_JOB_KEEP_COUNT
        (queued and running jobs are kept). Called with the lock held."""
        now = time.monotonic()
        finished = sorted((j for j in self.jobs.values() if j.finished_at is not None), key=lambda j: j.finished_at)
        excess = len(finished) - max(config.API_JOB_KEEP_COUNT, 0)
        for n, job in enumerate(finished):
            if n < excess or now - job.finished_at > config.API_JOB_KEEP_SECONDS:
                del self.jobs[job.id]
                self.forgotten[job.id] = job.document_id
        while len(self.forgotten) > self.FORGOTTEN_KEPT:
            self.forgotten.popitem(last=False)

    def _work(self) -> None:
        while True:  # a daemon thread: it ends with the process
            job = self._queue.get()
            try:
                self._ingest(job)
            finally:
                shutil.rmtree(job.path.parent, ignore_errors=True)
                with self._lock:
                    self._prune()

    def _ingest(self, job: IngestJob) -> None:
        lib = self.library
        job.state = "running"
        job.report(0, 0, "Checking the file")
        try:
            result = ingest.ingest_pdf(job.path, lib.client, lib.embedder, progress=job.report, doc_name=job.file)
            lib.retriever.refresh()
        except Exception as err:  # report it on the job; the worker goes on with the next upload
            status, message = status_and_message(err)
            log.warning("Upload %s failed: %s", job.file, message)
            job.finish("failed", message, status)
            return
        if lib.enricher is not None:
            lib.enricher.submit(result.collection)
        note = "Already in the library" if result.cached else f"Searchable: {result.pages} pages, {result.chunks} passages"
        job.finish("done", note, cached=result.cached, pages=result.pages, passages=result.chunks, ocr_pages=result.ocr_pages)


# -----------------------------------------------------------------------------
# Answers: one worker thread, first come first served, events handed to the asking request


@dataclass
class Question:
    text: str
    history: list[tuple[str, str]]
    scope: list[str] | None
    k: int | None
    model: str | None = None  # a choice id checked by check_model; None: the settings' default
    conversation: str | None = None  # a conversation id: the question and its answer are appended to it


class AnswerJob:
    """One question waiting for, or getting, its answer. The worker thread emits
    ("queued" | "evidence" | "token" | "answer" | "error", data) events into the asking request's
    event loop; "evidence" (a list of lines) comes before the first "token". ``model_id`` is the
    choice id of the model answering, set by the worker before it emits "evidence"."""

    def __init__(self, question: Question, loop: asyncio.AbstractEventLoop):
        self.question, self._loop = question, loop
        self.events: asyncio.Queue[tuple[str, dict | list]] = asyncio.Queue()
        self.cancelled = threading.Event()  # the client hung up: stop generating for it
        self.model_id: str | None = None

    def emit(self, kind: str, data: dict | list) -> None:
        try:
            self._loop.call_soon_threadsafe(self.events.put_nowait, (kind, data))
        except RuntimeError:  # the server is shutting down: its event loop is closed, nobody listens
            self.cancelled.set()

    async def stream(self) -> AsyncIterator[tuple[str, dict | list]]:
        """The events up to and including the last one ("answer" or "error")."""
        try:
            while True:
                kind, data = await self.events.get()
                yield kind, data
                if kind in ("answer", "error"):
                    return
        finally:
            self.cancelled.set()

    async def result(self) -> dict:
        """The finished answer's JSON; an ApiError when answering failed."""
        async with aclosing(self.stream()) as events:
            async for kind, data in events:
                if kind == "answer":
                    return data
                if kind == "error":
                    raise ApiError(data["status"], data["message"])
        raise ApiError(500, "The answer stream ended early.")


class AnswerWorker:
    """Answers queued questions one at a time in a background thread, each by the model it names, else
    by the settings' default (loaded first). /api/health's report of the default is kept here."""

    def __init__(self, library: Library):
        self.library = library
        self.default_id: str | None = None  # the settings' choice, once loaded
        self.model_label: str | None = None  # its label
        self.model_error: str | None = None  # why it cannot answer, when it cannot
        self.answering: str | None = None  # the choice id of the model writing an answer now
        self._queue: queue.Queue[AnswerJob] = queue.Queue()
        self._busy = False
        threading.Thread(target=self._work, name="answer-worker", daemon=True).start()

    def submit(self, job: AnswerJob) -> None:
        job.emit("queued", {"ahead": self._queue.qsize() + int(self._busy)})
        self._queue.put(job)

    def chat_model(self, choice: str | None = None):
        """(choice id, chat model) for ``choice``, None meaning the settings' default; each model is loaded
        once per process. The default's state is remembered for /api/health (its label, or why it cannot
        answer) and a failed load is tried again next time; another model's failure is its request's only."""
        default = choice is None or choice == self.default_id
        try:
            choice = choice or models.default_choice()
            llm = models.get_chat_model(choice)
        except models.ModelUnavailableError as err:
            if default:
                self.model_error = str(err)
            raise
        if default:
            self.default_id, self.model_label, self.model_error = choice, models.chat_model_label(llm), None
        return choice, llm

    def _work(self) -> None:
        try:
            self.chat_model()  # warm up, so the first question does not wait for the load
        except models.ModelUnavailableError as err:
            log.warning("Chat model not available: %s", err)
        while True:  # a daemon thread: it ends with the process
            job = self._queue.get()
            if job.cancelled.is_set():
                continue
            self._busy = True
            try:
                self._answer(job)
            finally:
                self._busy, self.answering = False, None

    def _answer(self, job: AnswerJob) -> None:
        q = job.question
        try:
            job.model_id, llm = self.chat_model(q.model)
            self.answering = job.model_id
            stream = qa.ask(q.text, self.library.retriever, llm=llm, history=q.history, scope=q.scope, k=q.k)
            job.emit("evidence", qa.evidence_json(stream.evidence))  # found before any model call: show it while the model works
            with closing(iter(stream)) as pieces:  # closing releases the model at once when the client hung up
                for piece in pieces:
                    if job.cancelled.is_set():
                        log.info("Stopped answering: the client went away")
                        return
                    if piece:
                        job.emit("token", {"text": piece})
            answer = answer_json(stream.result, job.model_id)
            if q.conversation:  # kept before the client hears of it: a GET after the answer finds it
                answer["conversation"] = save_exchange(q, stream, job.model_id)
            job.emit("answer", answer)
        except Exception as err:  # any failure becomes the request's error event; the worker goes on
            status, message = status_and_message(err)
            log.warning("Answering with %s failed: %s", job.model_id or "the default model", message)
            job.emit("error", {"status": status, "message": message})


# -----------------------------------------------------------------------------
# The heavy objects, made once per server process


class Library:
    """Store client, embedder, retriever, enricher and the two workers, shared by all requests."""

    def __init__(self):
        self.client = ingest.get_client()
        self.embedder = models.get_embeddings()
        self.retriever = Retriever(self.client, self.embedder)
        self.retriever.refresh()
        self.enricher = (
            ingest.BackgroundEnricher(self.client, self.embedder, models.get_chat_model) if config.ENRICH_ENABLED else None
        )
        self.uploads = Path(tempfile.mkdtemp(prefix="pdf-rag-uploads-"))
        self.ingester = IngestWorker(self)
        self.answers = AnswerWorker(self)
        if self.enricher is not None:  # labels left unfinished by an earlier run, as the app does
            for doc in ingest.list_documents(self.client):
                if ingest.labels_missing(doc):
                    self.enricher.submit(doc["collection"])

    def close(self) -> None:
        shutil.rmtree(self.uploads, ignore_errors=True)

    def document(self, document_id: str) -> dict:
        """The store's record of one complete document; 404 when there is none."""
        for doc in ingest.list_documents(self.client):
            if doc["collection"] == document_id:
                return doc
        raise ApiError(404, f"There is no document '{document_id}' in the library.")

    def scope(self, document_ids: list[str] | None) -> list[str] | None:
        """The checked scope for a search or a question (None: the whole library)."""
        if not document_ids:  # no listing needed: it costs ~100 ms at 200 documents
            return None
        known = {d["collection"] for d in ingest.list_documents(self.client)}
        unknown = [d for d in document_ids or [] if d not in known]
        if unknown:
            raise ApiError(404, f"There is no document {', '.join(repr(d) for d in unknown)} in the library.")
        return list(document_ids)


def get_library(request: Request) -> Library:
    return request.app.state.library


Lib = Annotated[Library, Depends(get_library)]


# -----------------------------------------------------------------------------
# JSON shapes


def document_json(doc: dict, enricher: ingest.BackgroundEnricher | None) -> dict:
    """A document as the API shows it: counts, OCR'd pages and the state of its page labels."""
    sources = doc.get("page_sources", "")
    labelling = enricher.progress().get(doc["collection"]) if enricher is not None else None
    if labelling is not None and labelling.state != "done":
        labels = {"state": labelling.state, "done": labelling.done, "total": labelling.total, "message": labelling.message}
    else:
        state = "done" if not ingest.labels_missing(doc) else ("off" if enricher is None else "waiting")
        labels = {"state": state, "done": doc.get("enriched_pages", 0), "total": doc["pages"] - doc.get("empty_pages", 0)}
    return {
        "id": doc["collection"],
        "name": doc["doc_name"],
        "pages": doc["pages"],
        "passages": doc.get("chunks"),
        "ocr_pages": [n for n, s in enumerate(sources, 1) if s == "O"],
        "empty_pages": [n for n, s in enumerate(sources, 1) if s == "E"],
        "labels": labels,
        "sha256": doc.get("sha256"),
        "embedder": doc.get("embedder"),
        "language": doc.get("language") or None,
        "created_at": doc.get("created_at"),
    }


def hit_json(hit: Hit) -> dict:
    return {
        "document_id": hit.collection,
        "doc": hit.doc_name,
        "page": hit.page,
        "passage_id": hit.id,
        "passage": hit.text,
        "start": hit.start,
        "end": hit.end,
        "title": hit.title,
        "keywords": hit.keywords,
        "score": round(hit.score, 6),
        "trace": hit.trace,
    }


def line_json(line: Hit) -> dict:
    """An evidence line as /api/search returns it: qa.evidence_json's fields, its span on the page
    (``[start, end)`` of the page text) and the trace of its ranking (keyword, meaning, page_rank, kind)."""
    [body] = qa.evidence_json([line])
    return {**body, "start": line.start, "end": line.end, "title": line.title, "keywords": line.keywords, "trace": line.trace}


def citation_json(answer: qa.Answer, citation: Citation) -> dict:
    """A citation with the line (or passage) the model read as its number: its text, span and id."""
    hit = answer.cited(citation)
    return {**qa.citation_json(citation, hit), "document_id": citation.collection, "passage": hit.text, "passage_id": hit.id}


def answer_json(answer: qa.Answer, model_id: str | None = None) -> dict:
    """``qa.Answer.to_json`` with each citation's document id and passage, and the passages shown.
    ``model`` is the label of the model that wrote the text, ``model_id`` its choice id (both None
    when no model did: a greeting, a refusal decided by the search, a figure worked out in code)."""
    body = answer.to_json()
    body["model_id"] = model_id if answer.model else None
    body["citations"] = [citation_json(answer, c) for c in answer.citations]
    body["sources"] = [hit_json(h) for h in answer.sources]
    return body


# -----------------------------------------------------------------------------
# The app


@asynccontextmanager
async def lifespan(app: FastAPI):
    config.setup_logging()
    app.state.library = Library()
    log.info("API ready: %d documents", len(ingest.list_documents(app.state.library.client)))
    yield
    app.state.library.close()


app = FastAPI(
    title="Chat with your PDFs",
    summary="Upload PDFs, search them and ask questions with checked page citations.",
    lifespan=lifespan,
)
app.add_middleware(BodyLimit)  # inside AccessCheck: a refused request's body is never read
app.add_middleware(AccessCheck)


@app.exception_handler(ApiError)
async def _api_error(request: Request, err: ApiError) -> JSONResponse:
    return error_response(err.status, err.message)


@app.exception_handler(RequestValidationError)
async def _invalid_request(request: Request, err: RequestValidationError) -> JSONResponse:
    return error_response(400, validation_message(err))


@app.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
    message = str(err.detail)
    if err.status_code in (404, 405):  # no route: Starlette's "Not Found" says too little
        message = f"{message}: {request.method} {request.url.path}. The endpoints are listed at /docs."
    return error_response(err.status_code, message, getattr(err, "headers", None))


async def _library_error(request: Request, err: Exception) -> JSONResponse:
    return error_response(*status_and_message(err))


# The library's own errors by class (handled where raised); Exception last, for the unforeseen (500).
for _kind in (extract.IngestError, models.ModelUnavailableError, httpx.TransportError, Exception):
    app.add_exception_handler(_kind, _library_error)


# -- documents and jobs ---------------------------------------------------------


def upload_name(filename: str | None) -> str:
    """The file name an upload is shown and stored under: upload_name("../a/b.pdf") -> "b.pdf" """
    name = Path(filename or "").name[-200:]
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
    extract.open_pdf(part.path).close()
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


@app.post("/api/documents", status_code=202, tags=["documents"], openapi_extra=UPLOAD_BODY)
async def upload_documents(lib: Lib, request: Request) -> dict:
    """Queue PDFs for ingest and return at once with one job per file.

    Every file is checked first; if any is too large, not a PDF, damaged or encrypted,
    nothing is queued and the error names each bad file. A file is refused while it
    arrives once it passes MAX_FILE_MB, a request with more than API_MAX_FILES files or
    over API_MAX_REQUEST_MB in all as soon as it does.
    """
    reader = UploadReader(lib.uploads)
    parts = await reader.read(request)
    jobs, problems = [], []
    try:
        for part in parts:
            try:
                jobs.append(await asyncio.to_thread(check_upload, part))
            except extract.IngestError as err:
                problems.append(status_and_message(err))
    except BaseException:  # an unforeseen failure (500): none of this upload stays on disk
        reader.discard()
        raise
    if problems:
        reader.discard()
        status = problems[0][0] if len({s for s, _ in problems}) == 1 else 400
        raise ApiError(status, " ".join(m for _, m in problems) + (" Nothing was added." if len(parts) > 1 else ""))
    for job in jobs:
        lib.ingester.submit(job)
    return {"jobs": [{"id": j.id, "file": j.file, "document_id": j.document_id, "url": f"/api/jobs/{j.id}"} for j in jobs]}


def find_job(lib: Library, job_id: str) -> IngestJob:
    job = lib.ingester.job(job_id)
    if job is not None:
        return job
    document_id = lib.ingester.forgotten.get(job_id)
    if document_id is not None:
        raise ApiError(
            404,
            f"Job '{job_id}' has finished and was forgotten: finished jobs are kept {config.API_JOB_KEEP_SECONDS} s, "
            f"the last {config.API_JOB_KEEP_COUNT} of them (settings API_JOB_KEEP_SECONDS, API_JOB_KEEP_COUNT). "
            f"If it added its document, GET /api/documents/{document_id} shows it.",
        )
    raise ApiError(404, f"There is no job '{job_id}' (jobs are forgotten when the server restarts).")


@app.get("/api/jobs/{job_id}", tags=["documents"])
def get_job(lib: Lib, job_id: str) -> dict:
    """An upload's state (queued, running, done, failed), stage message and page progress."""
    return find_job(lib, job_id).to_json()


@app.get("/api/jobs/{job_id}/events", tags=["documents"])
def job_events(lib: Lib, job_id: str) -> StreamingResponse:
    """The job's progress as server-sent events: "progress" on every change, then "done" or "failed"."""
    job = find_job(lib, job_id)

    async def events() -> AsyncIterator[bytes]:
        seen = -1
        while True:
            if job.version != seen:
                seen, snapshot = job.version, job.to_json()
                final = snapshot["state"] in ("done", "failed")
                yield sse(snapshot["state"] if final else "progress", snapshot)
                if final:
                    return
            await asyncio.sleep(0.2)

    return StreamingResponse(events(), media_type="text/event-stream")


@app.get("/api/documents", tags=["documents"])
def list_documents(lib: Lib) -> dict:
    return {"documents": [document_json(d, lib.enricher) for d in ingest.list_documents(lib.client)]}


@app.get("/api/documents/{document_id}", tags=["documents"])
def get_document(lib: Lib, document_id: str) -> dict:
    return document_json(lib.document(document_id), lib.enricher)


@app.get("/api/documents/{document_id}/outline", tags=["documents"])
def document_outline(lib: Lib, document_id: str) -> dict:
    """The document's top-level sections with their pages: from the PDF's own outline, else its
    large-font headings, else the labels the app gave its pages ("source" says which)."""
    doc = lib.document(document_id)
    sections = outline.document_outline(ingest.kept_pdf_path(document_id), lib.retriever.page_titles(document_id), doc["pages"])
    return {
        "id": document_id,
        "name": doc["doc_name"],
        "pages": doc["pages"],
        "source": sections[0].source if sections else None,
        "sections": [{"title": s.title, "start": s.start, "end": s.end, "pages": outline.page_range(s)} for s in sections],
        "labels_done": not ingest.labels_missing(doc),
    }


@app.delete("/api/documents/{document_id}", status_code=204, tags=["documents"])
def delete_document(lib: Lib, document_id: str) -> Response:
    """Remove a document: its passages, vectors, labels and kept PDF; it leaves search at once."""
    doc = lib.document(document_id)
    busy = lib.ingester.busy_with(document_id)
    if busy is not None:
        raise ApiError(409, f"{doc['doc_name']} is being added again (job {busy.id}); delete it when that job is done.")
    if lib.enricher is not None:
        lib.enricher.cancel(document_id)  # stop labelling it now, not after its next page
    ingest.delete_document(lib.client, document_id)
    lib.retriever.refresh()
    return Response(status_code=204)


@app.get(
    "/api/documents/{document_id}/pages/{page:int}.png",
    tags=["documents"],
    response_class=Response,
    responses={200: {"content": {"image/png": {}}, "description": "the page as a PNG"}},
)
def page_image(
    lib: Lib,
    document_id: str,
    page: int,
    passage: Annotated[str | None, Query(description="a passage_id from /api/search or a citation: highlight it")] = None,
    width: Annotated[int, Query(ge=100, le=3000)] = 900,
) -> Response:
    """The page as it looks, ``width`` pixels wide, optionally with a passage highlighted."""
    doc = lib.document(document_id)
    if not 1 <= page <= doc["pages"]:
        raise ApiError(404, f"{doc['doc_name']} has {doc['pages']} pages; there is no page {page}.")
    pdf = ingest.kept_pdf_path(document_id)
    if not pdf.exists():
        raise ApiError(404, f"The PDF of {doc['doc_name']} is not kept beside the store, so its pages cannot be shown; add it again.")
    start = end = 0
    boxes = None
    if passage:
        got = ingest.open_collection(lib.client, document_id, lib.embedder).get(ids=[passage], include=["metadatas"])
        if not got["ids"] or got["metadatas"][0]["page"] != page:
            raise ApiError(404, f"There is no passage '{passage}' on page {page} of {doc['doc_name']}.")
        meta = got["metadatas"][0]
        start, end, boxes = meta["start"], meta["end"], meta.get("ocr_boxes") or None
    return Response(preview.render_page(pdf, page, start, end, boxes, width_px=width), media_type="image/png")


# -- search and ask ---------------------------------------------------------------


class SearchRequest(BaseModel):
    query: str = Field(description="what to look for")
    documents: list[str] | None = Field(None, description="document ids to search (default: the whole library)")
    k: int | None = Field(
        None, ge=1, le=config.API_MAX_K,
        description=f"results to return: pages (default {config.TOP_K}) or lines (default {config.EVIDENCE_LINES})",
    )
    unit: Literal["page", "line"] = Field(
        "page", description="'page': ranked pages, each as its best passage; 'line': the lines of the best pages that answer"
    )


@app.post("/api/search", tags=["answers"])
def search(lib: Lib, body: SearchRequest) -> dict:
    """Retrieval only: the ranked pages, each as its best passage, with the trace of each ranking;
    or, with ``"unit": "line"``, the lines of the best pages that answer (what /api/ask shows as evidence)."""
    if not body.query.strip():
        raise ApiError(400, "The query is empty.")
    scope = lib.scope(body.documents)
    if body.unit == "page":
        hits = lib.retriever.search(body.query, k=body.k, scope=scope)
        return {"query": body.query, "unit": body.unit, "results": [hit_json(h) for h in hits]}
    hits = lib.retriever.search(body.query, scope=scope)  # the pages /api/ask reads its evidence from
    lines = evidence.best_lines(body.query, lib.retriever.load_pages(hits), lib.retriever, n=body.k)
    log.info("Search by line: %d lines", len(lines))
    return {"query": body.query, "unit": body.unit, "results": [line_json(h) for h in lines]}


class ChatTurn(BaseModel):
    role: Literal["user", "assistant"]
    content: str


CHOICE_KINDS = ("embedded", "ollama", "openai")


def is_choice_id(name: str) -> bool:
    """is_choice_id("openai:qwen2.5-7b") -> True; is_choice_id("pdf-library") -> False; is_choice_id("llama3.2:3b") -> False"""
    kind, colon, _ = name.partition(":")
    return bool(colon) and kind in CHOICE_KINDS


def check_model(choice: str) -> str:
    """``choice`` when it is a model that can answer now, or a model on an Ollama or model server that does
    not answer (loading it then says why, a 503); else a 400 naming the models that can answer.
    Listing them probes Ollama and the model server: it runs off the event loop."""
    available = models.chat_choices()
    if choice in {c.id for c in available}:
        return choice
    kind, _, name = choice.partition(":")
    if name and kind == "ollama" and models.ollama_models() is None:
        return choice
    if name and kind == "openai" and config.OPENAI_BASE_URL and models.server_models() is None:
        return choice
    ids = ", ".join(c.id for c in available) or "none"
    raise ApiError(400, f"There is no model '{choice}' to answer with. The models that can answer now: {ids}.")


class AskRequest(BaseModel):
    question: str
    documents: list[str] | None = Field(None, description="document ids to ask (default: the whole library)")
    history: list[ChatTurn] = Field(default_factory=list, description="earlier turns, oldest first")
    k: int | None = Field(None, ge=1, le=config.API_MAX_K, description=f"pages shown to the model (default {config.TOP_K})")
    stream: bool = Field(False, description="server-sent events: queued, evidence, token..., then answer (or error)")
    model: str | None = Field(None, description="the model to answer with: an id from /api/models (default: the settings' model)")
    conversation: str | None = Field(
        None, description="a conversation id from /api/conversations: the question and its answer are appended to it, "
                          "and its turns are the history when none is given"
    )


async def queue_question(
    lib: Library, question: str, history: list[tuple[str, str]], documents: list[str] | None, k: int | None, model: str | None = None,
    conversation: str | None = None,
) -> AnswerJob:
    """Check the question, the model it names and its scope, then put it in the answer queue."""
    if not question.strip():
        raise ApiError(400, "The question is empty.")
    if model:
        model = await asyncio.to_thread(check_model, model)  # probes model servers: keep the event loop free
    scope = await asyncio.to_thread(lib.scope, documents)  # reads the store: keep the event loop free
    if not await asyncio.to_thread(ingest.list_documents, lib.client):
        raise ApiError(409, "Your library is empty: add a PDF first.")
    job = AnswerJob(Question(question, history, scope, k, model or None, conversation), asyncio.get_running_loop())
    lib.answers.submit(job)
    return job


@app.get("/api/models", tags=["answers"])
def chat_models(lib: Lib) -> dict:
    """The chat models that can answer now (``"model"`` in /api/ask takes an ``id``), the settings'
    ``default`` (the one a question naming none gets; null, with ``default_error`` saying why, when it
    cannot be used) and the model ``answering`` a question at this moment (null when none is)."""
    body = {"models": [{"id": c.id, "label": c.label} for c in models.chat_choices()]}
    default, error = lib.answers.default_id, None
    if default is None:
        try:
            default = models.default_choice()
        except models.ModelUnavailableError as err:
            error = str(err)
    body.update(default=default, answering=lib.answers.answering)
    if error:
        body["default_error"] = error
    return body


@app.post("/api/ask", tags=["answers"])
async def ask(lib: Lib, body: AskRequest) -> Response:
    """Answer from the library with checked page citations, as JSON or as server-sent events;
    by the model ``"model"`` names (an id from /api/models), else the settings' model. The answer's
    ``model`` is the label of the model that wrote it, ``model_id`` its id. With ``"conversation"`` the
    question and its answer are appended to that conversation (the answer's ``conversation`` says so)."""
    history = [(turn.role, turn.content) for turn in body.history]
    if body.conversation:
        kept = await asyncio.to_thread(find_conversation, body.conversation)
        history = history or conversations.history(kept.messages)
    job = await queue_question(lib, body.question, history, body.documents, body.k, body.model, body.conversation)
    if not body.stream:
        return JSONResponse(await job.result())

    async def events() -> AsyncIterator[bytes]:
        async for kind, data in job.stream():
            yield sse(kind, data)

    return StreamingResponse(events(), media_type="text/event-stream")


# -- OpenAI-compatible ---------------------------------------------------------------


class OpenAIMessage(BaseModel):
    role: str
    content: str | list[dict] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):  # content parts: keep the text ones
            return " ".join(part.get("text", "") for part in self.content if part.get("type") == "text")
        return self.content or ""


class ChatCompletionRequest(BaseModel):
    model: str | None = Field(
        None, description=f"an id from /v1/models: {config.API_MODEL_ID} (or any name that is no choice id) for the default model"
    )
    messages: list[OpenAIMessage]
    stream: bool = False


def sources_footer(answer: dict) -> str:
    """The citations and evidence lines of an answer_json as text, for a chat client that shows only the message:

    sources_footer({"citations": [{"doc": "a.pdf", "page": 3, "verified": True, "marker": "[1]"}],
                    "evidence": [{"doc": "a.pdf", "page": 3, "text": "It rained."}]})
      -> '\\n\\nSources:\\n- [1] a.pdf, page 3 (verified)\\n\\nEvidence (lines from the pages found):\\n- a.pdf, page 3: "It rained."'

    Only the lines shown first (EVIDENCE_LINES) are listed; when nothing close was found they are said to be
    only the nearest.
    """
    footer = ""
    if citations := answer["citations"]:
        lines = [f"- {c['marker']} {c['doc']}, page {c['page']} ({'verified' if c['verified'] else 'not backed by the page'})"
                 for c in citations]
        footer += "\n\nSources:\n" + "\n".join(lines)
    if found := answer["evidence"][: config.EVIDENCE_LINES]:
        heading = "Nearest lines (none is about the question)" if answer.get("nothing_found") else "Evidence (lines from the pages found)"
        footer += f"\n\n{heading}:\n" + "\n".join(f'- {e["doc"]}, page {e["page"]}: "{e["text"]}"' for e in found)
    return footer


def completion_chunk(completion_id: str, model: str, delta: dict, finish_reason: str | None = None) -> dict:
    return {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


@app.post("/v1/chat/completions", tags=["openai"])
async def chat_completions(lib: Lib, body: ChatCompletionRequest) -> Response:
    """OpenAI's chat completions, answered from the library: the last user message is the
    question, earlier user/assistant messages the history; the reply ends with its sources and
    evidence lines (also as ``citations`` and ``evidence`` beside the message when not streamed).

    ``model`` picks the model that answers when it is a choice id from /v1/models ("openai:qwen2.5-7b");
    any other name (``API_MODEL_ID``, or whatever a client sends by habit) means the settings' model,
    as before. The reply's ``model`` is the choice id of the model that answered."""
    turns = [(m.role, m.text()) for m in body.messages if m.role in ("user", "assistant")]
    if not turns or turns[-1][0] != "user":
        raise ApiError(400, "The last message must be the user's question.")
    chosen = body.model if body.model and is_choice_id(body.model) else None
    job = await queue_question(lib, turns[-1][1], turns[:-1], None, None, chosen)
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    if not body.stream:
        answer = await job.result()
        message = {"role": "assistant", "content": answer["answer"] + sources_footer(answer)}
        return JSONResponse({
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": job.model_id or config.API_MODEL_ID,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "citations": answer["citations"],
            "evidence": answer["evidence"],
        })

    async def events() -> AsyncIterator[bytes]:
        opened = False  # the first chunk, the assistant's role, waits for the worker to know the model
        async for kind, data in job.stream():
            if kind == "error":
                chunk = {"error": {"message": data["message"], "status": data["status"]}}
            elif kind in ("evidence", "token", "answer"):
                model = job.model_id or config.API_MODEL_ID
                if not opened:
                    opened = True
                    yield format_sse_event(data_str=json.dumps(completion_chunk(completion_id, model, {"role": "assistant", "content": ""})))
                if kind == "evidence":
                    continue
                if kind == "token":
                    chunk = completion_chunk(completion_id, model, {"content": data["text"]})
                else:
                    chunk = completion_chunk(completion_id, model, {"content": sources_footer(data)}, "stop")
            else:
                continue
            yield format_sse_event(data_str=json.dumps(chunk, ensure_ascii=False))
        yield format_sse_event(data_str="[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream")


@app.get("/v1/models", tags=["openai"])
def list_models() -> dict:
    """``API_MODEL_ID``, the library answered by the settings' model, then each model that can answer
    now by its choice id (as /api/models lists them, the label beside it)."""
    library = {"id": config.API_MODEL_ID, "object": "model", "created": 0, "owned_by": "local"}
    choices = [{"id": c.id, "object": "model", "created": 0, "owned_by": "local", "label": c.label} for c in models.chat_choices()]
    return {"object": "list", "data": [library, *choices]}


# -- conversations --------------------------------------------------------------------
# Kept on this machine beside the store by conversations.py; the app lists and shows the same ones.


def iso_time(seconds: float) -> str:
    """iso_time(0) -> "1970-01-01T00:00:00Z" """
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def conversation_json(conversation: conversations.Conversation) -> dict:
    """A conversation as the list shows it: id, title, times (UTC) and how many messages it holds."""
    return {
        "id": conversation.id,
        "title": conversation.title,
        "created": iso_time(conversation.created),
        "updated": iso_time(conversation.updated),
        "message_count": conversation.count,
    }


def message_json(message: dict) -> dict:
    """A kept message: a question's text; an answer's text, its evidence lines and, unless answering
    failed (``error``), the answer as /api/ask returned it (citations with their passages, sources)."""
    if message["role"] != "assistant":
        return {"role": message["role"], "content": message["content"]}
    body = {"role": "assistant", "content": message.get("content", ""), "evidence": qa.evidence_json(message.get("evidence", []))}
    if message.get("error"):
        body["error"] = message["error"]
    if "answer" in message:
        body["answer"] = answer_json(message["answer"], message.get("model_id"))
    return body


def find_conversation(conversation_id: str) -> conversations.Conversation:
    """The conversation with its messages; 404 when there is none."""
    conversation = conversations.get(conversation_id)
    if conversation is None:
        raise ApiError(404, f"There is no conversation '{conversation_id}' (it may have been deleted).")
    return conversation


def save_exchange(question: Question, stream: qa.AnswerStream, model_id: str | None) -> str | None:
    """Append a question and its answer to the conversation the request named (by the answer worker,
    before the answer is sent); the conversation's id, or None when it is gone or cannot be written."""
    reply = {"role": "assistant", "content": stream.result.text, "answer": stream.result, "evidence": stream.evidence,
             "model_id": model_id if stream.result.model else None}
    try:
        conversations.append(question.conversation, {"role": "user", "content": question.text}, reply)
    except (conversations.ConversationNotFound, conversations.ConversationStoreError) as err:
        log.warning("An answer was not kept in conversation %s: %s", question.conversation,
                    "it was deleted" if isinstance(err, conversations.ConversationNotFound) else err)
        return None
    return question.conversation


@app.exception_handler(conversations.ConversationStoreError)
async def _conversation_store_error(request: Request, err: conversations.ConversationStoreError) -> JSONResponse:
    return error_response(503, str(err))


class NewConversation(BaseModel):
    title: str = Field("", description="its title (default: its first question)")


class ConversationTitle(BaseModel):
    title: str = Field(description="the new title")


@app.get("/api/conversations", tags=["conversations"])
def list_conversations() -> dict:
    """Every kept conversation, the one with the latest message first (without their messages)."""
    return {"conversations": [conversation_json(c) for c in conversations.list_conversations()]}


@app.post("/api/conversations", status_code=201, tags=["conversations"])
def create_conversation(body: NewConversation | None = None) -> dict:
    """A new, empty conversation; name it in /api/ask's ``"conversation"`` to keep questions and answers in it."""
    return conversation_json(conversations.create(body.title if body else ""))


@app.get("/api/conversations/{conversation_id}", tags=["conversations"])
def get_conversation(conversation_id: str) -> dict:
    """A conversation with its messages, oldest first: each question, and each answer as /api/ask gave it."""
    conversation = find_conversation(conversation_id)
    return {**conversation_json(conversation), "messages": [message_json(m) for m in conversation.messages]}


@app.patch("/api/conversations/{conversation_id}", tags=["conversations"])
def rename_conversation(conversation_id: str, body: ConversationTitle) -> dict:
    """Give a conversation a new title."""
    try:
        return conversation_json(conversations.rename(conversation_id, body.title))
    except ValueError as err:
        raise ApiError(400, str(err)) from None
    except conversations.ConversationNotFound:
        raise ApiError(404, f"There is no conversation '{conversation_id}' (it may have been deleted).") from None


@app.delete("/api/conversations/{conversation_id}", status_code=204, tags=["conversations"])
def delete_conversation(conversation_id: str) -> Response:
    """Delete a conversation for good: none of its text stays in the file it was kept in."""
    if not conversations.delete(conversation_id):
        raise ApiError(404, f"There is no conversation '{conversation_id}' (it may have been deleted).")
    return Response(status_code=204)


@app.get(
    "/api/conversations/{conversation_id}/export",
    tags=["conversations"],
    response_class=Response,
    responses={200: {"content": {"text/markdown": {}}, "description": "the conversation as Markdown"}},
)
def export_conversation(lib: Lib, conversation_id: str) -> Response:
    """The conversation as Markdown: each question, the evidence lines, the answer, and each citation with
    its document, page and passage (marked when the document has been removed since)."""
    conversation = find_conversation(conversation_id)
    try:
        library = {d["collection"] for d in ingest.list_documents(lib.client)}
    except ingest.StoreUnavailableError:  # the export needs nothing of the store: removals are just not marked
        library = None
    words = "".join(c if c.isascii() and c.isalnum() else " " for c in conversation.title).split()
    name = "-".join(words)[:60] or "conversation"
    return Response(conversations.export_markdown(conversation, library), media_type="text/markdown; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{name}.md"'})


# -- health ---------------------------------------------------------------------------


@app.get("/api/health", tags=["health"])
def health(lib: Lib) -> JSONResponse:
    """Whether the store answers, the default chat model (the settings' choice: a question may name
    another, see /api/models) and the embedder, and whether Ollama answers. 503 when the store does not answer."""
    store = {"location": f"{config.CHROMA_HOST}:{config.CHROMA_PORT}" if config.CHROMA_HOST else config.CHROMA_PERSIST_DIR}
    try:
        store.update(ok=True, documents=len(ingest.list_documents(lib.client)))
    except ingest.StoreUnavailableError as err:
        store.update(ok=False, message=str(err))
    chat = {"id": lib.answers.default_id, "name": lib.answers.model_label, "ok": lib.answers.model_label is not None}
    if lib.answers.model_error:
        chat.update(ok=False, message=lib.answers.model_error)
    elif lib.answers.model_label is None:
        chat["message"] = "loading"
    body = {
        "ok": store["ok"],
        "store": store,
        "chat_model": chat,
        "embedder": models.embedder_name(lib.embedder),
        "ollama": {"url": config.OLLAMA_BASE_URL, "reachable": models.ollama_models() is not None},
    }
    return JSONResponse(body, status_code=200 if store["ok"] else 503)


if __name__ == "__main__":
    import uvicorn

    uvicorn.run("api:app", host=config.API_HOST, port=config.API_PORT)
