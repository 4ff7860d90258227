"""Conversations that last (conversations.py): real SQLite files on disk beside a real store, real
answers of the small embedded model to questions about a real ingested PDF; then the same through the
HTTP API (a real Uvicorn process, as in test_api.py): list, create, read, rename, export, delete, and
/api/ask keeping its question and answer in a conversation."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import httpx
import pytest

from evaluation import bench
import config
import conversations
import ingest
import qa
from checker import CheckedSentence, Citation
from conftest import shown
from records import Hit
from retriever import Retriever
from safe_text import md
from test_api import error_of, sse_events, start_server, upload_and_wait

QUESTION = "When did the railway reach the town?"
ANSWER_LINE = "The railway reached the town in 1889."  # page 3 of facts.pdf


def ask(retriever: Retriever, llm, question: str, history: list[tuple[str, str]] | None = None) -> dict:
    """A real answer, as the app keeps it: the message with its Answer and evidence lines."""
    stream = qa.ask(question, retriever, llm=llm, history=history or [])
    for _ in stream:
        pass
    return {"role": "assistant", "content": stream.result.text, "answer": stream.result, "evidence": stream.evidence}


@pytest.fixture
def facts(store, embedder, three_page_pdf) -> Retriever:
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    return Retriever(store, embedder)


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def holding(folder: Path, text: str) -> list[Path]:
    """Every file under ``folder`` whose bytes hold ``text`` (UTF-8, or UTF-16 as some formats write)."""
    needles = [text.encode(), text.encode("utf-16-le")]
    return [p for p in files_under(folder) if any(n in p.read_bytes() for n in needles)]


def test_a_real_answer_is_kept_whole_and_read_back_as_it_was(facts, llm):
    reply = ask(facts, llm, QUESTION)
    answer = reply["answer"]
    assert "1889" in answer.text and answer.sources and answer.sentences and reply["evidence"]
    conversation = conversations.create()
    conversations.append(conversation.id, {"role": "user", "content": QUESTION}, reply)

    path = Path(config.CHROMA_PERSIST_DIR) / "conversations.sqlite3"
    assert conversations.db_path() == path and path.exists()  # beside the store
    assert path.stat().st_mode & 0o077 == 0  # readable by its owner only
    kept = conversations.get(conversation.id)
    assert kept.title == QUESTION and kept.count == 2
    user, back = kept.messages
    assert user == {"role": "user", "content": QUESTION}
    assert back["answer"] == answer and back["evidence"] == reply["evidence"]  # every field, nested ones too
    assert back["content"] == answer.text
    assert all(isinstance(h, Hit) for h in back["answer"].sources + back["evidence"])
    assert all(isinstance(s, CheckedSentence) and all(isinstance(c, Citation) for c in s.citations) for s in back["answer"].sentences)
    assert back["answer"].citations == answer.citations and back["answer"].confidence == answer.confidence
    assert [(h.collection, h.page, h.start, h.end) for h in back["answer"].sources] == [(h.collection, h.page, h.start, h.end) for h in answer.sources]
    assert ANSWER_LINE in [h.text for h in back["evidence"]] and back["answer"].model == answer.model

    with sqlite3.connect(path) as db:  # plain JSON in the file, nothing pickled
        bodies = [json.loads(body) for (body,) in db.execute("SELECT body FROM messages ORDER BY seq")]
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert bodies[1]["answer"]["sources"][0]["doc_name"] == "facts.pdf" and bodies[1]["format"] == conversations.FORMAT

    follow_up = ask(facts, llm, "And how long did the trains take?", conversations.history(kept.messages))
    conversations.append(conversation.id, {"role": "user", "content": "And how long did the trains take?"}, follow_up)
    assert [m["role"] for m in conversations.get(conversation.id).messages] == ["user", "assistant"] * 2
    assert conversations.get("no-such-id") is None


def test_conversations_are_listed_latest_first_renamed_and_titled_by_their_first_question(store):
    older, newer = conversations.create(), conversations.create("Named at the start")
    assert [c.id for c in conversations.list_conversations()] == [newer.id, older.id]
    conversations.append(older.id, {"role": "user", "content": "  Who kept\nthe lighthouse?  "}, {"role": "assistant", "content": "", "error": "Down."})
    listed = conversations.list_conversations()
    assert [c.id for c in listed] == [older.id, newer.id] and listed[0].title == "Who kept the lighthouse?" and listed[0].count == 2
    conversations.append(newer.id, {"role": "user", "content": "A question"})
    assert conversations.get(newer.id).title == "Named at the start"  # a title given is kept
    assert conversations.history(conversations.get(older.id).messages) == [("user", "  Who kept\nthe lighthouse?  ")]  # no failed answer

    renamed = conversations.rename(older.id, "Lighthouse " * 20)
    assert renamed.title == ("Lighthouse " * 20)[:79].rstrip() + "…" and len(renamed.title) <= conversations.TITLE_CHARS
    assert conversations.list_conversations()[0].id == older.id
    with pytest.raises(ValueError):
        conversations.rename(older.id, "   ")
    with pytest.raises(conversations.ConversationNotFound):
        conversations.rename("gone", "Title")
    with pytest.raises(conversations.ConversationNotFound):
        conversations.append("gone", {"role": "user", "content": "Hello"})
    assert conversations.delete("gone") is False
    with pytest.raises(conversations.ConversationStoreError, match="could not be saved"):  # said, not a crash
        conversations.append(newer.id, {"role": "user", "content": "Hi", "extra": object()})
    assert conversations.get(newer.id).count == 1


def test_a_deleted_conversation_leaves_no_byte_of_its_text_under_the_store_folder(facts, llm):
    asked, renamed, kept = "zq7vexmarker", "Renamed-wq4pymarker", "keep-ju8rnmarker"
    other = conversations.create()
    conversations.append(other.id, {"role": "user", "content": f"Who kept the lighthouse? {kept}"})
    doomed = conversations.create()
    question = f"When did the railway reach the town? {asked}"
    conversations.append(doomed.id, {"role": "user", "content": question}, ask(facts, llm, question))
    conversations.rename(doomed.id, f"First title {renamed}")
    conversations.rename(doomed.id, f"Second title {renamed}2")
    folder = Path(config.CHROMA_PERSIST_DIR)
    assert holding(folder, asked) == [conversations.db_path()] and holding(folder, renamed + "2")  # the search finds them

    assert conversations.delete(doomed.id) is True
    assert conversations.get(doomed.id) is None
    assert holding(folder, asked) == [] and holding(folder, renamed) == [] and holding(folder, doomed.id) == []
    assert holding(folder, kept) == [conversations.db_path()]  # the other conversation is still there, whole
    assert not [p for p in files_under(folder) if p.name.endswith(("-journal", "-wal", "-shm"))]
    assert [c.id for c in conversations.list_conversations()] == [other.id]


def test_the_markdown_export_has_each_answer_with_its_document_page_passage_and_evidence_lines(facts, llm, store):
    reply = ask(facts, llm, QUESTION)
    conversation = conversations.create()
    hostile = 'Is it ![x](http://127.0.0.1:9/leak) or <img src="http://127.0.0.1:9/y">?'
    conversations.append(conversation.id, {"role": "user", "content": QUESTION}, reply,
                         {"role": "user", "content": hostile}, {"role": "assistant", "content": "", "error": "The model is down."})
    kept = conversations.get(conversation.id)
    library = {d["collection"] for d in ingest.list_documents(store)}
    markdown = conversations.export_markdown(kept, library)
    text = shown(markdown)
    assert markdown.startswith(f"# {md(QUESTION)}\n") and f"## 1. {md(QUESTION)}" in markdown
    assert f"**Answer:** {md(reply['content'])}" in markdown
    citation = next(c for c in reply["answer"].citations if c.page == 3)
    assert f"[L{citation.number}] facts.pdf, page 3 (backed by the page" in text  # the line's marker, document and page
    assert "> The railway reached the town in 1889." in text  # the cited line
    assert f"> {ANSWER_LINE}" in text and "— *facts.pdf, page 3*" in text  # the evidence lines
    assert "removed from the library" not in text
    assert f"## 2. {md(hostile)}" in markdown and not re.search(r"(?<!\\)[<!\[]", markdown)  # every < ! [ escaped: text, nothing live
    assert "**Not answered:** The model is down." in text
    marked = shown(conversations.export_markdown(kept, library=set()))
    assert "facts.pdf, page 3 (removed from the library since)" in marked


# -----------------------------------------------------------------------------
# The HTTP API: a real server on its own store


@pytest.fixture(scope="module")
def api_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api-conversations")
    proc, url = start_server(folder)
    yield url, folder / "store"
    bench.stop_api_server(proc)


@pytest.fixture(scope="module")
def api(api_server):
    with httpx.Client(base_url=api_server[0], timeout=300) as client:
        yield client


@pytest.fixture(scope="module")
def facts_id(api, tmp_path_factory) -> str:
    from conftest import FACT_PAGES, write_text_pdf

    pdf = write_text_pdf(tmp_path_factory.mktemp("pdfs") / "facts.pdf", FACT_PAGES)
    final, _ = upload_and_wait(api, pdf)
    assert final["state"] == "done", final
    return final["document_id"]


@pytest.mark.slow  # starts another process
def test_the_api_keeps_a_conversation_through_ask_and_shows_lists_renames_exports_and_deletes_it(api, api_server, facts_id):
    assert api.get("/api/conversations").json() == {"conversations": []}
    created = api.post("/api/conversations")
    assert created.status_code == 201
    conversation = created.json()
    assert conversation["title"] == "" and conversation["message_count"] == 0 and conversation["created"].endswith("Z")
    cid = conversation["id"]

    answer = api.post("/api/ask", json={"question": QUESTION, "conversation": cid}).json()
    assert answer["conversation"] == cid and "1889" in answer["answer"]
    with api.stream("POST", "/api/ask", json={"question": "And how long did the trains take?", "conversation": cid, "stream": True}) as response:
        events = list(sse_events(response))
    follow_up = events[-1]
    assert follow_up[0] == "answer" and follow_up[1]["conversation"] == cid
    assert follow_up[1]["rewritten_query"]  # the conversation's turns were its history

    kept = api.get(f"/api/conversations/{cid}").json()
    assert kept["title"] == QUESTION and kept["message_count"] == 4
    assert [(m["role"], m["content"]) for m in kept["messages"][::2]] == [("user", QUESTION), ("user", "And how long did the trains take?")]
    first = kept["messages"][1]
    assert first["content"] == answer["answer"] and first["answer"]["citations"] == answer["citations"]  # as /api/ask gave it
    assert first["answer"]["sources"] == answer["sources"] and first["evidence"] == answer["evidence"]
    assert first["answer"]["model_id"] == answer["model_id"] and any(e["text"] == ANSWER_LINE for e in first["evidence"])

    other = api.post("/api/conversations", json={"title": "Bees"}).json()
    assert [c["id"] for c in api.get("/api/conversations").json()["conversations"]] == [other["id"], cid]
    renamed = api.patch(f"/api/conversations/{cid}", json={"title": "Railway notes"}).json()
    assert renamed["title"] == "Railway notes" and renamed["id"] == cid
    assert [c["id"] for c in api.get("/api/conversations").json()["conversations"]] == [cid, other["id"]]

    export = api.get(f"/api/conversations/{cid}/export")
    assert export.status_code == 200 and export.headers["content-type"] == "text/markdown; charset=utf-8"
    assert export.headers["content-disposition"] == 'attachment; filename="Railway-notes.md"'
    text = shown(export.text)
    assert text.startswith("# Railway notes") and "facts.pdf, page 3" in text and f"> {ANSWER_LINE}" in text
    assert re.search(r"\[L\d+\] facts\.pdf, page 3 \(backed by the page", text)  # the cited line's marker, document and page

    store = api_server[1]
    assert holding(store, "Railway notes") and holding(store, "how long did the trains take")
    assert api.delete(f"/api/conversations/{cid}").status_code == 204
    assert holding(store, "Railway notes") == [] and holding(store, "how long did the trains take") == []
    assert holding(store, cid) == []
    assert [c["id"] for c in api.get("/api/conversations").json()["conversations"]] == [other["id"]]

    missing = f"There is no conversation '{cid}' (it may have been deleted)."
    assert error_of(api.get(f"/api/conversations/{cid}")) == (404, missing)
    assert error_of(api.get(f"/api/conversations/{cid}/export")) == (404, missing)
    assert error_of(api.patch(f"/api/conversations/{cid}", json={"title": "x"})) == (404, missing)
    assert error_of(api.delete(f"/api/conversations/{cid}")) == (404, missing)
    assert error_of(api.post("/api/ask", json={"question": QUESTION, "conversation": cid})) == (404, missing)
    assert error_of(api.patch(f"/api/conversations/{other['id']}", json={"title": "  "})) == (400, "The title is empty.")
    paths = api.get("/openapi.json").json()["paths"]
    assert {"/api/conversations", "/api/conversations/{conversation_id}", "/api/conversations/{conversation_id}/export"} <= set(paths)
