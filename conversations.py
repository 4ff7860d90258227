"""Conversations that last: every question and answer, with its citations, kept on this machine.

The chat used to live in the browser session only, so a reload, a restart or a closed tab lost
it. Now each conversation is a row of a small SQLite file beside the store (CONVERSATIONS_DB,
by default CHROMA_PERSIST_DIR/conversations.sqlite3; also with CHROMA_HOST, since a shared
store keeps no one's chats), and each of its messages a row holding the message as JSON:

    app.py / api.py                          conversations.py                     SQLite file
    a question      -> {"role": "user", "content": ...}  -> message_to_dict -> json -> messages row
    its answer      -> {"role": "assistant", "content", "answer": qa.Answer,
                        "evidence": [Hit], "error"?, "model_id"?}
                       (the same dict the app keeps in st.session_state and replays)
    reload/restart  <- get(id): rows -> json -> message_from_dict -> the same dicts, with
                       qa.Answer, Hit, CheckedSentence and Citation objects again
    export          <- export_markdown(): the answers as Markdown, with each citation's document,
                       page and passage, and the evidence lines

Everything the app shows again is stored: the text, an error, the evidence lines, and the whole
Answer (its sources with their page offsets and OCR boxes for the highlight, the checked
sentences with their citations, confidence, refusal, rewritten query, the model that wrote it).
The dataclasses are written field by field as plain JSON (``*_to_dict`` / ``*_from_dict``), never
pickled: the file holds text that can be read back by any version, and reading it runs no code.
A field a later version adds is taken when present and left at its default when not.

Deleting is for good: ``PRAGMA secure_delete=ON`` overwrites the deleted rows with zeros, the
rollback journal (journal_mode=DELETE, not WAL, whose file keeps old pages) is removed after
each write, and the file is VACUUMed after a delete, so no byte of a deleted conversation stays
anywhere under the store folder. The file is created readable by its owner only.

Deliberately simple: one connection per call (a few hundred microseconds; safe from Streamlit's
and the API's threads alike), listing newest first by the last message, and no search.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path

import config
import qa
from checker import CheckedSentence, Citation, backing_summary, marker
from records import Hit
from safe_text import md

log = logging.getLogger(__name__)

TITLE_CHARS = 80  # a title longer than this (the first question, a rename) is cut, with "…"
FORMAT = 1  # written into every stored message, for a later version reading an older file

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY,
    conversation TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    body TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_of ON messages (conversation, seq);
"""


class ConversationNotFound(LookupError):
    """There is no conversation with that id (never was, or it was deleted)."""


class ConversationStoreError(RuntimeError):
    """The conversations file cannot be read or written; the message says which file and why."""


@dataclass
class Conversation:
    id: str
    title: str  # the first question unless renamed; "" until the first question
    created: float  # seconds since the epoch
    updated: float  # the last message (or rename)
    messages: list[dict] = field(default_factory=list)  # the app's message dicts, oldest first (get() only)
    count: int = 0  # how many messages it has, also when they are not loaded (list_conversations)


# -----------------------------------------------------------------------------
# The dataclasses as plain JSON, field by field


def _plain(value):
    """``value`` as JSON can hold it: numpy numbers (the retriever's scores) become Python ones."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    if hasattr(value, "tolist"):  # numpy array
        return value.tolist()
    raise TypeError(f"{type(value).__name__} cannot be stored in a conversation")


def _known(cls, data: dict) -> dict:
    """The entries of ``data`` that are fields of ``cls`` (a newer file may hold more)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def hit_to_dict(hit: Hit) -> dict:
    return {f.name: _plain(getattr(hit, f.name)) for f in fields(Hit)}


def hit_from_dict(data: dict) -> Hit:
    return Hit(**_known(Hit, data))


def citation_to_dict(citation: Citation) -> dict:
    return {f.name: _plain(getattr(citation, f.name)) for f in fields(Citation)}


def citation_from_dict(data: dict) -> Citation:
    return Citation(**_known(Citation, data))


