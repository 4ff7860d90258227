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
    POST /v1/chat/completions, GET /v1/models    the library as an OpenAI-compatible model (sources
                                                 and evidence lines at the end of the reply); its
                                                 models: API_MODEL_ID (the default) and each choice id
    GET /api/health                          store, default chat model, embedder, Ollama

Every error is JSON ``{"error": {"message": ..., "status": ...}}`` (OpenAI's shape, so
its client libraries show the message) with the same plain sentence the app shows and
a fitting status (400 bad input or a model no one can answer with, 404 unknown, 409
conflicting state, 413 too large, 415 not a PDF, 503 a store or model that does not
answer); never a traceback. A model failing mid-answer (server gone, key refused,
connection cut, slower than LLM_TIMEOUT) is the same: a sentence, and the next
question is answered. With
API_TOKEN set every request needs it as a bearer token; without it only requests whose
Host header is local are served (so a web page cannot reach this server by DNS tricks).
A document's id is its collection name, the same one the app and the CLIs use.

Deliberately simple: questions are answered one at a time in arrival order (the
embedded model has a single context anyway, and a queue is fair where a lock is not);
uploads are ingested one at a time; jobs live in memory, so a restart forgets them
(the documents themselves are in the store).
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
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager, closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import httpx
from fastapi import Depends, FastAPI, File, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.sse import format_sse_event
from pydantic import BaseModel, Field
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException

import config
import evidence
import extract
import ingest
import models
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


class AccessCheck:
    """ASGI middleware applying ``access_refused`` to every HTTP request (streams pass through untouched)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and (refusal := access_refused(Headers(scope=scope))) is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)


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

    def report(self, current: int, total: int, message: str) -> None:
        """ingest's progress callback: page ``current`` of ``total``, and what is happening."""
        self.current, self.total, self.message = current, total, message
        self.version += 1

    def finish(self, state: str, message: str, status: int | None = None, **result) -> None:
        self.state, self.message, self.status, self.result = state, message, status, result
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
    """Ingests queued uploads one at a time in a background thread; jobs are kept for lookup."""

    def __init__(self, library: Library):
        self.library = library
        self.jobs: dict[str, IngestJob] = {}
        self._queue: queue.Queue[IngestJob] = queue.Queue()
        threading.Thread(target=self._work, name="ingest-worker", daemon=True).start()

    def submit(self, job: IngestJob) -> None:
        self.jobs[job.id] = job
        self._queue.put(job)

    def busy_with(self, document_id: str) -> IngestJob | None:
        return next((j for j in self.jobs.values() if j.document_id == document_id and j.state in ("queued", "running")), None)

    def _work(self) -> None:
        while True:  # a daemon thread: it ends with the process
            job = self._queue.get()
            try:
                self._ingest(job)
            finally:
                shutil.rmtree(job.path.parent, ignore_errors=True)

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
                        log.info("Stopped answering %r: the client went away", q.text)
                        return
                    if piece:
                        job.emit("token", {"text": piece})
            job.emit("answer", answer_json(stream.result, job.model_id))
        except Exception as err:  # any failure becomes the request's error event; the worker goes on
            status, message = status_and_message(err)
            log.warning("Answering %r with %s failed: %s", q.text, job.model_id or "the default model", message)
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
                if labels_missing(doc):
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


def labels_missing(doc: dict) -> bool:
    return doc.get("enriched_pages", 0) < doc["pages"] - doc.get("empty_pages", 0)


def document_json(doc: dict, enricher: ingest.BackgroundEnricher | None) -> dict:
    """A document as the API shows it: counts, OCR'd pages and the state of its page labels."""
    sources = doc.get("page_sources", "")
    labelling = enricher.progress().get(doc["collection"]) if enricher is not None else None
    if labelling is not None and labelling.state != "done":
        labels = {"state": labelling.state, "done": labelling.done, "total": labelling.total, "message": labelling.message}
    else:
        state = "done" if not labels_missing(doc) else ("off" if enricher is None else "waiting")
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
    """A citation with the passage the model was shown for that page (None if it was not shown one)."""
    hit = next((h for h in answer.sources if (h.collection, h.page) == (citation.collection, citation.page)), None)
    return {
        "document_id": citation.collection,
        "doc": citation.doc_name,
        "page": citation.page,
        "verified": citation.verified,
        "inferred": citation.inferred,
        "passage": hit.text if hit else None,
        "passage_id": hit.id if hit else None,
    }


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


