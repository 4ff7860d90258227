"""Answers: questions queued to one worker thread, first come first served, each answered by qa.ask.

    queue_question (checks question, model, scope) -> AnswerJob -> WaitingQuestions (at most
      API_MAX_WAITING; beyond, a 503 with Retry-After) -> AnswerWorker thread: qa.ask
      -> events into the asking request's event loop: queued, evidence, token..., answer (or error)
      -> save_exchange keeps it in the conversation the request named

A question whose client has gone is cancelled wherever it is: it leaves the waiting line (so it
delays no one), or the model stops at its next token. A streamed reply notices the hang-up itself;
a JSON reply is watched by ``answer_unless_gone``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, closing
from dataclasses import dataclass

from starlette.requests import Request
from typing import TYPE_CHECKING

import config
import conversations
import ingest
import models
import qa
import reading

from server.errors import ApiError, status_and_message, too_long
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


class ServerBusy(ApiError):
    """The waiting line is full: a 503 whose Retry-After says when to try again."""

    def __init__(self, waiting: int, retry_after: int):
        super().__init__(503, (
            f"The server is busy: {waiting} questions are waiting for an answer, the most it keeps "
            f"(setting API_MAX_WAITING). Ask again in about {retry_after} s."
        ))
        self.headers = {"Retry-After": str(retry_after)}


class WaitingQuestions:
    """The questions waiting for the answer worker, oldest first, at most ``limit`` of them.
    A cancelled question (its client has gone) is no longer waiting: it is neither counted nor answered."""

    def __init__(self, limit: int):
        self.limit = limit
        self._jobs: deque[AnswerJob] = deque()
        self._changed = threading.Condition()
        self.dropped = 0  # questions that left the line because their client had gone

    def _drop_cancelled(self) -> None:
        """Called with the condition held."""
        kept = deque(job for job in self._jobs if not job.cancelled.is_set())
        self.dropped += len(self._jobs) - len(kept)
        self._jobs = kept

    def put(self, job: AnswerJob, retry_after: Callable[[], int], announce: Callable[[int], None]) -> None:
        """Add ``job`` at the end, first calling ``announce`` with how many wait ahead of it (before the
        worker can take it); ServerBusy, saying to retry in ``retry_after()`` seconds, when the line is full."""
        with self._changed:
            self._drop_cancelled()
            if len(self._jobs) >= self.limit:
                raise ServerBusy(len(self._jobs), retry_after())
            announce(len(self._jobs))
            self._jobs.append(job)
            self._changed.notify()

    def get(self) -> AnswerJob:
        """The oldest question still wanted; blocks until there is one."""
        with self._changed:
            while True:
                self._drop_cancelled()
                if self._jobs:
                    return self._jobs.popleft()
                self._changed.wait(timeout=1.0)  # a cancel does not notify: look again now and then

    def __len__(self) -> int:
        with self._changed:
            self._drop_cancelled()
            return len(self._jobs)


async def client_gone(request: Request) -> None:
    """Returns when the client of ``request`` hangs up. Its body must have been read already: after the
    body, the server's next message is the disconnect."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def answer_unless_gone(job: AnswerJob, request: Request) -> dict | None:
    """The answer's JSON for a request that waits for the whole answer; None, with the question cancelled
    (so it is never answered, or the model stops), when its client hangs up first."""
    answer = asyncio.ensure_future(job.result())
    gone = asyncio.ensure_future(client_gone(request))
    await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
    if answer.done():
        gone.cancel()
        return answer.result()
    job.cancelled.set()
    answer.cancel()
    log.info("Cancelled a question: its client hung up before the answer")
    return None