def sentence_to_dict(sentence: CheckedSentence) -> dict:
    body = {f.name: _plain(getattr(sentence, f.name)) for f in fields(CheckedSentence) if f.name != "citations"}
    return {**body, "citations": [citation_to_dict(c) for c in sentence.citations]}


def sentence_from_dict(data: dict) -> CheckedSentence:
    body = _known(CheckedSentence, data)
    body["citations"] = [citation_from_dict(c) for c in data.get("citations", [])]
    return CheckedSentence(**body)


_ANSWER_LISTS = {  # the Answer fields that hold dataclasses: (to, from)
    "sentences": (sentence_to_dict, sentence_from_dict),
    "sources": (hit_to_dict, hit_from_dict),
    "evidence": (hit_to_dict, hit_from_dict),
}


def answer_to_dict(answer: qa.Answer) -> dict:
    """Every field of the Answer: the checked sentences and their citations, the sources and evidence
    lines as Hits (offsets, OCR boxes, trace), and the plain fields (confidence, refused, model...)."""
    out = {}
    for f in fields(qa.Answer):
        value = getattr(answer, f.name)
        out[f.name] = [_ANSWER_LISTS[f.name][0](v) for v in value] if f.name in _ANSWER_LISTS else _plain(value)
    return out


def answer_from_dict(data: dict) -> qa.Answer:
    body = _known(qa.Answer, data)
    for name, (_, from_dict) in _ANSWER_LISTS.items():
        if name in body:
            body[name] = [from_dict(v) for v in body[name]]
    return qa.Answer(**body)


def message_to_dict(message: dict) -> dict:
    """An app message as JSON: {"role", "content", "error"?, "evidence": [Hit], "answer": Answer, ...}."""
    out = {"format": FORMAT}
    for key, value in message.items():
        if key == "answer":
            out[key] = answer_to_dict(value)
        elif key == "evidence":
            out[key] = [hit_to_dict(h) for h in value]
        else:
            out[key] = _plain(value)
    return out


def message_from_dict(data: dict) -> dict:
    message = {k: v for k, v in data.items() if k != "format"}
    if "answer" in message:
        message["answer"] = answer_from_dict(message["answer"])
    if "evidence" in message:
        message["evidence"] = [hit_from_dict(h) for h in message["evidence"]]
    return message


def history(messages: list[dict]) -> list[tuple[str, str]]:
    """The turns a follow-up question is asked with: every message but the failed answers."""
    return [(m["role"], m["content"]) for m in messages if not m.get("error")]


# -----------------------------------------------------------------------------
# The SQLite file


def db_path() -> Path:
    return Path(config.CONVERSATIONS_DB or Path(config.CHROMA_PERSIST_DIR) / "conversations.sqlite3")


@contextmanager
def _db(path: Path | None = None) -> Iterator[sqlite3.Connection]:
    """A connection to the conversations file (made, owner-only, when missing); any failure of the
    file becomes a ConversationStoreError naming it. Statements run in autocommit mode unless
    wrapped in ``_write``."""
    path = Path(path or db_path())
    try:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # SQLite gives its journal the same mode
        with closing(sqlite3.connect(path, timeout=30, isolation_level=None)) as db:
            db.execute("PRAGMA journal_mode=DELETE")  # not WAL: its file can keep the pages of deleted rows
            db.execute("PRAGMA secure_delete=ON")  # deleted rows are overwritten with zeros
            db.execute("PRAGMA foreign_keys=ON")
            db.executescript(_SCHEMA)
            yield db
    except sqlite3.Error as err:
        raise ConversationStoreError(f"The conversations file {path} could not be read or written ({err}).") from err
    except OSError as err:
        if config.is_link_loop(path):  # the system's word for it, "Too many levels of symbolic links", hides the loop
            raise ConversationStoreError(f"The conversations file {path} is a symbolic link loop, not a file.") from err
        raise ConversationStoreError(f"The conversations file {path} could not be opened ({err.strerror or err}).") from err


