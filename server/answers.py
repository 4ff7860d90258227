"""Answers: questions queued to one worker thread, first come first served, each answered by qa.ask.

    queue_question (checks question, model, scope) -> AnswerJob -> AnswerWorker thread: qa.ask
      -> events into the asking request's event loop: queued, evidence, token..., answer (or error)
      -> save_exchange keeps it in the conversation the request named
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncIterator
from contextlib import aclosing, closing
from dataclasses import dataclass
from typing import TYPE_CHECKING

import config
import conversations
import ingest
import models
import qa

from server.errors import ApiError, status_and_message
from server.shapes import answer_json

if TYPE_CHECKING:
    from server.library import Library

log = logging.getLogger(__name__)

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
