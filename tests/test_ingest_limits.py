"""Issue 49, item 2: a page with a lot of text neither stalls nor breaks an ingest.

Rules tested here, one test (at least) each:
- a page's text is cut at MAX_PAGE_CHARS before chunking, at a word, and the cut is recorded per page
  (``cut_pages``) and reported in the progress messages;
- a page past MAX_PAGE_CHARS is read as plain text, not laid out (EXTRACTOR=layout);
- no store write carries more rows than the store takes (STORE_WRITE_BATCH, or the store's own limit);
- a write the store refuses is a StoreWriteError that names the document, and only ChromaDB's errors are turned;
- a document whose write failed is never listed as complete.

Real parts: PDFs made with PyMuPDF, the embedded MiniLM embedder, a Chroma store on disk.
"""

from __future__ import annotations

import time
from pathlib import Path

import chromadb.errors
import pymupdf
import pytest
from chromadb.api.models.Collection import Collection

import config
import db_viewer
import extract
import ingest
from conftest import pretend_made_by, shown, write_text_pdf
from streamlit.testing.v1 import AppTest
from test_app import APP, sidebar_text, small_model, upload  # noqa: F401  (small_model: the app's fixture)


def write_dense_page_pdf(path: Path, chars: int) -> Path:
    """A one-page PDF whose page holds about ``chars`` characters of selectable text: tens of thousands of
    numbered lines in a tiny font, as a generated report or hidden text can (the file itself stays small)."""
    lines, size = [], 0
    while size < chars:
        n = len(lines)
        lines.append(f"Entry {n}: the harbour office logged vessel {n % 977} arriving with {n % 53} tonnes of cargo.")
        size += len(lines[-1]) + 1
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((20, 30), "\n".join(lines), fontsize=780 / (len(lines) * 1.2))
    doc.save(path, deflate=True, garbage=3)
    doc.close()
    return path


def sentences(count: int, topic: str) -> str:
    return " ".join(f"Sentence {n} of the {topic} record names the harbour dues of year {1900 + n}." for n in range(count))


# -----------------------------------------------------------------------------
# Rule: a page's text is cut at MAX_PAGE_CHARS, at a word, its boxes and running spans with it


def test_cap_page_text_cuts_at_a_word_and_clips_boxes_and_running_spans():
    text = "alpha beta gamma delta epsilon"
    page = extract.Page(4, text, "ocr", [(0, 10, (0, 0, 1, 1)), (11, 22, (0, 1, 1, 2)), (23, 30, (0, 2, 1, 3))], [(17, 30)])
    cut = extract.cap_page_text(page, 20)
    assert cut.text == "alpha beta gamma" and cut.dropped_chars == len(text) - len("alpha beta gamma")
    assert cut.line_boxes == [(0, 10, (0, 0, 1, 1)), (11, 16, (0, 1, 1, 2))]  # the box past the cut is gone
    assert cut.running == [] and (cut.number, cut.source) == (4, "ocr")
    assert extract.cap_page_text(page, len(text)) is page  # a page within the limit is left as it is
    assert extract.cap_page_text(extract.Page(1, "x" * 30, "text"), 20).text == "x" * 20  # no space: cut at the limit


def test_rule_a_page_is_read_at_most_max_page_chars_long(tmp_path, monkeypatch):
    pdf = write_text_pdf(tmp_path / "long.pdf", [sentences(40, "ledger")])
    monkeypatch.setattr(config, "MAX_PAGE_CHARS", 1000)
    with pymupdf.open(pdf) as doc:
        page = extract.read_page(doc.load_page(0))
    assert len(page.text) <= 1000 and page.dropped_chars == len(doc_text(pdf)) - len(page.text) > 0