@contextmanager
def _write(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One transaction, taken at once (no other writer can slip in between its reads and writes)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def clean_title(text: str) -> str:
    """One line of at most TITLE_CHARS characters: clean_title("  When did\\n the railway come?") -> "When did the railway come?" """
    line = " ".join(str(text).split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


def _conversation(row) -> Conversation:
    return Conversation(id=row[0], title=row[1], created=row[2], updated=row[3], count=row[4])


_SUMMARY = "SELECT c.id, c.title, c.created, c.updated, (SELECT COUNT(*) FROM messages m WHERE m.conversation = c.id) FROM conversations c"


def create(title: str = "", path: Path | None = None) -> Conversation:
    """A new, empty conversation; without a title its first question becomes its title."""
    now = time.time()
    conversation = Conversation(id=uuid.uuid4().hex, title=clean_title(title), created=now, updated=now)
    with _db(path) as db:
        db.execute("INSERT INTO conversations (id, title, created, updated) VALUES (?, ?, ?, ?)",
                   (conversation.id, conversation.title, now, now))
    log.info("Conversation %s created", conversation.id)
    return conversation


def list_conversations(path: Path | None = None) -> list[Conversation]:
    """Every conversation without its messages (``count`` says how many), the latest active first."""
    with _db(path) as db:
        rows = db.execute(f"{_SUMMARY} ORDER BY c.updated DESC, c.created DESC").fetchall()
    return [_conversation(r) for r in rows]


def get(conversation_id: str, path: Path | None = None) -> Conversation | None:
    """The conversation with its messages (the app's dicts, oldest first); None when there is none."""
    with _db(path) as db:
        row = db.execute(f"{_SUMMARY} WHERE c.id = ?", (conversation_id,)).fetchone()
        if row is None:
            return None
        bodies = db.execute("SELECT body FROM messages WHERE conversation = ? ORDER BY seq", (conversation_id,)).fetchall()
    conversation = _conversation(row)
    conversation.messages = [message_from_dict(json.loads(body)) for (body,) in bodies]
    return conversation


def append(conversation_id: str, *messages: dict, path: Path | None = None) -> None:
    """Add ``messages`` (app message dicts) at the end, in one transaction; the first question
    becomes the title of a conversation that has none. ConversationNotFound when it is gone."""
    try:  # before the lock
        bodies = [json.dumps(message_to_dict(m), ensure_ascii=False) for m in messages]
    except (TypeError, ValueError) as err:  # a field no JSON can hold: say so, as for a file that cannot be written
        raise ConversationStoreError(f"A message could not be saved: {err}.") from err
    now = time.time()
    with _db(path) as db, _write(db):
        found = db.execute("SELECT title FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        if found is None:
            raise ConversationNotFound(conversation_id)
        title = found[0]
        for message, body in zip(messages, bodies):
            db.execute("INSERT INTO messages (conversation, role, body, created) VALUES (?, ?, ?, ?)",
                       (conversation_id, message["role"], body, now))
            if not title and message["role"] == "user" and message.get("content", "").strip():
                title = clean_title(message["content"])
        db.execute("UPDATE conversations SET title = ?, updated = ? WHERE id = ?", (title, now, conversation_id))


def rename(conversation_id: str, title: str, path: Path | None = None) -> Conversation:
    """Give a conversation a new title (ValueError when it is empty); ConversationNotFound when it is gone."""
    title = clean_title(title)
    if not title:
        raise ValueError("The title is empty.")
    with _db(path) as db:
        if db.execute("UPDATE conversations SET title = ?, updated = ? WHERE id = ?", (title, time.time(), conversation_id)).rowcount == 0:
            raise ConversationNotFound(conversation_id)
        row = db.execute(f"{_SUMMARY} WHERE c.id = ?", (conversation_id,)).fetchone()
    return _conversation(row)


def delete(conversation_id: str, path: Path | None = None) -> bool:
    """Remove a conversation and its messages so that none of it can be read back from the file
    (see the module docstring); False when there was none."""
    with _db(path) as db:
        with _write(db):
            db.execute("DELETE FROM messages WHERE conversation = ?", (conversation_id,))
            deleted = db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,)).rowcount > 0
        if deleted:
            try:
                db.execute("VACUUM")  # rewrites the file without the freed pages (secure_delete has zeroed them already)
            except sqlite3.OperationalError as err:  # another reader holds the file: it is compacted after a later delete
                log.warning("Conversations file not compacted after a delete: %s", err)
    log.info("Conversation %s %s", conversation_id, "deleted" if deleted else "was not there to delete")
    return deleted


# -----------------------------------------------------------------------------
# Markdown export


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))


