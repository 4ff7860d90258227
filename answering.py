"""A conversation's questions answered one after another on a thread of their own, which the page only watches.

Streamlit stops a script run as soon as the person does anything on the page: a question sent from the chat
box, a chip, the sidebar. An answer written inside the run was stopped with it, half-way, and lost: the
question was saved, its answer never was, and the next question took its place. So the answer is not written
in the script run. Each conversation being answered has one ``Answering``: a queue of questions and one
worker thread that answers them in the order they were asked. The script run of the page submits a question
and then watches: it draws what the worker has done so far (the stage, the evidence lines, the text) until the
queue is empty. A rerun stops the watching, never the answer; the next run watches again from where it is.

    app.py (a script run)                    answering.py (one worker per conversation)
    chat box -> ask(id, messages, question, work, save) -> queue
                                              worker: question appended to messages, saved
                                                      work(question, history, progress) -> reply
                                                      reply saved, then appended to messages
    watch: state() -> messages, Progress (stage, evidence, text so far), questions waiting

A question asked while another is being answered waits in the queue and is answered after it, with that
answer in its history (a follow-up of the answer before it reads it). Each question is saved when its turn
comes, its answer as soon as it is written, so the saved conversation holds every question followed by its
answer, in the order they were asked, whatever the page did meanwhile (reran, reloaded, closed). A question
still waiting when the app stops is not saved.

The worker never calls Streamlit: ``work`` and ``save`` are plain functions, and the page turns ``problems``
(a message that could not be saved) into notices. ``work`` turns its own failures into a reply; one that
escapes it still ends as an error reply, so no question is left without an answer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import conversations
from records import Hit

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """One question being answered, as far as it has got: what the page shows while the person waits."""

    question: str
    index: int  # the question's place in the conversation's messages; its answer comes right after it
    stage: str = ""  # what is going on: "Searching your documents…", "Writing…"
    evidence: list[Hit] = field(default_factory=list)  # the lines found, before the model says a word
    text: str = ""  # the answer so far, as it streams
    started: float = field(default_factory=time.monotonic)

    def say(self, stage: str) -> None:
        self.stage = stage

    def seconds(self) -> int:
        return int(time.monotonic() - self.started)


# work(question, history, progress) -> the assistant message; save(conversation_id, message) -> a problem or None
Work = Callable[[str, list[tuple[str, str]], Progress], dict]
Save = Callable[[str, dict], "str | None"]


class Answering:
    """The questions of one conversation, answered in turn by one worker thread (see the module docstring)."""

    def __init__(self, conversation_id: str, messages: list[dict], save: Save):
        self.conversation_id = conversation_id
        self.messages = messages  # the conversation's messages, the page's own list: the worker appends to it
        self._save = save
        self._lock = threading.Lock()
        self._queue: list[tuple[str, Work]] = []
        self._current: Progress | None = None
        self._thread: threading.Thread | None = None
        self._problems: list[str] = []

    def submit(self, question: str, work: Work) -> None:
        """Queue ``question``, answered by ``work`` when its turn comes; start the worker if it is not running."""
        with self._lock:
            self._queue.append((question, work))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"answering-{self.conversation_id[:8]}", daemon=True)
                self._thread.start()

    def state(self) -> tuple[list[dict], Progress | None, list[str], bool]:
        """A consistent view for the page: the messages so far (a copy; the question being answered is the
        last), the Progress of that question (None between two), the questions waiting, whether work remains."""
        with self._lock:
            return list(self.messages), self._current, [q for q, _ in self._queue], self._thread is not None

    def busy(self) -> bool:
        with self._lock:
            return self._thread is not None

    def take_problems(self) -> list[str]:
        """What could not be saved since the last call (said once, by the page that asks)."""
        with self._lock:
            problems, self._problems = self._problems, []
            return problems

    def wait(self, timeout: float | None = None) -> bool:
        """Until every question queued is answered (True) or ``timeout`` seconds have passed (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.busy():
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _store(self, message: dict) -> None:
        try:
            problem = self._save(self.conversation_id, message)
        except Exception as err:  # save says its own problems; anything else is said too, the answering goes on
            log.exception("A message could not be saved")
            problem = f"A message of this chat was not saved: {err}"
        if problem:
            with self._lock:
                self._problems.append(problem)

    def _run(self) -> None:
        while True:
            with _registry_lock, self._lock:  # the registry's lock first, as ask() takes them
                if not self._queue:
                    self._thread = None
                    if _running.get(self.conversation_id) is self:
                        del _running[self.conversation_id]  # the next question starts a worker of its own
                    return
                question, work = self._queue.pop(0)
                history = conversations.history(self.messages)  # with the answers before it
                asked = {"role": "user", "content": question}
                self.messages.append(asked)
                progress = self._current = Progress(question, len(self.messages) - 1)
            self._store(asked)  # at once: the question is kept even if its answer never comes
            try:
                reply = work(question, history, progress)
            except Exception as err:  # work says its failures as replies; this one escaped it
                log.exception("Answering failed")
                reply = {"role": "assistant", "content": "", "error": f"This question could not be answered: {err}"}
            self._store(reply)  # saved before it is shown as done: a reload then finds it
            with self._lock:
                self.messages.append(reply)
                self._current = None


# The conversations being answered in this process, by id: a page that opens one (a reload, another tab)
# watches the same worker and shows the same answer streaming.
_running: dict[str, Answering] = {}
_registry_lock = threading.Lock()


def running(conversation_id: str | None) -> Answering | None:
    """The conversation's worker while it has questions to answer; None when there is none."""
    if conversation_id is None:
        return None
    with _registry_lock:
        return _running.get(conversation_id)


def ask(conversation_id: str, messages: list[dict], question: str, work: Work, save: Save) -> Answering:
    """Queue ``question`` in the conversation ``conversation_id`` (whose messages are ``messages``, unless a
    worker already answers it: then its own list); it is answered after those asked before it."""
    with _registry_lock:
        answering = _running.get(conversation_id)
        if answering is None:
            answering = _running[conversation_id] = Answering(conversation_id, messages, save)
        answering.submit(question, work)
    return answering