def test_a_page_past_the_limit_is_read_as_plain_text_not_laid_out(tmp_path, monkeypatch):
    pdf = write_text_pdf(tmp_path / "long.pdf", [sentences(40, "ledger")])
    monkeypatch.setattr(config, "EXTRACTOR", "layout")
    with pymupdf.open(pdf) as doc:
        whole = extract.read_page(doc.load_page(0))
        monkeypatch.setattr(config, "MAX_PAGE_CHARS", 1000)
        cut = extract.read_page(doc.load_page(0))
    assert whole.line_boxes and whole.dropped_chars == 0  # laid out: every line keeps its box
    assert cut.source == "text" and cut.line_boxes == []  # plain text layer: no layout work on it
    assert 500 <= len(cut.text) <= 1000 and len(cut.text) + cut.dropped_chars == len(doc_text(pdf))


def doc_text(pdf: Path) -> str:
    with pymupdf.open(pdf) as doc:
        return doc.load_page(0).get_text("text").strip()


def test_a_page_with_megabytes_of_text_ingests_in_bounded_time_its_cut_recorded_and_reported(store, embedder, tmp_path):
    pdf = write_dense_page_pdf(tmp_path / "dense.pdf", 5_000_000)
    total_chars = len(doc_text(pdf))
    assert total_chars > 4_500_000
    messages: list[str] = []
    t0 = time.perf_counter()
    result = ingest.ingest_pdf(pdf, store, embedder, progress=lambda current, total, message: messages.append(message))
    seconds = time.perf_counter() - t0

    assert seconds < 120, f"took {seconds:.0f} s"  # before the cap: 7,862 passages, then a refused write after 488 s
    [cut] = result.cut_pages
    assert cut["page"] == 1 and cut["kept"] <= config.MAX_PAGE_CHARS and cut["kept"] + cut["dropped"] == total_chars
    note = f"Page 1: kept the first {cut['kept']:,} of {total_chars:,} characters (MAX_PAGE_CHARS)"
    assert note in messages
    [doc] = ingest.list_documents(store)
    assert doc["cut_pages"] == [cut] and doc["status"] == "complete"
    col = ingest.open_collection(store, result.collection, embedder)
    assert max(m["end"] for m in col.get(include=["metadatas"])["metadatas"]) <= cut["kept"]
    assert col.count() == result.chunks < 200
    hit = col.query(query_embeddings=[embedder.embed_query("vessel 12 arriving with 12 tonnes")], n_results=1)
    assert "vessel 12 arriving with 12 tonnes" in hit["documents"][0][0]
    # the store viewer says it too, in its collections table and on the page
    assert db_viewer.collection_rows([doc])[0]["cut pages"] == "1"
    assert db_viewer.page_view([], 1, "T", doc["cut_pages"])["cut"] == note
    assert ingest.cut_pages_note(doc["cut_pages"]) == note


def test_a_cached_document_reports_its_cut_pages_again(store, embedder, tmp_path, monkeypatch):
    monkeypatch.setattr(config, "MAX_PAGE_CHARS", 600)
    pdf = write_text_pdf(tmp_path / "two.pdf", [sentences(20, "first"), "A short second page about tides."])
    first = ingest.ingest_pdf(pdf, store, embedder)
    again = ingest.ingest_pdf(pdf, store, embedder)
    assert again.cached and again.cut_pages == first.cut_pages and [c["page"] for c in first.cut_pages] == [1]


def test_the_app_says_which_pages_were_cut_at_upload_and_in_the_library(store, embedder, tmp_path, small_model, monkeypatch):  # noqa: F811 (small_model: the app's fixture, imported)
    monkeypatch.setattr(config, "MAX_PAGE_CHARS", 600)
    pdf = write_text_pdf(tmp_path / "ledger.pdf", [sentences(20, "ledger"), "A short second page about tides."])
    app = upload(AppTest.from_file(APP, default_timeout=300).run(), pdf)
    [cut] = ingest.list_documents(store)[0]["cut_pages"]
    note = ingest.page_cut_note(cut)
    assert cut["page"] == 1 and note.startswith("Page 1: kept the first ")
    assert shown(app.sidebar.warning[0].value) == f"**ledger.pdf** has pages with more text than is kept: {note}."
    assert f"Text cut: {note}" in sidebar_text(app)  # the library card