def _quote(text: str) -> str:
    """``text`` as a Markdown block quote showing exactly that text, line for line."""
    return "\n".join(f"> {md(line)}  " if line.strip() else ">" for line in str(text).strip().split("\n"))


def _excerpt(text: str, limit: int = 400) -> str:
    """The passage's first whole lines within about ``limit`` characters (at least one line)."""
    kept = []
    for line in text.strip().split("\n"):
        if kept and len("\n".join(kept + [line])) > limit:
            return "\n".join(kept) + "\n…"
        kept.append(line)
    return "\n".join(kept)


def _place(doc_name: str, page: int, collection: str, library: set[str] | None) -> str:
    removed = library is not None and collection not in library
    return f"{md(doc_name)}, page {page}" + (" (removed from the library since)" if removed else "")


def _answer_markdown(message: dict, library: set[str] | None) -> list[str]:
    out = []
    lines: list[Hit] = message.get("evidence") or []
    if lines:
        out.append("**What your documents say**")
        for line in lines:
            out.append(f"{_quote(line.text)}\n>\n> — *{_place(line.doc_name, line.page, line.collection, library)}*")
    if message.get("error"):
        out.append(f"**Not answered:** {md(message['error'])}")
        return out
    out.append(f"**Answer:** {md(message.get('content', ''))}")
    answer: qa.Answer | None = message.get("answer")
    if answer is None:
        return out
    citations = answer.citations
    for number, citation in enumerate(citations):
        check = "backed by the page" if citation.verified else "not backed by the page"
        if citation.inferred:
            check += ", inferred"
        cited = f"- {md(marker(citation.number, answer.reads_lines))} {_place(citation.doc_name, citation.page, citation.collection, library)} ({check})"
        hit = answer.cited(citation) if 1 <= citation.number <= len(answer.sources) else None
        if hit is not None:
            cited += "\n\n" + "\n".join("  " + q for q in _quote(_excerpt(hit.text)).split("\n"))
        out.append(("**Sources**\n\n" if number == 0 else "") + cited)
    unsupported = [s.text for s in answer.sentences if s.supported is False]
    if unsupported:
        out.append("**Not backed by any page:**\n\n" + "\n".join(f"- {md(s)}" for s in unsupported))
    notes = []
    if summary := backing_summary(answer.sentences, answer.citations, answer.reads_lines):
        notes.append(md(summary))
    if answer.rewritten_query:
        notes.append(f"Searched for: {md(answer.rewritten_query)}")
    if answer.model:
        notes.append(f"Written by {md(answer.model)}")
    if notes:
        out.append("*" + " · ".join(notes) + "*")
    return out


def export_markdown(conversation: Conversation, library: set[str] | None = None) -> str:
    """The conversation as a Markdown document: each question, then the evidence lines, the answer,
    and each citation with its document, page and the passage it points to. ``library``: the
    document ids still in the library, so that citations of removed ones say so (None: not marked).

    Every text from a PDF, a model or a person is escaped (``safe_text.md``): opened in any Markdown
    viewer it shows as that text, and no image, link or HTML in it does anything.
    """
    parts = [f"# {md(conversation.title or 'Conversation')}",
             f"*Started {_when(conversation.created)} · last message {_when(conversation.updated)} · "
             f"exported {_when(time.time())} from Chat with your PDFs*"]
    question = 0
    for message in conversation.messages:
        if message["role"] == "user":
            question += 1
            parts.append(f"## {question}. {md(' '.join(message['content'].split()))}")
        else:
            parts.extend(_answer_markdown(message, library))
    return "\n\n".join(parts) + "\n"
