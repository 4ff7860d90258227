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

Every error is JSON ``{"error": {"message", "type", "param", "code", "status"}}`` (OpenAI's shape,
so its client libraries raise the matching error and show the message) with the same plain sentence
the app shows and a fitting status (400 bad input, a question too long for the model or a model no one
can answer with, 404 unknown, 409 conflicting state, 413 too large, 415 not a PDF, 503 a store or model
that does not answer, or a full question line, with Retry-After); never a traceback. A model failing mid-answer (server gone, key refused,
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

This file is the map: the app, its error handlers and the /api routes. Their parts are in server/:
errors.py (the JSON error shape and statuses), access.py (token, Host and cross-site checks; body
limits), uploads.py (multipart parsed to disk), jobs.py (the ingest worker), answers.py (the answer
worker and its queue), library.py (the objects shared by all requests), shapes.py (JSON shapes) and
openai_compat.py (the /v1 routes), startup.py (a start-up failure said in one sentence).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Literal

import httpx
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

import config
import conversations
import embedders
import evidence
import extract
import ingest
import models
import outline
import preview

from server import openai_compat
from server.access import AccessCheck, BodyLimit
from server.answers import answer_unless_gone, queue_question
from server.errors import ApiError, error_response, sse, status_and_message, validation_message
from server.jobs import IngestJob
from server.library import Lib, Library
from server.shapes import conversation_json, document_json, hit_json, line_json, message_json
from server.startup import PlainStartupFailure, StartupFailure, plain_port_taken
from server.uploads import UPLOAD_BODY, UploadReader, check_upload

log = logging.getLogger(__name__)

# -----------------------------------------------------------------------------
# The app


# What stops the API from starting, each said in a sentence by the library (see server/startup.py)
STARTUP_PROBLEMS = (config.SettingError, extract.IngestError, models.ModelUnavailableError)


@asynccontextmanager
async def lifespan(app: FastAPI):
    try:
        config.setup_logging()
        app.state.library = Library()  # opens and sweeps the store, loads the embedder
    except STARTUP_PROBLEMS as err:  # uvicorn prints the sentence; logged here too, the console would show it twice
        raise StartupFailure(str(err)) from None
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
app.add_middleware(PlainStartupFailure)  # outermost: it sees the lifespan's failure first
plain_port_taken()
app.include_router(openai_compat.router)


@app.exception_handler(ApiError)
async def _api_error(request: Request, err: ApiError) -> JSONResponse:
    return error_response(err.status, err.message, getattr(err, "headers", None))


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
    placed = []
    for job in jobs:
        lib.ingester.submit(job)
        placed.append({"id": job.id, "file": job.file, "document_id": job.document_id, "url": f"/api/jobs/{job.id}",
                       "message": job.message})  # its place in the line, as it was queued
    return {"jobs": placed}


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
async def ask(lib: Lib, body: AskRequest, request: Request) -> Response:
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
        answer = await answer_unless_gone(job, request)
        return JSONResponse(answer) if answer is not None else Response(status_code=499)  # nobody reads it

    async def events() -> AsyncIterator[bytes]:
        async for kind, data in job.stream():
            yield sse(kind, data)

    return StreamingResponse(events(), media_type="text/event-stream")


# -- conversations --------------------------------------------------------------------
# Kept on this machine beside the store by conversations.py; the app lists and shows the same ones.


def find_conversation(conversation_id: str) -> conversations.Conversation:
    """The conversation with its messages; 404 when there is none."""
    conversation = conversations.get(conversation_id)
    if conversation is None:
        raise ApiError(404, f"There is no conversation '{conversation_id}' (it may have been deleted).")
    return conversation


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


def multilingual_embedder() -> str | None:
    """The name of the embedder of documents not in English (None: MULTILINGUAL_EMBEDDER=off, the main one
    serves all), or the sentence saying why it cannot be had."""
    if config.MULTILINGUAL_EMBEDDER == "off":
        return None
    try:
        return embedders.multilingual_embedder_name()
    except models.ModelUnavailableError as err:
        return str(err)


@app.get("/api/health", tags=["health"])
def health(lib: Lib) -> JSONResponse:
    """Whether the store answers, the default chat model (the settings' choice: a question may name
    another, see /api/models), the embedders (main, and for documents not in English), and whether Ollama
    answers. 503 when the store does not answer."""
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
        "embedder": embedders.embedder_name(lib.embedder),
        "multilingual_embedder": multilingual_embedder(),
        "questions": lib.answers.questions_json(),
        "ollama": {"url": config.OLLAMA_BASE_URL, "reachable": models.ollama_models() is not None},
    }
    return JSONResponse(body, status_code=200 if store["ok"] else 503)


if __name__ == "__main__":
    import uvicorn

    uvicorn.run("api:app", host=config.API_HOST, port=config.API_PORT)
