"""Turn PDFs into searchable ChromaDB collections, then label their pages.

The pipeline (reading the PDF itself lives in ``extract.py``):

    file -> extract.open_pdf()   (size, %PDF-, opens, not encrypted, has pages)
         -> SHA-256 -> collection "pdf_rag_<16 hex>"       (same bytes = cache hit)
         -> its language (language.py; a scan's from its first OCR'd pages) -> the embedder for it
         -> extract.read_page() per page: text layer laid out (tables as Markdown rows, columns,
                                  running headers set aside), or OCR; line boxes kept; at most
                                  MAX_PAGE_CHARS of it (pages cut are recorded: cut_pages)
         -> extract.chunk_page(): sentences and whole table rows, overlapping, page-anchored spans
                                  (a chunk starting inside a table repeats its header row)
         -> embed the raw chunk text -> add to the collection    (in page batches, each written in
                                                                   slices the store takes: write_in_batches)
         -> mark the collection complete                          (written last)
         -> enrich_document(): LLM title + keywords per page      (after; resumable; the app runs
                                                                   it in a BackgroundEnricher thread;
                                                                   written in the document's language)

Crash safety: a collection is created with status "ingesting" and only gets
status "complete" (with its counts) as the very last write. Anything that finds
a collection in another state treats it as garbage: the next ingest of that
file deletes and rebuilds it, and readers skip it. A per-file lock stops two
processes on one machine from building the same collection at once. At start-up the app,
the API and this CLI remove every document whose ingest never finished (``sweep_unfinished``):
its collection and kept PDF, as Remove does, unless a live process holds its lock.

Another embedder: each collection records the name of the embedder that made its vectors
(``embedders.embedder_name``; a local model's name carries a fingerprint of its files, so a
changed model is another embedder too). A document made with another one than the app
now uses is left out of searches (retriever.py says which) and rebuilt by
``reembed_document()`` from its kept PDF (``python ingest.py --reembed`` does them all).
A complete document is rebuilt beside itself (``<name>_rebuild``) and swapped in only
once whole, so a failed or killed rebuild leaves it exactly as it was, kept PDF included;
page labels whose page text did not change are carried over (they come from the text,
not the vectors).

Everything a page knows travels on its chunks' metadata (doc, page, offsets,
text source, page length, OCR line boxes, title, keywords), so one collection
per PDF is the whole record; the collection's own metadata holds the document
facts (name, hash, embedder, counts, which pages were OCR'd or empty). A copy of
the PDF itself is kept beside the store (``kept_pdf_path``) so a cited page can
be shown as it looks.

The store is a folder (chromadb.PersistentClient) or, when CHROMA_HOST is set,
a ``chroma run`` server (chromadb.HttpClient); the code above it is the same for
both, and the locks and kept PDFs stay in a folder on this machine either way: the
store's own folder, or CHROMA_PERSIST_DIR for a server (``store_dir``).

What an evaluation varies (the extractor, the chunking) is an ``IngestProfile`` handed to
``ingest_pdf`` (the settings are its defaults); the store is the client handed in.

Deliberately simple: a crashed ingest restarts from page 1 rather than resuming
mid-file (embedding is the cheap part; enrichment, the slow part, does resume),
and the per-file lock is a local file lock, which does not span machines.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import logging
import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from contextlib import closing, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

import chromadb
import chromadb.errors
import httpx
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

import config
import embedders
import models
import prompts
import rules
from language import detect_language, language_name
from extract import (  # noqa: F401  (the PDF errors are part of ingest's interface too)
    CorruptPDFError,
    DamagedPagesError,
    FileProblemError,
    EmptyPDFError,
    EncryptedPDFError,
    FileTooLargeError,
    IngestError,
    NoTextError,
    NotAPDFError,
    Page,
    chunk_page,
    display_name,
    ocr_engine,
    open_pdf,
    page_ranges,
    read_page,
    running_lines,
    table_header_for,
    unreadable_pages,
)
from safe_text import fence_text, terminal_text

log = logging.getLogger(__name__)

# progress(current, total, message): for an ingest, ``current`` counts pages' worth of work out of
# ``total`` pages (reading a page is the first half of its share, embedding and storing its
# passages the second), and ``message`` names the stage; for labelling, pages labelled.
ProgressCallback = Callable[[float, int, str], None]


@dataclass(frozen=True)
class IngestProfile:
    """How a PDF's pages are read and cut into passages: the settings by default; an evaluation hands in
    a variant (another extractor, another chunking policy) instead of changing the settings (issue 57)."""

    extractor: str = field(default_factory=lambda: config.EXTRACTOR)  # "text" or "layout" (extract.read_page)
    chunk_size: int = field(default_factory=lambda: config.CHUNK_SIZE)  # characters (extract.chunk_page)
    chunk_overlap: int = field(default_factory=lambda: config.CHUNK_OVERLAP)


def _no_progress(current: float, total: int, message: str) -> None:
    pass


# -----------------------------------------------------------------------------
# Errors of the store (the PDF's own errors live in extract.py)


class EmbedderMismatchError(IngestError):
    pass


class StoreUnavailableError(IngestError):
    """The ChromaDB server named by CHROMA_HOST / CHROMA_PORT does not answer."""


class StoreFolderError(StoreUnavailableError):
    """The store folder (CHROMA_PERSIST_DIR) cannot be made, written or opened: a store unavailable here."""


class StorePurgeError(IngestError):
    """A document was removed but the store folder could not be purged of its bytes."""


class StoreWriteError(IngestError):
    """The store refused a write (ChromaDB raised one of its own errors); says which document and what to do."""


# -----------------------------------------------------------------------------
# Fingerprints and names


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes: the document's identity, whatever its name."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def collection_name_for(sha256: str) -> str:
    """collection_name_for("9f86d081884c7d65...") -> "pdf_rag_9f86d081884c7d65" """
    return f"{config.COLLECTION_PREFIX}{sha256[:16]}"


# -----------------------------------------------------------------------------
# The store


def _unreachable(host: str, port: int) -> StoreUnavailableError:
    return StoreUnavailableError(
        f"The ChromaDB server at {host}:{port} does not answer. Start it with "
        f"`chroma run --path /data/chroma --host {host} --port {port}`, or unset CHROMA_HOST "
        f"to use the folder {config.CHROMA_PERSIST_DIR} instead."
    )


@contextmanager
def _server_errors() -> Iterator[None]:
    """Turn a lost connection to the ChromaDB server into a StoreUnavailableError.

    Only a server is reached over the network, so a local store never raises these.
    """
    try:
        yield
    except httpx.TransportError as err:
        raise _unreachable(config.CHROMA_HOST, config.CHROMA_PORT) from err


def _server_client(host: str, port: int) -> chromadb.ClientAPI:
    """An HttpClient for a running ``chroma run``; it checks the server answers when made."""
    try:
        return chromadb.HttpClient(host=host, port=port)
    except (ValueError, httpx.TransportError) as err:  # chromadb wraps "connection refused" in a ValueError
        raise _unreachable(host, port) from err


def get_client(path: str | None = None) -> chromadb.ClientAPI:
    """The ChromaDB client: the server at CHROMA_HOST:CHROMA_PORT when CHROMA_HOST is set,
    else the store on disk at ``path`` (default CHROMA_PERSIST_DIR).

    A ``path`` given outright always means that folder: the benchmarks, evaluations
    and tests build throwaway stores that must not land on a shared server.
    """
    if config.CHROMA_HOST and path is None:
        return _server_client(config.CHROMA_HOST, config.CHROMA_PORT)
    folder = _usable_store_folder(Path(path or config.CHROMA_PERSIST_DIR))
    try:
        return chromadb.PersistentClient(path=str(folder))
    except chromadb.errors.ChromaError as err:  # e.g. a chroma.sqlite3 that is not a database
        raise StoreFolderError(f"The store in {folder} cannot be opened ({err}).") from err


def _usable_store_folder(folder: Path) -> Path:
    """``folder``, made if missing; a StoreFolderError saying why when it cannot be a store folder.
    Checked here because ChromaDB says only "File exists (os error 17)" for a link loop, say."""
    fix = "Set CHROMA_PERSIST_DIR to a folder this user can write to."
    if config.is_link_loop(folder):
        raise StoreFolderError(f"The store folder {folder} is a symbolic link loop. {fix}")
    if folder.exists() and not folder.is_dir():
        raise StoreFolderError(f"The store folder {folder} is a file, not a folder. {fix}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StoreFolderError(f"The store folder {folder} cannot be created ({err.strerror}). {fix}") from err
    if not os.access(folder, os.W_OK | os.X_OK):
        raise StoreFolderError(f"The store folder {folder} cannot be written to. {fix}")
    return folder


def _collection_or_none(client: chromadb.ClientAPI, name: str):
    try:
        with _server_errors():
            return client.get_collection(name, embedding_function=None)
    except (chromadb.errors.NotFoundError, ValueError):  # ValueError: how older chromadb said "not found"
        return None


rules.register("store_write_limit", "no write carries more rows than the store takes, because ChromaDB refuses the whole write "
               '("Batch size of 7862 is greater than max batch size of 5461") after all its vectors were made',
               "tests/test_ingest_limits.py::test_store_write_limit_is_the_lower_of_the_setting_and_the_stores_own", forbids=True,
               pays_on='docs/experiments/2026-11-27-nothing-wasted-nothing-stalled.md: a 5 MB page, before the store refused the 7,618-row write after 572 s, after stored in batches')
rules.register("store_refusal_named", "a write the store refuses is a StoreWriteError naming the document, because a person reads it "
               "as the reason an upload failed; only ChromaDB's own errors are turned, so a bug stays a bug",
               "tests/test_ingest_limits.py::test_only_chromadbs_own_errors_become_a_store_write_error",
               pays_on="docs/experiments/2026-11-27-nothing-wasted-nothing-stalled.md: a behaviour: a 5 MB page's write the store"
                       " refused failed obscurely after 572 s; now a StoreWriteError naming the document and what to do")


def store_write_limit(store) -> int:
    """Rows one write may carry: STORE_WRITE_BATCH, or the store's own limit when that is lower.

    Rule: no write carries more rows than the store takes, because ChromaDB refuses the whole write
    ("Batch size of 7862 is greater than max batch size of 5461") after all its vectors were made.
    ``store`` is a client, or the API object a collection holds; one whose limit cannot be asked keeps STORE_WRITE_BATCH.
    """
    if not rules.on("store_write_limit"):
        return max(1, config.STORE_WRITE_BATCH)
    try:
        own = int(store.get_max_batch_size())
    except (AttributeError, TypeError, ValueError, chromadb.errors.ChromaError):
        own = 0
    return max(1, min(config.STORE_WRITE_BATCH, own) if own > 0 else config.STORE_WRITE_BATCH)


def write_in_batches(collection, method: str, ids: list[str], **columns: list) -> int:
    """``collection.<method>(ids=..., **columns)`` ("add" or "update") in slices of ``store_write_limit``
    rows; returns the number of writes made. Every write of passages to the store goes through here.

    Rule: a write the store refuses is a StoreWriteError naming the document, because a person reads
    it as the reason an upload failed; only ChromaDB's own errors are turned, so a bug stays a bug.
    """
    # chromadb keeps the API a collection writes through as ``_client``; asked here so that callers
    # holding only a collection (labelling, carrying labels) write within the same limit.
    limit = store_write_limit(getattr(collection, "_client", None))
    write = getattr(collection, method)
    calls = 0
    for start in range(0, len(ids), limit):
        part = {key: values[start : start + limit] for key, values in columns.items()}
        with store_refusals(collection):
            write(ids=ids[start : start + limit], **part)
        calls += 1
    return calls


@contextmanager
def store_refusals(collection) -> Iterator[None]:
    """Turn an error ChromaDB raises while writing to ``collection`` into a StoreWriteError: which document,
    what the store said, what to do. Any other exception passes through untouched."""
    try:
        yield
    except chromadb.errors.ChromaError as err:
        if not rules.on("store_refusal_named"):
            raise
        doc_name = (collection.metadata or {}).get("doc_name") or collection.name
        log.error("The store refused a write to %s (%s)", collection.name, doc_name, exc_info=err)
        raise StoreWriteError(
            f"The store refused to save '{doc_name}' ({err}), so it was not added or changed. "
            f"Check that the store's disk has free space and try again; if it fails again, "
            f"the log ({config.LOG_FILE}) has the details."
        ) from err


def is_complete(collection) -> bool:
    return (collection.metadata or {}).get("status") == "complete"


def list_documents(client: chromadb.ClientAPI, include_incomplete: bool = False) -> list[dict]:
    """One dict per document collection: its metadata plus ``collection``; ``cut_pages`` is a list
    ([{"page": n, "kept": chars, "dropped": chars}], see ``cut_pages_in``), empty when no page was cut."""
    docs = []
    with _server_errors():
        collections = client.list_collections()
    for col in collections:
        if not col.name.startswith(config.COLLECTION_PREFIX):
            continue
        meta = dict(col.metadata or {})
        if include_incomplete or meta.get("status") == "complete":
            docs.append({"collection": col.name, **meta, "cut_pages": cut_pages_in(meta)})
    return sorted(docs, key=lambda d: d.get("doc_name", ""))


def labels_missing(doc: dict) -> bool:
    """Whether some page of a document (an entry of ``list_documents``) with text still has no label."""
    return doc.get("enriched_pages", 0) < doc["pages"] - doc.get("empty_pages", 0)


def store_dir(client: chromadb.ClientAPI | None = None) -> Path:
    """The folder beside the store where kept PDFs and locks live: an on-disk ``client``'s own folder, so a
    store opened elsewhere (an evaluation's) keeps its own; a ChromaDB server's (or no client) CHROMA_PERSIST_DIR."""
    folder = _store_folder(client) if client is not None else None
    return folder or Path(config.CHROMA_PERSIST_DIR)


def kept_pdf_path(collection_name: str, store: str | Path | None = None) -> Path:
    """Where the store keeps its own copy of a document's PDF, for page previews: under ``store``
    (a ``store_dir``; default CHROMA_PERSIST_DIR)."""
    return Path(store or config.CHROMA_PERSIST_DIR) / "pdfs" / f"{collection_name}.pdf"


def _keep_pdf(path: Path, collection_name: str, store: Path) -> None:
    """Copy the PDF next to the store (temp name, then rename), unless it is already there."""
    target = kept_pdf_path(collection_name, store)
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    shutil.copyfile(path, partial)
    partial.replace(target)


def _store_folder(client: chromadb.ClientAPI) -> Path | None:
    """The folder of an on-disk store; None for a ChromaDB server (its files are the server's)."""
    settings = client.get_settings()
    return Path(settings.persist_directory) if settings.is_persistent else None


def purge_deleted(folder: Path) -> list[str]:
    """Make what was deleted from the store folder unreadable; returns the segment folders removed.

    ChromaDB deletes a collection's rows but leaves their bytes in SQLite's free pages, its
    words in the full-text index's older segments, and its vector index folder on disk. So:
    merge the full-text index (FTS5 'optimize' drops deleted entries), VACUUM (rewrites the
    file without free pages; the same as `chroma vacuum`, whose log purge ChromaDB already
    does on delete), and remove every segment folder that no segment of the store names.
    """
    database = folder / "chroma.sqlite3"
    try:
        with closing(sqlite3.connect(database, timeout=config.PURGE_TIMEOUT_SECONDS)) as db:
            db.execute("INSERT INTO embedding_fulltext_search(embedding_fulltext_search) VALUES('optimize')")
            db.commit()
            db.execute("VACUUM")
            # In WAL mode the old pages would stay in chroma.sqlite3-wal until overwritten: copy them in and empty it
            # (the store ChromaDB makes today uses a rollback journal, where this does nothing).
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            segments = {row[0] for row in db.execute("SELECT id FROM segments")}
    except sqlite3.Error as err:
        raise StorePurgeError(
            f"The store at {folder} could not be compacted ({err}), so deleted text may stay in its "
            "free space until the next removal succeeds. Close other programs using the store and remove again."
        ) from err
    removed = []
    for entry in folder.iterdir():
        if entry.is_dir() and _is_uuid(entry.name) and entry.name not in segments:
            shutil.rmtree(entry)
            removed.append(entry.name)
    log.info("Compacted %s; removed segment folders %s", database, removed)
    return removed


def _is_uuid(name: str) -> bool:
    try:
        uuid.UUID(name)
        return True
    except ValueError:
        return False


def delete_document(client: chromadb.ClientAPI, collection_name: str) -> None:
    """Remove a document so that none of it can be read back: its collection (chunks,
    vectors, labels) and the kept PDF copy; a store folder is then purged (``purge_deleted``).
    A ChromaDB server deletes the collection; its files are the server's to compact."""
    with _server_errors():
        client.delete_collection(collection_name)
    kept_pdf_path(collection_name, store_dir(client)).unlink(missing_ok=True)
    log.info("Deleted %s", collection_name)
    folder = _store_folder(client)
    if folder is not None:
        purge_deleted(folder)


def _complete_collection(client: chromadb.ClientAPI, collection_name: str):
    col = _collection_or_none(client, collection_name)
    if col is None or not is_complete(col):
        raise IngestError(f"Document {collection_name} is not in the store (or its ingest did not finish).")
    return col


def open_collection(client: chromadb.ClientAPI, collection_name: str, embedder: Embeddings):
    """A complete collection, checked to have been made by ``embedder`` (else EmbedderMismatchError)."""
    col = _complete_collection(client, collection_name)
    if made_with_other_embedder(col.metadata, embedder):
        raise EmbedderMismatchError(other_embedder_message([col.metadata], embedder))
    return col


def made_with_other_embedder(doc: dict, embedder: Embeddings | str) -> bool:
    """Whether a document (an entry of ``list_documents`` or a collection's metadata) has vectors made by
    another embedder than ``embedder`` (an embedder, or its ``embedders.embedder_name``): it cannot be
    searched with it until ``reembed_document()``.

    made_with_other_embedder({"embedder": "ollama:nomic-embed-text"}, "all-MiniLM-L6-v2") -> True
    """
    return doc.get("embedder") != embedders.embedder_name_for(doc.get("language"), embedder)


def documents_made_with_other_embedder(client: chromadb.ClientAPI, embedder: Embeddings | str) -> list[dict]:
    """The complete documents (entries of ``list_documents``) that ``reembed_document()`` would rebuild."""
    return [doc for doc in list_documents(client) if made_with_other_embedder(doc, embedder)]


def _quoted_list(names: list[str]) -> str:
    """_quoted_list(["a.pdf", "b.pdf", "c.pdf"]) -> "'a.pdf', 'b.pdf' and 'c.pdf'" """
    quoted = [f"'{name}'" for name in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def other_embedder_message(docs: list[dict], embedder: Embeddings | str) -> str:
    """What to tell a person about documents made with another embedder, and what to do about it.

    other_embedder_message([{"doc_name": "a.pdf", "embedder": "ollama:nomic-embed-text"}], "all-MiniLM-L6-v2")
    -> "'a.pdf' was embedded with 'ollama:nomic-embed-text', not with the embedder now in use ('all-MiniLM-L6-v2'),
        so it cannot be searched until it is re-embedded: ..."
    """
    current = embedders.embedder_name_for(docs[0].get("language"), embedder)
    names = _quoted_list([d.get("doc_name") or d.get("collection", "?") for d in docs])
    made_by = _quoted_list(sorted({str(d.get("embedder") or "an unrecorded embedder") for d in docs}))
    one = len(docs) == 1
    return (
        f"{names} {'was' if one else 'were'} embedded with {made_by}, not with the embedder now in use ('{current}'), "
        f"so {'it' if one else 'they'} cannot be searched until {'it is' if one else 'they are'} re-embedded: "
        f"use Re-embed in the app or run `python ingest.py --reembed` (or set EMBED_BACKEND, EMBED_MODEL and "
        f"MULTILINGUAL_EMBEDDER back)."
    )


@contextmanager
def _file_lock(sha256: str, store: Path, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive lock for one document while it is built (waits for a concurrent builder);
    the lock lives in ``store`` (a ``store_dir``). With ``wait=False`` a lock another holds is not
    waited for: the body runs at once and is told False (True: the lock is held)."""
    lock_dir = store / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{sha256[:16]}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# -----------------------------------------------------------------------------
# Ingest


@dataclass
class IngestResult:
    doc_name: str
    sha256: str
    collection: str
    pages: int
    chunks: int
    ocr_pages: int
    empty_pages: int
    seconds: float
    cached: bool = False
    stage_seconds: dict = field(default_factory=dict)
    damaged_pages: list[int] = field(default_factory=list)  # left out (KEEP_READABLE_PAGES)
    language: str = ""  # ISO 639-1 code of its text ("" when too little text to tell)
    cut_pages: list[dict] = field(default_factory=list)  # [{"page", "kept", "dropped"}]: text past MAX_PAGE_CHARS left out


def damaged_in(meta: dict) -> list[int]:
    """The pages a document's metadata records as damaged and left out: damaged_in({"page_sources": "TTD"}) -> [3]"""
    return [n for n, letter in enumerate(meta.get("page_sources", ""), 1) if letter == "D"]


def cut_pages_in(meta: dict) -> list[dict]:
    """The pages whose text was cut at MAX_PAGE_CHARS, as a document's metadata records them (JSON text, since
    a collection's metadata holds only scalars) or an entry of ``list_documents`` holds them (already a list).

    cut_pages_in({"cut_pages": '[{"page": 1, "kept": 50000, "dropped": 5040509}]'})
    -> [{"page": 1, "kept": 50000, "dropped": 5040509}]
    """
    raw = meta.get("cut_pages") or []
    return json.loads(raw) if isinstance(raw, str) else list(raw)


def page_cut_note(cut: dict) -> str:
    """page_cut_note({"page": 1, "kept": 50000, "dropped": 5040509})
    -> "Page 1: kept the first 50,000 of 5,090,509 characters (MAX_PAGE_CHARS)" """
    return f"Page {cut['page']}: kept the first {cut['kept']:,} of {cut['kept'] + cut['dropped']:,} characters (MAX_PAGE_CHARS)"


def cut_pages_note(cuts: list[dict], listed: int = 3) -> str:
    """What a person is told about a document's cut pages: each of the first ``listed``, then how many more.

    cut_pages_note([{"page": 1, "kept": 50000, "dropped": 10}]) -> "Page 1: kept the first 50,000 of 50,010 characters (MAX_PAGE_CHARS)"
    """
    notes = [page_cut_note(cut) for cut in cuts[:listed]]
    if len(cuts) > listed:
        notes.append(f"{len(cuts) - listed} more pages cut (pages {page_ranges([c['page'] for c in cuts[listed:]])})")
    return "; ".join(notes)


def _result_from_metadata(meta: dict, seconds: float) -> IngestResult:
    return IngestResult(
        doc_name=meta["doc_name"],
        sha256=meta["sha256"],
        collection=collection_name_for(meta["sha256"]),
        pages=meta["pages"],
        chunks=meta["chunks"],
        ocr_pages=meta["ocr_pages"],
        empty_pages=meta["empty_pages"],
        seconds=seconds,
        cached=True,
        damaged_pages=damaged_in(meta),
        language=meta.get("language", ""),
        cut_pages=cut_pages_in(meta),
    )


def chunk_records(page: Page, sha256: str, doc_name: str, profile: IngestProfile | None = None) -> list[tuple[str, str, dict]]:
    """(id, text, metadata) for each chunk of one page, cut by ``profile``'s chunking (default: the settings').
    A chunk that starts inside a table begins with the table's header row (``header_chars`` long), so its
    numbers keep their names."""
    profile = profile or IngestProfile()
    records = []
    for index, (start, end) in enumerate(chunk_page(page.text, profile.chunk_size, profile.chunk_overlap, skip=page.running)):
        header = table_header_for(page.text, start)
        meta = {
            "doc_name": doc_name,
            "sha256": sha256,
            "page": page.number,
            "chunk_index": index,
            "start": start,
            "end": end,
            "text_source": page.source,
            "page_chars": len(page.text),
            "header_chars": len(header),
            "title": "",
            "keywords": "",
            "enriched": False,
        }
        boxes = [list(box) for s, e, box in page.line_boxes if s < end and e > start]
        if boxes:
            meta["ocr_boxes"] = json.dumps(boxes)  # the name predates laid-out pages, which have line boxes too
        records.append((f"{sha256[:16]}-p{page.number}-c{index}", header + page.text[start:end], meta))
    return records


def ingest_pdf(
    path: Path,
    client: chromadb.ClientAPI | None = None,
    embedder: Embeddings | None = None,
    progress: ProgressCallback | None = None,
    doc_name: str | None = None,
    profile: IngestProfile | None = None,
) -> IngestResult:
    """Make ``path`` searchable and return what was stored; a cache hit when the bytes were seen (and read
    with ``profile``'s extractor). ``profile``: how pages are read and chunked (default: the settings).
    The kept PDF and the lock go beside ``client``'s store (``store_dir``).

    Raises an IngestError subclass, with a plain-language message, for bad input;
    the store is then exactly as it was before the call.
    """
    t0 = time.perf_counter()
    path = Path(path)
    progress = progress or _no_progress
    client = client or get_client()
    profile = profile or IngestProfile()
    store = store_dir(client)
    doc_name = doc_name or display_name(path)
    doc = open_pdf(path)
    try:
        main = embedder or embedders.get_embeddings()
        sha256 = file_sha256(path)
        name = collection_name_for(sha256)
        with _file_lock(sha256, store):
            existing = _collection_or_none(client, name)
            if existing is not None and is_complete(existing):
                made_with = (existing.metadata.get("embedder"), existing.metadata.get("extractor", "text"))
                if not made_with_other_embedder(existing.metadata, main) and made_with[1] == profile.extractor:
                    log.info("%s is already ingested as %s", doc_name, name)
                    _keep_pdf(path, name, store)
                    progress(1, 1, "Already in the library")
                    return _result_from_metadata(existing.metadata, time.perf_counter() - t0)
            if _collection_or_none(client, name + REBUILD_SUFFIX) is not None:
                log.warning("Removing %s%s, left by a rebuild that did not finish", name, REBUILD_SUFFIX)
                _drop_collection(client, name + REBUILD_SUFFIX)
            _keep_pdf(path, name, store)  # before the build, so a complete collection always has its PDF
            if existing is not None and is_complete(existing):
                log.warning("%s was made with embedder %s and extractor %s; rebuilding it beside itself", name, *made_with)
                return _rebuild(doc, client, main, existing, sha256, doc_name, progress, t0, profile)
            if existing is not None:
                log.warning("Removing unfinished collection %s before rebuilding", name)
                _drop_collection(client, name)  # not its kept PDF: the same bytes, maybe the very file being read
            return _build_collection(doc, client, main, name, sha256, doc_name, progress, t0, profile)
    finally:
        doc.close()


def document_language(doc) -> str:
    """The main language of a PDF's text layer ("" when it has too little text to tell: a scan's is
    told from its first OCR'd pages instead, see ``_write_pages``), read from up to LANGUAGE_SAMPLE_PAGES
    pages spread through it: a manual's first pages may be an English licence before the German text."""
    step = max(1, doc.page_count // config.LANGUAGE_SAMPLE_PAGES)
    sample = "\n".join(doc.load_page(i).get_text() for i in range(0, doc.page_count, step)[: config.LANGUAGE_SAMPLE_PAGES])
    return detect_language(sample) or ""


def reembed_document(
    client: chromadb.ClientAPI, embedder: Embeddings, collection_name: str, progress: ProgressCallback | None = None,
    profile: IngestProfile | None = None,
) -> IngestResult:
    """Rebuild one complete document with ``embedder`` from its kept PDF (``kept_pdf_path``), under the
    name it was given; a cache hit when it is already made with ``embedder`` (and ``profile``'s extractor,
    default the setting's).

    The kept PDF is copied to a temp file first and the rebuild happens beside the old collection
    (see ``ingest_pdf``), so neither a failure nor a crash can lose the document or its PDF: until the
    new collection is whole, the old one stays as it was. Raises IngestError with a plain sentence when
    the document is not in the library or its PDF is not on this machine (a shared ChromaDB server holds
    documents other machines added); nothing is changed then.
    """
    col = _complete_collection(client, collection_name)
    doc_name = col.metadata.get("doc_name") or collection_name
    kept = kept_pdf_path(collection_name, store_dir(client))
    with tempfile.TemporaryDirectory(prefix="pdf-rag-reembed-") as tmp:
        copy = Path(tmp) / "kept.pdf"
        try:
            shutil.copyfile(kept, copy)
        except FileNotFoundError:
            raise IngestError(
                f"The PDF of '{doc_name}' is not on this machine, so it cannot be re-embedded here; add the PDF again."
            ) from None
        if collection_name_for(file_sha256(copy)) != collection_name:
            raise IngestError(
                f"The kept copy of the PDF of '{doc_name}' ({kept}) is not the file it was made from, "
                "so it cannot be re-embedded; add the PDF again."
            )
        log.info("Re-embedding %s (%s, made with %s) with %s", doc_name, collection_name,
                 col.metadata.get("embedder"), embedders.embedder_name(embedder))
        return ingest_pdf(copy, client, embedder, progress=progress, doc_name=doc_name, profile=profile)


REBUILD_SUFFIX = "_rebuild"  # a complete document is rebuilt under its name plus this, then swapped in


def _drop_collection(client: chromadb.ClientAPI, name: str) -> None:
    """Delete a collection that is being replaced (not its kept PDF) and purge the store folder of it.
    A purge that fails is only logged: what stays in free space is the text of a document still in the library."""
    with _server_errors():
        client.delete_collection(name)
    _purge_quietly(client)


def _purge_quietly(client: chromadb.ClientAPI) -> None:
    """Purge the store folder of deleted collections; a purge that fails is only logged."""
    folder = _store_folder(client)
    if folder is not None:
        try:
            purge_deleted(folder)
        except StorePurgeError as err:
            log.warning("%s", err)


def _rebuild(doc, client, embedder, old, sha256, doc_name, progress, t0, profile: IngestProfile) -> IngestResult:
    """Build ``old``'s document again beside it (``<name>_rebuild``), then swap the new collection in.

    While the new one is built, marked "rebuilt" (not complete) when whole, ``old`` stays as it was:
    a failure removes only the new one, and after a crash the unfinished ``_rebuild`` collection is
    skipped by readers and removed by the next ingest of the file. Page labels are carried over for
    pages whose text is unchanged. The swap is two writes: delete ``old``, then rename the new one and
    mark it complete in one ``modify``; a crash exactly between them leaves the document out of the
    library (its kept PDF stays) until the PDF is added again.
    """
    name, staging = old.name, old.name + REBUILD_SUFFIX
    result = _build_collection(doc, client, embedder, staging, sha256, doc_name, progress, t0, profile, done_status="rebuilt")
    with _server_errors():
        built = client.get_collection(staging, embedding_function=None)
        meta = _carry_labels(old, built)
        client.delete_collection(name)
        built.modify(name=name, metadata={**meta, "status": "complete"})  # the completion marker: still the last write
    _purge_quietly(client)
    log.info("Rebuilt %s with %s", name, embedders.embedder_name(embedder))
    return replace(result, collection=name)


def _carry_labels(old, new) -> dict:
    """Give the pages of ``new`` the titles and keywords ``old`` has for the same page text (labels are
    made from the text, whatever embedder made the vectors); returns ``new``'s metadata with the counts."""
    meta = dict(new.metadata)
    labelled = old.get(where={"enriched": True}, include=["metadatas"])["metadatas"]
    labels = {m["page"]: {key: m.get(key, default) for key, default in
                          (("title", ""), ("keywords", ""), ("enriched", True), ("label_failed", False))}
              for m in labelled}
    if not labels:
        return meta
    old_texts, new_texts = page_texts(old), page_texts(new)
    same = sorted(page for page in labels if page in new_texts and old_texts.get(page) == new_texts[page])
    if not same:
        return meta
    got = new.get(where={"page": {"$in": same}}, include=["metadatas"])
    metas = [{**m, **labels[m["page"]]} for m in got["metadatas"]]
    write_in_batches(new, "update", got["ids"], metadatas=metas)
    meta.update(enriched_pages=len(same), label_failed_pages=sum(bool(labels[page]["label_failed"]) for page in same))
    log.info("Carried the labels of %d pages over to the rebuilt %s", len(same), meta.get("doc_name"))
    return meta


def _build_collection(doc, client, main, name, sha256, doc_name, progress, t0, profile: IngestProfile,
                      done_status="complete") -> IngestResult:
    """Build collection ``name`` for ``doc``: its language told from its text layer, its vectors made by the
    embedder for that language (``main``, the app's embedder, for English; see ``embedders.embedder_for``),
    its pages read and chunked as ``profile`` says."""
    language = document_language(doc)
    meta = {
        "doc_name": doc_name,
        "sha256": sha256,
        "language": language,  # "" when unknown; a scan's is told once its first pages are OCR'd
        "embedder": embedders.embedder_name_for(language, main),
        "extractor": profile.extractor,
        "status": "ingesting",
        "pages": doc.page_count,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    try:
        with _server_errors():  # a server lost mid-ingest becomes a StoreUnavailableError
            stats, meta = _write_collection(doc, client, main, name, meta, progress, t0, profile, done_status)
    except BaseException as err:
        leftover = _discard_unfinished(client, name, doc_name)
        if leftover and isinstance(err, IngestError):
            raise type(err)(f"{err} {leftover}") from err
        raise
    log.info("Ingested %s: %d pages, %d chunks in %.1fs", doc_name, doc.page_count, stats["chunks"], meta["ingest_seconds"])
    return IngestResult(
        doc_name=doc_name,
        sha256=sha256,
        collection=name,
        pages=doc.page_count,
        chunks=stats["chunks"],
        ocr_pages=meta["ocr_pages"],
        empty_pages=meta["empty_pages"],
        seconds=time.perf_counter() - t0,
        stage_seconds=stats["stage_seconds"],
        damaged_pages=damaged_in(meta),
        language=meta["language"],
        cut_pages=cut_pages_in(meta),
    )


def _discard_unfinished(client: chromadb.ClientAPI, name: str, doc_name: str) -> str:
    """Remove what a failed build left (collection, kept PDF); return, in words, what could
    not be removed ("" when everything was)."""
    kept_pdf_path(name, store_dir(client)).unlink(missing_ok=True)
    try:
        delete_document(client, name)
    except (chromadb.errors.NotFoundError, ValueError):  # never created: nothing to remove
        pass
    except StoreUnavailableError:
        return (
            f"Its unfinished collection {name} could not be removed from the server: it is marked unfinished, "
            f"so searches ignore it, and adding {doc_name} again once the server answers rebuilds it."
        )
    except StorePurgeError as err:
        return str(err)
    return ""


# -----------------------------------------------------------------------------
# Start-up: what an ingest killed midway left is removed whole


def sweep_unfinished(client: chromadb.ClientAPI) -> list[str]:
    """Remove every document whose ingest never finished (the process was killed, the machine lost power):
    its collection (passages, vectors, labels) and its kept PDF, by the same removal as a failed build
    (``_discard_unfinished``, which is Remove's ``delete_document``), the store folder then purged; one log
    line per document. The app, the API and ``ingest.py`` run it as they start; returns the collections removed.

    Unfinished means without the completion marker: a collection whose status is not "complete", or a kept
    PDF without a complete collection. A document whose per-file lock (``_file_lock``) another live process
    holds is being built right now (the app and the API on one store) and is left alone; a lock dies with its
    process, so a killed ingest's is free. A rebuild killed between its two swap writes left a whole copy
    ("rebuilt"): the swap is finished instead, so re-embedding never loses a document. A ChromaDB server is
    not swept: other machines may be writing to it, and their locks are not on this one.
    """
    folder = _store_folder(client)
    if folder is None:
        return []
    swept = []
    for name in sorted(_unfinished_documents(client, folder)):
        with _file_lock(name.removeprefix(config.COLLECTION_PREFIX), folder, wait=False) as ours:
            if not ours:
                log.info("Left %s as it is: another process is adding it now", name)
            elif _sweep_document(client, name, folder):
                swept.append(name)
    return swept


def _unfinished_documents(client: chromadb.ClientAPI, folder: Path) -> set[str]:
    """The collection names of the documents something unfinished is left of: a collection not marked complete
    (a rebuild's ``_rebuild`` copy counts for its document), or a kept PDF (or its ``.partial``) without a
    complete collection. Read without the locks: ``_sweep_document`` looks again under the document's lock."""
    complete, unfinished = set(), set()
    with _server_errors():
        collections = client.list_collections()
    for col in collections:
        if col.name.startswith(config.COLLECTION_PREFIX):
            (complete if is_complete(col) else unfinished).add(col.name.removesuffix(REBUILD_SUFFIX))
    kept = {p.name.split(".")[0] for p in kept_pdf_path("", folder).parent.glob(f"{config.COLLECTION_PREFIX}*")}
    return unfinished | (kept - complete)


def _sweep_document(client: chromadb.ClientAPI, name: str, folder: Path) -> bool:
    """Remove what is unfinished of document ``name``, its lock held; whether anything was removed."""
    done = _collection_or_none(client, name)
    staging = _collection_or_none(client, name + REBUILD_SUFFIX)
    if staging is not None and done is None and staging.metadata.get("status") == "rebuilt":
        staging.modify(name=name, metadata={**staging.metadata, "status": "complete"})  # the swap's second write
        log.warning("Finished swapping in the rebuilt %s (%s), left half-swapped by a re-embed that was stopped",
                    staging.metadata.get("doc_name"), name)
        return False
    if staging is not None:  # its document's own collection and kept PDF are another matter, seen below
        _drop_collection(client, staging.name)
        log.warning("Removed %s%s, a rebuild of %s that never finished", name, REBUILD_SUFFIX, staging.metadata.get("doc_name"))
    if done is not None and is_complete(done):
        return staging is not None
    doc_name = (done.metadata or {}).get("doc_name", "") if done is not None else ""
    kept_pdf_path(name, folder).with_suffix(".partial").unlink(missing_ok=True)  # a copy killed midway (_keep_pdf)
    leftover = _discard_unfinished(client, name, doc_name or name)
    log.warning("Removed %s (%s), whose ingest never finished: its passages, vectors and labels, and its kept PDF%s",
                doc_name or "a document", name, f". {leftover}" if leftover else "")
    return True


def _write_collection(doc, client, main, name, meta, progress, t0, profile: IngestProfile,
                      done_status="complete") -> tuple[dict, dict]:
    """Create the collection, fill it, and mark it ``done_status`` ("complete", or "rebuilt" for a
    rebuild that is swapped in after) as the very last write; returns the page statistics and the final metadata."""
    collection = client.create_collection(
        name, metadata=meta, configuration={"hnsw": {"space": "cosine"}}, embedding_function=None
    )
    stats = _write_pages(doc, collection, main, meta, progress, profile)
    if stats["chunks"] == 0:
        why = "no OCR engine is available" if ocr_engine() is None else "OCR found no text either"
        raise NoTextError(f"{meta['doc_name']} contains no readable text ({why}).")
    sources = stats.pop("sources")
    meta.update(
        status=done_status,
        chunks=stats["chunks"],
        ocr_pages=sources.count("O"),
        empty_pages=sources.count("E") + sources.count("D"),
        page_sources=sources,  # one letter per page: T text layer, O OCR, E empty, D damaged (left out)
        cut_pages=json.dumps(stats.pop("cut_pages")),  # pages whose text past MAX_PAGE_CHARS was left out
        language=stats.pop("language"),
        embedder=stats.pop("embedder"),
        enriched_pages=0,
        ingest_seconds=round(time.perf_counter() - t0, 2),
    )
    with store_refusals(collection):
        collection.modify(metadata=meta)  # the completion marker: always the last write
    return stats, meta


def _write_pages(doc, collection, main, meta, progress, profile: IngestProfile) -> dict:
    """Extract, chunk, embed and store ``doc`` in page batches so memory stays bounded; pages are read
    with ``profile``'s extractor and cut by its chunking.

    The vectors are made by the embedder for the document's language (``meta["language"]``); a document
    whose text layer was too thin to tell it (a scan) has it told from its first batch of pages as read,
    OCR included, before anything is embedded.

    Progress names each stage as it happens: reading (or OCR) page by page, with a note for each page
    whose text was cut at MAX_PAGE_CHARS, then for each page batch embedding its passages a slice at a
    time, storing them, and "Indexed ..." once the batch is in the store.
    """
    total, sha256, doc_name, language = doc.page_count, meta["sha256"], meta["doc_name"], meta["language"]
    seconds = {"extract": 0.0, "ocr": 0.0, "chunk": 0.0, "embed": 0.0, "store": 0.0}
    sources, chunks, cuts = [], 0, []
    damaged = set(unreadable_pages(doc))  # only left when KEEP_READABLE_PAGES asked to keep the rest
    t = time.perf_counter()
    running = running_lines(doc, skip=damaged) if profile.extractor == "layout" else frozenset()
    seconds["extract"] += time.perf_counter() - t
    for first in range(0, total, config.PAGE_BATCH_SIZE):
        pages = []
        for number in range(first, min(first + config.PAGE_BATCH_SIZE, total)):
            if number + 1 in damaged:
                sources.append("D")
                continue
            t = time.perf_counter()
            try:
                pages.append(read_page(doc.load_page(number), running, profile.extractor))
            except IngestError:
                raise
            except Exception as err:
                raise CorruptPDFError(f"{doc_name}: page {number + 1} cannot be read ({err}).") from err
            stage = "ocr" if pages[-1].source == "ocr" else "extract"
            seconds[stage] += time.perf_counter() - t
            sources.append({"text": "T", "ocr": "O", "empty": "E"}[pages[-1].source])
            read = "Reading page {} of {} by OCR" if stage == "ocr" else "Reading page {} of {}"
            progress(first + (number + 1 - first) / 2, total, read.format(number + 1, total))
            if pages[-1].dropped_chars:
                cuts.append(_report_cut(pages[-1], doc_name, progress, first + (number + 1 - first) / 2, total))
        t = time.perf_counter()
        records = [r for page in pages for r in chunk_records(page, sha256, doc_name, profile)]
        seconds["chunk"] += time.perf_counter() - t
        if not records:
            continue
        if not chunks and not language:  # nothing embedded yet: the pages read so far tell the language
            language = detect_language("\n".join(page.text for page in pages)) or ""
        embedder = embedders.embedder_for(language, main)
        span = f"pages {first + 1}–{first + len(pages)}"
        vectors = []
        for start in range(0, len(records), config.PROGRESS_EMBED_CHUNKS):
            part = records[start : start + config.PROGRESS_EMBED_CHUNKS]
            progress(
                first + len(pages) / 2 * (1 + start / len(records)),
                total,
                f"Embedding passages {chunks + start + 1}–{chunks + start + len(part)} ({span})",
            )
            t = time.perf_counter()
            vectors += embedder.embed_documents([text for _, text, _ in part])
            seconds["embed"] += time.perf_counter() - t
        progress(first + len(pages), total, f"Storing {len(records)} passages ({span})")
        t = time.perf_counter()
        write_in_batches(
            collection, "add", [r[0] for r in records],
            documents=[r[1] for r in records], metadatas=[r[2] for r in records], embeddings=vectors,
        )
        seconds["store"] += time.perf_counter() - t
        chunks += len(records)
        progress(first + len(pages), total, f"Indexed {chunks} passages from {first + len(pages)} of {total} pages")
    return {"chunks": chunks, "sources": "".join(sources), "stage_seconds": seconds, "language": language,
            "embedder": embedders.embedder_name_for(language, main), "cut_pages": cuts}


def _report_cut(page: Page, doc_name: str, progress: ProgressCallback, current: float, total: int) -> dict:
    """Record and tell (progress, log) that ``page``'s text past MAX_PAGE_CHARS was left out; returns the record."""
    cut = {"page": page.number, "kept": len(page.text), "dropped": page.dropped_chars}
    note = page_cut_note(cut)
    log.warning("%s: %s", doc_name, note)
    progress(current, total, note)
    return cut


# -----------------------------------------------------------------------------
# Enrichment: LLM title + keywords per page, after the document is searchable


def parse_enrichment(reply: str) -> tuple[str, list[str]] | None:
    """Title and keywords from a model's reply, or None when it holds no usable JSON.

    parse_enrichment('Sure! {"title": "Revenue", "keywords": ["sales", "2021"]}') -> ("Revenue", ["sales", "2021"])
    """
    # From the first "{" to the last "}", found by index: a regex search for it retried every "{" of a
    # reply without a "}" (quadratic).
    start, end = reply.find("{"), reply.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        data = json.loads(reply[start : end + 1])
    except (ValueError, RecursionError):  # malformed, an integer past 4,300 digits, or nested past the stack
        return None
    title = data.get("title") if isinstance(data, dict) else None
    if not isinstance(title, str) or not title.strip():
        return None
    keywords = data.get("keywords") or []
    if isinstance(keywords, str):
        keywords = keywords.split(",")
    # keywords are a list or a comma-separated string, each a word or a whole number: any other JSON
    # (a number alone, true, an object, a nested list, nan) names none
    words = keywords if isinstance(keywords, list) else []
    words = [str(k).strip() for k in words if isinstance(k, (str, int)) and not isinstance(k, bool)]
    return " ".join(title.split()[:12]), [k for k in words if k][:8]


def page_texts(collection) -> dict[int, str]:
    """Rebuild each page's text from its chunks' spans: {page number: text}."""
    got = collection.get(include=["documents", "metadatas"])
    pieces: dict[int, list[tuple[int, int, str]]] = {}
    for text, meta in zip(got["documents"], got["metadatas"]):
        body = text[meta.get("header_chars", 0) :]  # a repeated table header is not page text
        pieces.setdefault(meta["page"], []).append((meta["start"], meta["end"], body))
    pages = {}
    for number, spans in pieces.items():
        out, cursor = "", 0
        for start, end, text in sorted(spans):
            if end > cursor:
                out += (" " if start > cursor and out else "") + text[max(0, cursor - start) :]
                cursor = end
        pages[number] = out
    return pages


class _LabellingCancelled(Exception):
    pass


rules.register("label_in_document_language", "a page is labelled in its document's language, because its label is searched with "
               "that language's words and shown to the people who read it (English documents keep the plain prompt)",
               "tests/test_ingest.py::test_a_page_is_labelled_in_its_documents_language",
               pays_on="docs/experiments/2026-11-26-other-designs-for-the-open-targets.md: 32 pages of four manuals (seed 2611), labels in the page's language 9 / 32 -> 26 / 32")


def label_messages(number: int, texts: dict[int, str], language: str | None = None) -> list[BaseMessage]:
    """The prompt that asks for page ``number``'s label, its neighbours as context.

    Rule: a page is labelled in its document's language, because its label is searched with that
    language's words and shown to the people who read it (English documents keep the plain prompt).
    """
    user = prompts.ENRICH_USER.format(
        page_number=number,
        page=fence_text(texts[number][: config.ENRICH_PAGE_CHARS]),
        previous=fence_text(texts.get(number - 1, "(none)")[-config.ENRICH_NEIGHBOUR_CHARS :]),
        next=fence_text(texts.get(number + 1, "(none)")[: config.ENRICH_NEIGHBOUR_CHARS]),
    )
    system = prompts.ENRICH_SYSTEM
    if language and language != "en" and rules.on("label_in_document_language"):
        system += prompts.ENRICH_LANGUAGE.format(language=language_name(language))
    return [SystemMessage(system), HumanMessage(user)]


def _label_page(
    llm: BaseChatModel, number: int, texts: dict[int, str], cancel: threading.Event | None = None,
    language: str | None = None,
) -> tuple[str, list[str]] | None:
    """Ask the LLM for one page's title and keywords; None after two unusable replies.

    Each call waits while a question is being asked; a call a question interrupts
    (YieldedToQuestion) is asked again afterwards and does not count as a try,
    unless ``cancel`` was set meanwhile (then _LabellingCancelled). ``cancel`` set
    while waiting, or during an embedded model's call (BackgroundCancelled, when
    ``llm`` came from ``models.for_background_json(..., cancel=cancel)``), ends it too.
    """
    messages = label_messages(number, texts, language)
    attempts = 0
    while attempts < 2:
        models.QUESTIONS.wait_until_none(cancel)
        if cancel is not None and cancel.is_set():
            raise _LabellingCancelled
        try:
            reply = llm.invoke(messages).content
        except models.BackgroundCancelled:
            raise _LabellingCancelled from None
        except models.YieldedToQuestion:
            log.debug("Page %d: labelling paused for a question", number)
            continue
        attempts += 1
        parsed = parse_enrichment(reply)
        if parsed:
            return parsed
        log.debug("Page %d: unparseable enrichment reply (attempt %d): %r", number, attempts, reply[:200])
        messages += [AIMessage(reply), HumanMessage(prompts.ENRICH_RETRY)]
    return None


def pages_to_enrich(collection) -> list[int]:
    got = collection.get(where={"enriched": False}, include=["metadatas"])
    return sorted({m["page"] for m in got["metadatas"]})


def enrich_document(
    collection,
    llm: BaseChatModel | None = None,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> int:
    """Give every not-yet-labelled page a title and keywords; returns pages labelled now.

    Each page is written as soon as it is labelled, so a stop (``cancel`` set,
    Ctrl-C, a crash) loses at most the page in hand and a later call resumes.
    ``cancel`` is seen between pages, while waiting for a question to end, and
    (embedded model) at the next step of a reply in flight.
    A page whose two replies were unusable is marked ``label_failed`` (no title,
    no keywords; its text still counts) and counted in the collection's
    ``label_failed_pages``; it is not asked again.
    """
    progress = progress or _no_progress
    todo = pages_to_enrich(collection)
    if not todo:
        return 0
    llm = models.for_background_json(llm or models.get_chat_model(), config.ENRICH_MAX_TOKENS, prompts.ENRICH_SCHEMA, cancel)
    texts = page_texts(collection)
    total_pages = collection.metadata["pages"]
    done_before = len(texts) - len(todo)
    failed = collection.metadata.get("label_failed_pages", 0)
    for count, number in enumerate(todo, 1):
        try:
            label = _label_page(llm, number, texts, cancel, collection.metadata.get("language"))
        except _LabellingCancelled:
            log.info("Enrichment of %s cancelled after %d pages", collection.name, count - 1)
            return count - 1
        title, keywords = label or ("", [])
        failed += label is None
        got = collection.get(where={"page": number}, include=["metadatas"])
        metas = [
            {**m, "title": title, "keywords": ", ".join(keywords), "enriched": True, "label_failed": label is None}
            for m in got["metadatas"]
        ]
        write_in_batches(collection, "update", got["ids"], metadatas=metas)
        collection.modify(metadata={**collection.metadata, "enriched_pages": done_before + count, "label_failed_pages": failed})
        message = f"Labelled page {number} of {total_pages}: {title}" if label else f"Page {number} of {total_pages}: no usable label"
        progress(done_before + count, len(texts), message)
    return len(todo)


@dataclass
class EnrichmentProgress:
    done: int = 0
    total: int = 0
    state: str = "queued"  # queued | labelling | done | failed
    message: str = ""
    ahead: int = 0  # while queued: documents to be labelled before this one
    failed_pages: int = 0  # pages whose replies were unusable (see enrich_document)


class BackgroundEnricher:
    """Labels documents' pages in one background thread, one document at a time.

    ``submit()`` queues a collection and returns at once; ``progress()`` can be
    read at any moment (the app polls it to draw progress bars). One thread, not
    one per document, because they would all wait on the same LLM anyway. The
    labeller pauses whenever a question is being asked (``models.QUESTIONS``).
    ``cancel()`` drops a queued document, or stops the one in hand at once, even
    while it waits for a question (its labels so far are kept; submitting it again resumes).
    """

    def __init__(self, client: chromadb.ClientAPI, embedder: Embeddings, llm: Callable[[], BaseChatModel]):
        self._client, self._embedder, self._llm = client, embedder, llm
        self._queue: list[str] = []
        self._progress: dict[str, EnrichmentProgress] = {}
        self._in_hand: tuple[str, threading.Event] | None = None  # the document being labelled, its stop signal
        self._wake = threading.Condition()
        threading.Thread(target=self._work, name="enricher", daemon=True).start()

    def submit(self, collection_name: str) -> None:
        """Queue a document (nothing happens when it is already queued or in hand)."""
        with self._wake:
            current = self._progress.get(collection_name)
            if current is not None and current.state in ("queued", "labelling"):
                return
            self._queue.append(collection_name)
            self._progress[collection_name] = EnrichmentProgress()
            self._wake.notify()

    def progress(self) -> dict[str, EnrichmentProgress]:
        """Each submitted document's state; a queued one knows how many go before it."""
        with self._wake:
            in_hand = sum(p.state == "labelling" for p in self._progress.values())
            for position, name in enumerate(self._queue):
                self._progress[name].ahead = in_hand + position
            return dict(self._progress)

    def cancel(self, collection_name: str) -> None:
        """Stop labelling a document: dropped from the queue, or stopped at once when in hand (at its
        next reply step, or without waiting for an open question). It leaves ``progress()`` now."""
        with self._wake:
            if collection_name in self._queue:
                self._queue.remove(collection_name)
            if self._in_hand is not None and self._in_hand[0] == collection_name:
                self._in_hand[1].set()
            self._progress.pop(collection_name, None)

    def _work(self) -> None:
        while True:  # a daemon thread: it ends with the process; stopping mid-document loses one page at most
            with self._wake:
                while not self._queue:
                    self._wake.wait()
                name = self._queue.pop(0)
                state, cancel = self._progress[name], threading.Event()
                state.state, self._in_hand = "labelling", (name, cancel)
            try:
                self._enrich_one(name, state, cancel)
            finally:
                with self._wake:
                    self._in_hand = None

    def _enrich_one(self, name: str, state: EnrichmentProgress, cancel: threading.Event) -> None:
        def report(done: int, total: int, message: str) -> None:
            state.done, state.total, state.message = done, total, message

        try:
            collection = _complete_collection(self._client, name)  # any embedder: labels come from the text
            state.total, state.done = collection.metadata["pages"], collection.metadata.get("enriched_pages", 0)
            enrich_document(collection, self._llm(), progress=report, cancel=cancel)
            state.failed_pages = collection.metadata.get("label_failed_pages", 0)
            if not cancel.is_set():  # a cancelled document has already left progress()
                state.state = "done"
        except Exception as err:  # a removed document, a model that went away: report, keep the thread alive
            if cancel.is_set() or _collection_or_none(self._client, name) is None:
                with self._wake:  # removed or cancelled while being labelled: nothing to report
                    if self._progress.get(name) is state:
                        del self._progress[name]
                return
            log.warning("Labelling %s failed: %s", name, err)
            state.state, state.message = "failed", models.explain_failure(err)


# -----------------------------------------------------------------------------
# Command line


def find_pdfs(paths: list[str]) -> list[Path]:
    """Paths named, plus every *.pdf below each folder named (recursively), sorted. A folder
    that happens to be called *.pdf is searched, not listed; anything else named is listed,
    so that a missing file or a dangling link gets its line in the summary."""
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        found.extend(sorted(q for q in p.rglob("*") if q.suffix.lower() == ".pdf" and not q.is_dir()) if p.is_dir() else [p])
    return found


def _bar(current: float, total: int, message: str) -> None:
    width = 30
    filled = int(width * current / max(total, 1))
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {terminal_text(message)[:70]:<70}")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Ingest PDFs (files or folders) into the local store.")
    parser.add_argument("paths", nargs="*", help="PDF files or folders (searched recursively)")
    parser.add_argument("--no-enrich", action="store_true", help="skip LLM page titles/keywords")
    parser.add_argument(
        "--reembed", action="store_true",
        help="re-embed, from their kept PDFs, the documents made with another embedder than the one in use",
    )
    args = parser.parse_args(argv)
    if not args.paths and not args.reembed:
        parser.error("name PDF files or folders, or give --reembed")
    config.setup_logging(logging.WARNING)
    pdfs = find_pdfs(args.paths)
    if args.paths and not pdfs:
        sys.stderr.write("No PDF files found.\n")
        return 1
    try:
        client = get_client()
        sweep_unfinished(client)  # before any ingest: a document this run adds is never swept
        embedder = embedders.get_embeddings()
    except (StoreUnavailableError, models.ModelUnavailableError) as err:  # e.g. EMBED_MODEL names no folder here
        sys.stderr.write(f"{err}\n")
        return 1
    enrich = config.ENRICH_ENABLED and not args.no_enrich
    # (heading while it runs, its row's label, what to do, the status of a success that was not a cache hit)
    jobs = [(str(pdf), display_name(pdf), lambda pdf=pdf: ingest_pdf(pdf, client, embedder, progress=_bar), "ok") for pdf in pdfs]
    if args.reembed:
        try:
            others = documents_made_with_other_embedder(client, embedder)
        except StoreUnavailableError as err:
            sys.stderr.write(f"{err}\n")
            return 1
        current = embedders.embedder_name(embedder)
        if not others:
            sys.stderr.write(terminal_text(f"Every document is embedded with {current}: nothing to re-embed.\n"))
        jobs += [
            (f"Re-embedding {doc.get('doc_name')} ({doc['collection']})", f"{doc.get('doc_name', doc['collection'])} (re-embed)",
             lambda doc=doc: reembed_document(client, embedder, doc["collection"], progress=_bar),
             f"re-embedded with {current} (was {doc.get('embedder')})")
            for doc in others
        ]
    rows, failures = [], 0
    for heading, label, job, done in jobs:
        sys.stderr.write(terminal_text(f"{heading}\n"))
        try:
            result = job()
            if enrich:
                sys.stderr.write("\n")
                enrich_document(open_collection(client, result.collection, embedder), progress=_bar)
            status = "cached" if result.cached else done
            if result.damaged_pages:
                status += f" (damaged: pages {page_ranges(result.damaged_pages)} left out)"
            if result.cut_pages:
                status += f" (text cut: {cut_pages_note(result.cut_pages)})"
            rows.append((label, result.pages, result.chunks, result.ocr_pages, f"{result.seconds:.1f}", status))
        except KeyboardInterrupt:
            sys.stderr.write("\nStopped. Searchable documents stay searchable; enrichment resumes next time.\n")
            return 130
        except (IngestError, models.ModelUnavailableError) as err:
            failures += 1
            rows.append((label, "-", "-", "-", "-", f"FAILED: {err}"))
        sys.stderr.write("\n")
    if not rows:
        return 0
    header = ("file", "pages", "chunks", "ocr pages", "seconds", "status")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(5)]
    for row in [header] + rows:
        sys.stdout.write(terminal_text("  ".join(str(v).ljust(w) for v, w in zip(row[:5], widths)) + "  " + str(row[5])) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
