"""The questions of a conversation answered in turn on a worker thread (answering.py): a question asked while
another is being answered waits and is answered after it, with that answer in its history; every question and
every answer is saved, in the order asked; nothing the page does stops an answer."""

from __future__ import annotations

import threading

import answering


class Saved:
    """A save function that records what it is given (or says a problem for every message)."""

    def __init__(self, problem: str | None = None):
        self.messages: list[tuple[str, dict]] = []
        self.problem = problem

    def __call__(self, conversation_id: str, message: dict) -> str | None:
        self.messages.append((conversation_id, message))
        return self.problem


def held_work(release: threading.Event, started: list, histories: list):
    """Work that says its stages, writes its text, and waits for ``release`` before it ends."""

    def work(question, history, progress):
        started.append(question)
        histories.append(history)
        progress.say("Writing…")
        progress.text = f"Answer to {question}"
        assert release.wait(timeout=30)
        return {"role": "assistant", "content": f"Answer to {question}"}

    return work


def test_a_question_asked_while_another_is_answered_waits_and_is_answered_after_it_with_it_in_its_history():
    release, started, histories, saved = threading.Event(), [], [], Saved()
    messages = [{"role": "user", "content": "Q0"}, {"role": "assistant", "content": "A0"}]
    work = held_work(release, started, histories)
    job = answering.ask("conv-queue", messages, "Q1", work, saved)
    while not started:
        threading.Event().wait(0.01)
    assert answering.ask("conv-queue", [], "Q2", work, saved) is job  # the same worker: queued behind Q1
    shown, current, waiting, busy = job.state()
    assert busy and waiting == ["Q2"] and started == ["Q1"]
    assert current.index == 2 and current.stage == "Writing…" and current.text == "Answer to Q1"
    assert [m["content"] for m in shown] == ["Q0", "A0", "Q1"]  # the question is in the chat, its answer not yet
    assert saved.messages == [("conv-queue", {"role": "user", "content": "Q1"})]  # saved at once

    release.set()
    assert job.wait(timeout=30)
    assert [m["content"] for m in messages] == ["Q0", "A0", "Q1", "Answer to Q1", "Q2", "Answer to Q2"]  # the page's own list
    assert [m["content"] for _, m in saved.messages] == ["Q1", "Answer to Q1", "Q2", "Answer to Q2"]  # saved in the order asked
    assert histories[1][-2:] == [("user", "Q1"), ("assistant", "Answer to Q1")]  # the answer before it is in its history
    assert answering.running("conv-queue") is None  # done: the next question starts a worker of its own


def test_a_page_that_stops_watching_stops_nothing():
    """The watching page's run is stopped (a rerun, a reload, a closed tab): the worker goes on, and saves."""
    release, started, saved = threading.Event(), [], Saved()
    job = answering.ask("conv-alone", [], "Q1", held_work(release, started, []), saved)
    assert answering.running("conv-alone") is job  # what a reload finds, to watch again
    release.set()
    assert job.wait(timeout=30)
    assert [m["content"] for _, m in saved.messages] == ["Q1", "Answer to Q1"]


def test_work_that_fails_leaves_an_error_reply_and_the_next_question_is_answered():
    saved = Saved()

    def work(question, history, progress):
        if question == "bad":
            raise RuntimeError("the model went away")
        return {"role": "assistant", "content": f"Answer to {question}"}

    job = answering.ask("conv-fail", [], "bad", work, saved)
    job.submit("good", work)
    assert job.wait(timeout=30)
    replies = [m for _, m in saved.messages if m["role"] == "assistant"]
    assert "the model went away" in replies[0]["error"] and replies[1]["content"] == "Answer to good"


def test_a_message_that_cannot_be_saved_is_said_once_and_the_answers_go_on():
    saved = Saved(problem="The disk is full.")
    job = answering.ask("conv-full", [], "Q1", lambda q, h, p: {"role": "assistant", "content": "A1"}, saved)
    assert job.wait(timeout=30)
    assert job.take_problems() == ["The disk is full.", "The disk is full."] and job.take_problems() == []
    assert [m["content"] for m in job.messages] == ["Q1", "A1"]