class AnswerWorker:
    """Answers queued questions one at a time in a background thread, each by the model it names, else
    by the settings' default (loaded first). /api/health's report of the default is kept here."""

    def __init__(self, library: Library):
        self.library = library
        self.default_id: str | None = None  # the settings' choice, once loaded
        self.model_label: str | None = None  # its label
        self.model_error: str | None = None  # why it cannot answer, when it cannot
        self.answering: str | None = None  # the choice id of the model writing an answer now
        self.waiting = WaitingQuestions(config.API_MAX_WAITING)
        self._busy = False
        self._seconds: deque[float] = deque(maxlen=20)  # how long the last answers took, for Retry-After
        self.answered = self.failed = self.stopped = 0  # questions answered, failed, stopped as their client left
        threading.Thread(target=self._work, name="answer-worker", daemon=True).start()

    def submit(self, job: AnswerJob) -> None:
        """Queue ``job`` and tell it how many questions are ahead; ServerBusy when the line is full."""
        self.waiting.put(job, self.retry_after, lambda ahead: job.emit("queued", {"ahead": ahead + int(self._busy)}))

    def questions_json(self) -> dict:
        """What /api/health says of the questions: waiting, being answered, and how those that ended did."""
        return {"waiting": len(self.waiting), "answering": self._busy, "limit": self.waiting.limit, "answered": self.answered,
                "failed": self.failed, "stopped_when_client_left": self.stopped, "left_the_line": self.waiting.dropped}

    def retry_after(self) -> int:
        """Seconds until a place in the line is likely free: the median time of the last answers (at least 1)."""
        return max(1, math.ceil(statistics.median(self._seconds))) if self._seconds else 30

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
            job = self.waiting.get()
            self._busy, started = True, time.monotonic()
            try:
                self._answer(job)
            finally:
                self._busy, self.answering = False, None
                self._seconds.append(time.monotonic() - started)

    def _answer(self, job: AnswerJob) -> None:
        q = job.question
        try:
            job.model_id, llm = self.chat_model(q.model)
            llm = models.cancellable(llm, job.cancelled)  # a client that leaves stops the model, even mid-prompt
            self.answering = job.model_id
            stream = qa.ask(q.text, self.library.retriever, llm=llm, history=q.history, scope=q.scope, k=q.k)
            job.emit("evidence", qa.evidence_json(stream.evidence))  # found before any model call: show it while the model works
            if job.cancelled.is_set():  # gone while the search ran: the model is not asked
                log.info("Not answering: the client went away before the model was asked")
                self.stopped += 1
                return
            with closing(iter(stream)) as pieces:  # closing releases the model at once when the client hung up
                for piece in pieces:
                    if job.cancelled.is_set():
                        log.info("Stopped answering: the client went away")
                        self.stopped += 1
                        return
                    if piece:
                        job.emit("token", {"text": piece})
            answer = answer_json(stream.result, job.model_id)
            if q.conversation:  # kept before the client hears of it: a GET after the answer finds it
                answer["conversation"] = save_exchange(q, stream, job.model_id)
            job.emit("answer", answer)
            self.answered += 1
        except models.ReplyCancelled:
            log.info("Stopped answering: the client went away")
            self.stopped += 1
        except Exception as err:  # any failure becomes the request's error event; the worker goes on
            status, message = status_and_message(err)
            log.warning("Answering with %s failed: %s", job.model_id or "the default model", message)
            job.emit("error", {"status": status, "message": message})
            self.failed += 1


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
    raise ApiError(400, f"There is no model '{choice}' to answer with. The models that can answer now: {ids}.", "model_not_found", "model")


def check_question_length(question: str, history: list[tuple[str, str]], model: str | None = None) -> None:
    """A 400 (context_length_exceeded) before a question is queued when it, with the asker's instructions (an
    OpenAI client's system messages), cannot fit the context of the model that would answer beside what an answer
    needs (reading.fitted_history). Counted by that model when it is loaded; else estimated low (6 characters a token),
    so only a sure overflow is refused here, and the answer worker, counting exactly, refuses the rest the same
    way. A merely long history is never refused: the worker keeps its latest turns that fit."""
    try:
        choice = model or models.default_choice()
    except models.ModelUnavailableError:
        return  # no model to answer: the worker says why
    llm = models.loaded_chat_model(choice)
    on_server = choice.startswith("openai:")
    if llm is not None:
        n_ctx, setting = models.context_length(llm), models.context_setting(llm)

        def count(text: str) -> int:
            return models.count_tokens(llm, text)
    elif on_server and config.OPENAI_CONTEXT <= 0:
        return  # a server model not loaded yet: its context is not known until it is
    else:
        n_ctx, setting = (config.OPENAI_CONTEXT, "OPENAI_CONTEXT") if on_server else (config.LLM_N_CTX, "LLM_N_CTX")

        def count(text: str) -> int:
            return len(text) // 6
    instructions, _ = reading.client_instructions(history)
    try:
        reading.fitted_history(question, instructions, [], n_ctx, count, setting)
    except reading.QuestionTooLong as err:
        raise ApiError(400, too_long(str(err))) from err
    except models.ModelUnavailableError as err:  # the tokenizer failed: the worker will say so with the answer
        log.warning("The question's length was not checked before queueing: %s", err)


async def queue_question(
    lib: Library, question: str, history: list[tuple[str, str]], documents: list[str] | None, k: int | None, model: str | None = None,
    conversation: str | None = None,
) -> AnswerJob:
    """Check the question, the model it names and its scope, then put it in the answer queue."""
    if not question.strip():
        raise ApiError(400, "The question is empty.")
    if model:
        model = await asyncio.to_thread(check_model, model)  # probes model servers: keep the event loop free
    await asyncio.to_thread(check_question_length, question, history, model)  # too long for the model: a 400, never queued
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