def test_a_document_without_a_cut_page_lists_none():
    assert ingest.cut_pages_in({"page_sources": "TT"}) == []  # made before cut_pages was recorded
    cuts = [{"page": n, "kept": 10, "dropped": 5} for n in (2, 3, 4, 5, 9)]
    assert ingest.cut_pages_note(cuts).endswith("; 2 more pages cut (pages 5, 9)")


# -----------------------------------------------------------------------------
# Rule: no store write carries more rows than the store takes


class _Store:
    def __init__(self, limit):
        self.limit = limit

    def get_max_batch_size(self):
        return self.limit


def test_store_write_limit_is_the_lower_of_the_setting_and_the_stores_own(store, monkeypatch):
    monkeypatch.setattr(config, "STORE_WRITE_BATCH", 1000)
    assert ingest.store_write_limit(store) == 1000  # the on-disk store takes 5,461
    assert store.get_max_batch_size() > 1000
    assert ingest.store_write_limit(_Store(300)) == 300
    assert ingest.store_write_limit(_Store(-1)) == 1000  # a server that does not say: the setting
    assert ingest.store_write_limit(None) == 1000


@pytest.fixture
def writes(monkeypatch) -> list[tuple[str, int]]:
    """Every add and update made to a real collection, as (method, rows), the write still done."""
    seen: list[tuple[str, int]] = []
    for method in ("add", "update"):
        real = getattr(Collection, method)

        def spy(self, *args, _real=real, _method=method, **kwargs):
            seen.append((_method, len(kwargs["ids"])))
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(Collection, method, spy)
    return seen


def test_more_passages_than_one_write_takes_are_written_in_several_and_the_document_is_whole(store, embedder, tmp_path, writes, monkeypatch):
    monkeypatch.setattr(config, "STORE_WRITE_BATCH", 4)
    pdf = write_text_pdf(tmp_path / "ledger.pdf", [sentences(12, "ledger"), sentences(12, "tides"), "Page three: the lamp."])
    result = ingest.ingest_pdf(pdf, store, embedder)

    adds = [rows for method, rows in writes if method == "add"]
    assert sum(adds) == result.chunks > 4 and len(adds) > 1 and max(adds) <= 4
    col = ingest.open_collection(store, result.collection, embedder)
    assert ingest.is_complete(col) and col.count() == result.chunks
    hit = col.query(query_embeddings=[embedder.embed_query("the lamp")], n_results=1)
    assert hit["metadatas"][0][0]["page"] == 3


def test_labels_carried_over_by_a_rebuild_are_written_within_the_limit(store, embedder, tmp_path, writes, monkeypatch):
    pdf = write_text_pdf(tmp_path / "ledger.pdf", [sentences(12, "ledger"), sentences(12, "tides")])
    name = ingest.ingest_pdf(pdf, store, embedder).collection
    col = store.get_collection(name)
    got = col.get(include=["metadatas"])
    col.update(ids=got["ids"], metadatas=[{**m, "title": f"Page {m['page']}", "enriched": True} for m in got["metadatas"]])
    col.modify(metadata={**col.metadata, "enriched_pages": 2})
    passages = col.count()
    pretend_made_by(store, name)
    monkeypatch.setattr(config, "STORE_WRITE_BATCH", 3)
    writes.clear()

    ingest.reembed_document(store, embedder, name)
    updates = [rows for method, rows in writes if method == "update"]
    assert sum(updates) == passages and max(updates) <= 3 and len(updates) > 1
    titles = {m["page"]: m["title"] for m in store.get_collection(name).get(include=["metadatas"])["metadatas"]}
    assert titles == {1: "Page 1", 2: "Page 2"}