def save_upload(upload: UploadFile, folder: Path) -> IngestJob:
    """Save an upload into ``folder`` (under its own name, which errors then show) and check it
    opens as a PDF; a queued job for it. Raises the IngestError saying what is wrong with the file.
    """
    path = folder / upload_name(upload.filename)
    with open(path, "wb") as out:
        shutil.copyfileobj(upload.file, out, 1 << 20)
    extract.open_pdf(path).close()
    return IngestJob(file=path.name, path=path, document_id=ingest.collection_name_for(ingest.file_sha256(path)))


@app.post("/api/documents", status_code=202, tags=["documents"])
def upload_documents(lib: Lib, files: Annotated[list[UploadFile], File(description="one or more PDFs")]) -> dict:
    """Queue PDFs for ingest and return at once with one job per file.

    Every file is checked first; if any is too large, not a PDF, damaged or encrypted,
    nothing is queued and the error names each bad file.
    """
    if len(files) > config.API_MAX_FILES:
        raise ApiError(413, f"{len(files)} files in one request; the limit is {config.API_MAX_FILES} (setting API_MAX_FILES).")
    jobs, problems = [], []
    for upload in files:
        folder = Path(tempfile.mkdtemp(dir=lib.uploads))
        try:
            jobs.append(save_upload(upload, folder))
        except extract.IngestError as err:
            problems.append(status_and_message(err))
            shutil.rmtree(folder, ignore_errors=True)
    if problems:
        for job in jobs:
            shutil.rmtree(job.path.parent, ignore_errors=True)
        status = problems[0][0] if len({s for s, _ in problems}) == 1 else 400
        raise ApiError(status, " ".join(m for _, m in problems) + (" Nothing was added." if len(files) > 1 else ""))
    for job in jobs:
        lib.ingester.submit(job)
    return {"jobs": [{"id": j.id, "file": j.file, "document_id": j.document_id, "url": f"/api/jobs/{j.id}"} for j in jobs]}


def find_job(lib: Library, job_id: str) -> IngestJob:
    job = lib.ingester.jobs.get(job_id)
    if job is None:
        raise ApiError(404, f"There is no job '{job_id}' (jobs are forgotten when the server restarts).")
    return job


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


@app.delete("/api/documents/{document_id}", status_code=204, tags=["documents"])
def delete_document(lib: Lib, document_id: str) -> Response:
    """Remove a document: its passages, vectors, labels and kept PDF; it leaves search at once."""
    doc = lib.document(document_id)
    busy = lib.ingester.busy_with(document_id)
    if busy is not None:
        raise ApiError(409, f"{doc['doc_name']} is being added again (job {busy.id}); delete it when that job is done.")
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
    lines = evidence.best_lines(body.query, hits, lib.retriever, n=body.k)
    log.info("Search by line for %r: %d lines", body.query, len(lines))
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


async def queue_question(
    lib: Library, question: str, history: list[tuple[str, str]], documents: list[str] | None, k: int | None, model: str | None = None
) -> AnswerJob:
    """Check the question, the model it names and its scope, then put it in the answer queue."""
    if not question.strip():
        raise ApiError(400, "The question is empty.")
    if model:
        model = await asyncio.to_thread(check_model, model)  # probes model servers: keep the event loop free
    scope = await asyncio.to_thread(lib.scope, documents)  # reads the store: keep the event loop free
    if not await asyncio.to_thread(ingest.list_documents, lib.client):
        raise ApiError(409, "Your library is empty: add a PDF first.")
    job = AnswerJob(Question(question, history, scope, k, model or None), asyncio.get_running_loop())
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
    ``model`` is the label of the model that wrote it, ``model_id`` its id."""
    history = [(turn.role, turn.content) for turn in body.history]
    job = await queue_question(lib, body.question, history, body.documents, body.k, body.model)
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

    sources_footer({"citations": [{"doc": "a.pdf", "page": 3, "verified": True}],
                    "evidence": [{"doc": "a.pdf", "page": 3, "text": "It rained."}]})
      -> '\\n\\nSources:\\n- a.pdf, page 3 (verified)\\n\\nEvidence (lines from the pages found):\\n- a.pdf, page 3: "It rained."'
    """
    footer = ""
    if citations := answer["citations"]:
        lines = [f"- {c['doc']}, page {c['page']} ({'verified' if c['verified'] else 'not backed by the page'})" for c in citations]
        footer += "\n\nSources:\n" + "\n".join(lines)
    if found := answer["evidence"]:
        footer += "\n\nEvidence (lines from the pages found):\n" + "\n".join(f'- {e["doc"]}, page {e["page"]}: "{e["text"]}"' for e in found)
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