# -----------------------------------------------------------------------------
# Rule: a write the store refuses says why in a sentence; the document is not listed as complete


class _Refusing:
    """A collection whose writes fail with ``error``."""

    name, metadata = "pdf_rag_00", {"doc_name": "report.pdf"}

    def __init__(self, error: Exception):
        self.error = error

    def add(self, **columns):
        raise self.error


def test_only_chromadbs_own_errors_become_a_store_write_error():
    refused = chromadb.errors.InternalError("Batch size of 7862 is greater than max batch size of 5461")
    with pytest.raises(ingest.StoreWriteError) as err:
        ingest.write_in_batches(_Refusing(refused), "add", ["a"], documents=["t"])
    assert str(err.value).startswith(
        "The store refused to save 'report.pdf' (Batch size of 7862 is greater than max batch size of 5461), "
        "so it was not added or changed. Check that the store's disk has free space and try again"
    )
    with pytest.raises(KeyError):  # a bug in the code stays a bug, with its traceback
        ingest.write_in_batches(_Refusing(KeyError("page")), "add", ["a"], documents=["t"])


def refuse_the_second_batch(embedder, monkeypatch) -> None:
    """The embedder gives the second page batch vectors of another length, which the store refuses
    (a real ChromaDB InvalidArgumentError, after the first batch was written)."""
    real, calls = embedder.embed_documents, []

    def embed(texts):
        calls.append(len(texts))
        vectors = real(texts)
        return vectors if len(calls) == 1 else [v[:10] for v in vectors]

    monkeypatch.setattr(embedder, "embed_documents", embed)
    monkeypatch.setattr(config, "PAGE_BATCH_SIZE", 1)


def test_a_write_the_store_refuses_is_a_sentence_and_leaves_no_document(store, embedder, tmp_path, monkeypatch):
    pdf = write_text_pdf(tmp_path / "harbour.pdf", ["The keeper lit the lamp.", "The fleet landed cod."])
    refuse_the_second_batch(embedder, monkeypatch)
    with pytest.raises(ingest.StoreWriteError) as err:
        ingest.ingest_pdf(pdf, store, embedder)
    message = str(err.value)
    assert message.startswith("The store refused to save 'harbour.pdf' (") and "dimension" in message
    assert "Something went wrong" not in message
    assert ingest.list_documents(store, include_incomplete=True) == []  # the half-written collection was removed
    assert not ingest.kept_pdf_path(ingest.collection_name_for(ingest.file_sha256(pdf))).exists()


def test_a_refused_write_whose_leftover_cannot_be_removed_is_never_listed_as_complete(store, embedder, tmp_path, monkeypatch):
    pdf = write_text_pdf(tmp_path / "harbour.pdf", ["The keeper lit the lamp.", "The fleet landed cod."])

    def server_gone(client, name):
        raise ingest.StoreUnavailableError("The ChromaDB server does not answer.")

    with monkeypatch.context() as failing:  # undone at the end of the block: the store and the embedder work again
        refuse_the_second_batch(embedder, failing)
        failing.setattr(ingest, "delete_document", server_gone)
        with pytest.raises(ingest.StoreWriteError) as err:
            ingest.ingest_pdf(pdf, store, embedder)
    assert "is marked unfinished, so searches ignore it" in str(err.value)  # what was left, in the same sentence chain
    name = ingest.collection_name_for(ingest.file_sha256(pdf))
    half = store.get_collection(name)
    assert half.count() > 0 and not ingest.is_complete(half)  # really half-written...
    assert ingest.list_documents(store) == []  # ...and not a document
    with pytest.raises(ingest.IngestError, match="did not finish"):
        ingest.open_collection(store, name, embedder)

    result = ingest.ingest_pdf(pdf, store, embedder)  # the same file is rebuilt whole
    assert not result.cached and [d["collection"] for d in ingest.list_documents(store)] == [name]
