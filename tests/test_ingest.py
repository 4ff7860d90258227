"""Ingestion on real PDFs into a real store with the real embedded embedder."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pymupdf
import pytest

import config
import embedders
import ingest
import models
import prompts
from conftest import OTHER_EMBEDDER, bench_file, image_only_page, pretend_made_by, write_text_pdf
from extract import Page

REPO = Path(__file__).resolve().parents[1]


def top_page(collection, embedder, question: str) -> int:
    hit = collection.query(query_embeddings=[embedder.embed_query(question)], n_results=1)
    return hit["metadatas"][0][0]["page"]


# -----------------------------------------------------------------------------
# Chunking


def _long_table_page(rows: int) -> Page:
    lines = ["Quarterly deliveries by port.", "| Port | Tonnes | Ships |", "|---|---|---|"]
    lines += [f"| Port {n} Inc. | {n * 1000 + 7} | {n} |" for n in range(rows)]
    return Page(1, "\n".join(lines), "text")


def test_chunks_never_cut_a_table_row_and_each_piece_repeats_the_header():
    page = _long_table_page(80)
    records = ingest.chunk_records(page, "0" * 64, "ports.pdf")
    assert len(records) > 2
    rows = {line for line in page.text.splitlines() if line.startswith("| Port ")}
    for _, text, meta in records:
        body = text[meta["header_chars"] :]
        assert page.text[meta["start"] : meta["end"]] == body
        for line in body.splitlines():
            assert line in rows or line in ("|---|---|---|", "Quarterly deliveries by port.", "| Port | Tonnes | Ships |")
        if meta["start"] > page.text.index("|---|"):  # starts inside the table's body
            assert text.startswith("| Port | Tonnes | Ships |\n|---|---|---|\n| Port ")
        else:
            assert meta["header_chars"] == 0


# -----------------------------------------------------------------------------
# Ingest: searchable, page-anchored, cached by content


def test_text_pdf_becomes_searchable_with_page_anchored_chunks(store, embedder, three_page_pdf):
    calls = []
    result = ingest.ingest_pdf(three_page_pdf, store, embedder, progress=lambda *a: calls.append(a))
    assert (result.pages, result.ocr_pages, result.empty_pages, result.cached) == (3, 0, 0, False)
    assert result.collection == ingest.collection_name_for(ingest.file_sha256(three_page_pdf))
    assert result.collection.startswith("pdf_rag_") and len(result.collection) == len("pdf_rag_") + 16

    col = ingest.open_collection(store, result.collection, embedder)
    assert top_page(col, embedder, "Who kept the lamp of the lighthouse?") == 1
    assert top_page(col, embedder, "How many tonnes of fish were caught in 1911?") == 2
    assert top_page(col, embedder, "When did the trains arrive?") == 3

    doc = pymupdf.open(three_page_pdf)
    got = col.get(include=["documents", "metadatas"])
    for text, meta in zip(got["documents"], got["metadatas"]):
        page_text = doc[meta["page"] - 1].get_text("text").strip()
        assert page_text[meta["start"] : meta["end"]] == text
        assert meta["doc_name"] == "facts.pdf" and meta["text_source"] == "text"
    assert calls[-1][0] == calls[-1][1] == 3  # progress reached the end
    stages = [message.split()[0] for _, _, message in calls]
    assert stages == ["Reading"] * 3 + ["Embedding", "Storing", "Indexed"]  # each stage shown while it runs
    assert [c[0] for c in calls] == sorted(c[0] for c in calls)  # the bar never goes back


def test_same_bytes_under_another_name_is_a_cache_hit(store, embedder, three_page_pdf, tmp_path):
    first = ingest.ingest_pdf(three_page_pdf, store, embedder)
    copy = tmp_path / "renamed copy.pdf"
    copy.write_bytes(three_page_pdf.read_bytes())
    second = ingest.ingest_pdf(copy, store, embedder)
    assert second.cached and second.collection == first.collection and second.chunks == first.chunks
    assert len(ingest.list_documents(store)) == 1


def test_removing_a_document_removes_its_kept_pdf(store, embedder, three_page_pdf):
    result = ingest.ingest_pdf(three_page_pdf, store, embedder)
    kept = ingest.kept_pdf_path(result.collection)
    assert kept.read_bytes() == three_page_pdf.read_bytes()
    ingest.delete_document(store, result.collection)
    assert not kept.exists()


def test_image_only_page_is_ocrd_per_page_with_line_boxes(store, embedder, tmp_path):
    doc = pymupdf.open()
    doc.new_page().insert_textbox(pymupdf.Rect(50, 50, 545, 800), "An ordinary page about budgets and spreadsheets.")
    image_only_page(doc, "The submarine cable was laid in 1866 between Ireland and Newfoundland.")
    path = tmp_path / "mixed.pdf"
    doc.save(path)

    result = ingest.ingest_pdf(path, store, embedder)
    assert result.ocr_pages == 1
    col = ingest.open_collection(store, result.collection, embedder)
    assert col.metadata["page_sources"] == "TO"
    ocr_chunks = col.get(where={"page": 2}, include=["documents", "metadatas"])
    text = " ".join(ocr_chunks["documents"]).lower()
    assert "submarine" in text and "1866" in text
    meta = ocr_chunks["metadatas"][0]
    assert meta["text_source"] == "ocr"
    boxes = __import__("json").loads(meta["ocr_boxes"])
    x0, y0, x1, y1 = boxes[0]
    assert 0 <= x0 < x1 <= 595 and 0 <= y0 < y1 <= 842  # PDF points on an A4 page
    assert top_page(col, embedder, "When was the transatlantic telegraph cable laid?") == 2


def test_scan_with_a_small_stamp_in_its_text_layer_is_still_ocrd(store, embedder, tmp_path):
    doc = pymupdf.open()
    image_only_page(doc, "The defendant signed the agreement on March 3rd in the presence of two witnesses.")
    doc[0].insert_text((40, 20), "Case 1:21-cv-0042 Document 7 Filed 05/01/21")  # the stamp a court filing adds
    doc.save(tmp_path / "filing.pdf")
    result = ingest.ingest_pdf(tmp_path / "filing.pdf", store, embedder)
    assert result.ocr_pages == 1
    text = " ".join(ingest.open_collection(store, result.collection, embedder).get()["documents"])
    assert "witnesses" in text


def test_words_drawn_as_vector_outlines_are_ocrd(store, embedder, tmp_path):
    scratch = pymupdf.open()
    bankers = "Bankers: State Bank of India, Bank of Baroda, Bank of India, Citibank N.A., State Bank of Hyderabad, "
    scratch.new_page().insert_textbox(pymupdf.Rect(50, 50, 545, 700), bankers * 3, fontsize=14)
    svg = scratch[0].get_svg_image(text_as_path=True)  # every glyph becomes a path, as in some annual reports
    outlined = pymupdf.open("pdf", pymupdf.open(stream=svg.encode(), filetype="svg").convert_to_pdf())
    assert outlined[0].get_text().strip() == "" and len(outlined[0].get_drawings()) >= 200
    outlined.save(tmp_path / "outlined.pdf")
    result = ingest.ingest_pdf(tmp_path / "outlined.pdf", store, embedder)
    text = " ".join(ingest.open_collection(store, result.collection, embedder).get()["documents"])
    assert result.ocr_pages == 1 and "Baroda" in text


def test_scanned_bench_pdf_is_ocrd(store, embedder):
    result = ingest.ingest_pdf(bench_file("misc", "scan_c03-29.pdf"), store, embedder)
    col = ingest.open_collection(store, result.collection, embedder)
    text = " ".join(col.get()["documents"])
    assert result.ocr_pages == 1 and "Miss Watson" in text


# -----------------------------------------------------------------------------
# Bad input: a typed error with a plain message, and the store untouched


def _encrypted(path: Path) -> Path:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "secret")
    doc.save(path, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="pw", owner_pw="pw")
    return path


def _corrupt(path: Path) -> Path:
    path.write_bytes(b"%PDF-1.7\n" + os.urandom(4000))
    return path


def _not_pdf(path: Path) -> Path:
    path.write_text("Just some notes, saved with the wrong extension.")
    return path


def _zero_pages(path: Path) -> Path:
    path.write_bytes(
        b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
        b"2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
    )
    return path


@pytest.mark.parametrize(
    "make, error, words",
    [
        (_encrypted, ingest.EncryptedPDFError, "password"),
        (_corrupt, ingest.CorruptPDFError, "damaged"),
        (_not_pdf, ingest.NotAPDFError, "not a PDF"),
        (_zero_pages, ingest.IngestError, "no pages"),
    ],
)
def test_bad_pdfs_get_a_clear_error_and_leave_the_store_untouched(store, embedder, three_page_pdf, tmp_path, make, error, words):
    good = ingest.ingest_pdf(three_page_pdf, store, embedder)
    with pytest.raises(error, match=words):
        ingest.ingest_pdf(make(tmp_path / "bad.pdf"), store, embedder)
    assert [c.name for c in store.list_collections()] == [good.collection]


def test_truncated_pdf_is_reported_not_half_stored(store, embedder, tmp_path):
    whole = bench_file("misc", "en_R-data.pdf").read_bytes()
    path = tmp_path / "truncated.pdf"
    path.write_bytes(whole[: len(whole) // 3])
    try:
        result = ingest.ingest_pdf(path, store, embedder)
    except ingest.IngestError as err:
        assert str(err)
        assert store.list_collections() == []
    else:  # PyMuPDF could repair what was left: then it must be stored whole
        assert ingest.is_complete(ingest.open_collection(store, result.collection, embedder))


def test_file_over_the_size_limit_is_refused(store, embedder, three_page_pdf, monkeypatch):
    monkeypatch.setattr(config, "MAX_FILE_MB", 0.001)
    with pytest.raises(ingest.FileTooLargeError, match="MAX_FILE_MB"):
        ingest.ingest_pdf(three_page_pdf, store, embedder)
    assert store.list_collections() == []


def test_image_only_pdf_without_an_ocr_engine_says_so(store, embedder, tmp_path, monkeypatch):
    doc = pymupdf.open()
    image_only_page(doc, "Only a picture of words.")
    doc.save(tmp_path / "scan.pdf")
    monkeypatch.setattr(config, "OCR_ENGINE", "none")
    ingest.ocr_engine.cache_clear()
    try:
        with pytest.raises(ingest.NoTextError, match="no OCR engine"):
            ingest.ingest_pdf(tmp_path / "scan.pdf", store, embedder)
    finally:
        ingest.ocr_engine.cache_clear()
    assert store.list_collections() == []


# -----------------------------------------------------------------------------
# Embedder changes never crash on dimensions


class HalfMiniLM(embedders.MiniLMEmbeddings):
    """A different embedder (other name, other dimension) for the mismatch guard."""

    name = "half-minilm-test"

    def embed_documents(self, texts):
        return [v[:192] for v in super().embed_documents(texts)]


def test_opening_with_another_embedder_gives_a_clear_message_and_reingest_reembeds(store, embedder, three_page_pdf):
    result = ingest.ingest_pdf(three_page_pdf, store, embedder)
    other = HalfMiniLM()
    with pytest.raises(ingest.EmbedderMismatchError, match="cannot be searched until it is re-embedded"):
        ingest.open_collection(store, result.collection, other)
    again = ingest.ingest_pdf(three_page_pdf, store, other)
    assert not again.cached
    col = ingest.open_collection(store, again.collection, other)
    assert len(col.get(include=["embeddings"], limit=1)["embeddings"][0]) == 192


# -----------------------------------------------------------------------------
# Re-embedding a document made with another embedder, from its kept PDF


def label_page(client, collection_name: str, page: int, title: str, keywords: str) -> None:
    """Give one page a title and keywords the way enrich_document writes them."""
    col = client.get_collection(collection_name)
    got = col.get(where={"page": page}, include=["metadatas"])
    col.update(ids=got["ids"], metadatas=[{**m, "title": title, "keywords": keywords, "enriched": True, "label_failed": False}
                                          for m in got["metadatas"]])
    col.modify(metadata={**col.metadata, "enriched_pages": 1, "label_failed_pages": 0})


def test_reembed_rebuilds_from_the_kept_pdf_under_its_name_and_keeps_its_page_labels(store, embedder, three_page_pdf):
    name = ingest.ingest_pdf(three_page_pdf, store, embedder, doc_name="Port Elwin facts.pdf").collection
    label_page(store, name, 2, "The fishing fleet", "cod, haddock, 1911")
    pretend_made_by(store, name)
    three_page_pdf.unlink()  # only the kept copy is left
    [doc] = ingest.list_documents(store)
    assert ingest.made_with_other_embedder(doc, embedder) and not ingest.made_with_other_embedder(doc, OTHER_EMBEDDER)
    assert ingest.documents_made_with_other_embedder(store, embedder) == [doc]
    with pytest.raises(ingest.EmbedderMismatchError, match=f"'Port Elwin facts.pdf' was embedded with '{OTHER_EMBEDDER}'"):
        ingest.open_collection(store, name, embedder)

    stages = []
    result = ingest.reembed_document(store, embedder, name, progress=lambda cur, tot, msg: stages.append(msg))
    assert (result.collection, result.doc_name, result.pages, result.cached) == (name, "Port Elwin facts.pdf", 3, False)
    assert any(s.startswith("Embedding passages") for s in stages)
    col = ingest.open_collection(store, name, embedder)  # no mismatch any more
    assert col.metadata["embedder"] == embedders.embedder_name(embedder) and col.metadata["status"] == "complete"
    assert col.metadata["doc_name"] == "Port Elwin facts.pdf" and col.count() == result.chunks
    assert ingest.kept_pdf_path(name).exists()
    assert [d["collection"] for d in ingest.list_documents(store, include_incomplete=True)] == [name]  # nothing left beside it
    assert top_page(col, embedder, "What fish did the harbour's fleet land?") == 2
    page_two = col.get(where={"page": 2}, include=["metadatas"])["metadatas"]
    assert all(m["title"] == "The fishing fleet" and m["enriched"] for m in page_two)  # labels come from the text: kept
    assert col.metadata["enriched_pages"] == 1 and ingest.pages_to_enrich(col) == [1, 3]
    assert ingest.documents_made_with_other_embedder(store, embedder) == []
    assert ingest.reembed_document(store, embedder, name).cached  # a second click changes nothing


def test_reembed_without_the_kept_pdf_says_so_in_a_sentence_and_deletes_nothing(store, embedder, three_page_pdf):
    name = ingest.ingest_pdf(three_page_pdf, store, embedder).collection
    pretend_made_by(store, name)
    ingest.kept_pdf_path(name).unlink()  # as when another machine added it to a shared server
    before = store.get_collection(name)
    with pytest.raises(ingest.IngestError) as err:
        ingest.reembed_document(store, embedder, name)
    assert str(err.value) == (
        "The PDF of 'facts.pdf' is not on this machine, so it cannot be re-embedded here; add the PDF again."
    )
    after = store.get_collection(name)
    assert after.metadata == before.metadata and after.count() == before.count()
    with pytest.raises(ingest.IngestError, match="not in the store"):
        ingest.reembed_document(store, embedder, "pdf_rag_" + "0" * 16)


def test_a_failed_reembed_leaves_the_document_and_its_pdf_as_they_were(store, embedder, tmp_path, monkeypatch):
    pdf = write_text_pdf(tmp_path / "ledger.pdf", [f"Ledger page {n}: the harbour dues of year {1900 + n}." for n in range(1, 7)])
    name = ingest.ingest_pdf(pdf, store, embedder).collection
    pretend_made_by(store, name)
    before = store.get_collection(name)
    monkeypatch.setattr(config, "PAGE_BATCH_SIZE", 2)

    def fail_midway(current: float, total: int, message: str) -> None:  # as when Ollama's embedder goes away
        if message.startswith("Indexed") and current >= 4:
            raise models.ModelUnavailableError("Ollama is not answering.")

    with pytest.raises(models.ModelUnavailableError):
        ingest.reembed_document(store, embedder, name, progress=fail_midway)
    after = store.get_collection(name)
    assert after.metadata == before.metadata and after.count() == before.count()  # still whole, still the old embedder
    assert ingest.kept_pdf_path(name).exists()
    assert [d["collection"] for d in ingest.list_documents(store, include_incomplete=True)] == [name]
    assert ingest.reembed_document(store, embedder, name).collection == name  # and it can be tried again


REEMBED_CRASHER = """
import os, signal, sys
sys.path.insert(0, {repo!r})
import config, embedders, ingest
config.PAGE_BATCH_SIZE = 1
def die(current, total, message):
    if message.startswith("Indexed") and current >= 2:
        os.kill(os.getpid(), signal.SIGKILL)
ingest.reembed_document(ingest.get_client({store!r}), embedders.MiniLMEmbeddings(), {name!r}, progress=die)
"""


def test_a_killed_reembed_leaves_the_old_document_whole_and_the_next_one_finishes(store, embedder, tmp_path):
    pdf = write_text_pdf(tmp_path / "ledger.pdf", [f"Ledger page {n}: the harbour dues of year {1900 + n}." for n in range(1, 5)])
    name = ingest.ingest_pdf(pdf, store, embedder).collection
    pretend_made_by(store, name)
    before = store.get_collection(name)
    store_dir = ingest.config.CHROMA_PERSIST_DIR
    script = REEMBED_CRASHER.format(repo=str(REPO), store=store_dir, name=name)
    env = {**os.environ, "CHROMA_PERSIST_DIR": store_dir, "TMPDIR": str(tmp_path)}  # its temp copy stays in tmp_path
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=600)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]

    half = store.get_collection(name + ingest.REBUILD_SUFFIX)
    assert half.count() > 0 and not ingest.is_complete(half)  # it really was killed mid-rebuild
    after, chunks = store.get_collection(name), before.count()
    assert after.metadata == before.metadata and after.count() == chunks and ingest.kept_pdf_path(name).exists()
    assert [d["collection"] for d in ingest.list_documents(store)] == [name]  # the old one, as it was

    result = ingest.reembed_document(store, embedder, name)
    assert not result.cached and result.collection == name
    assert [d["collection"] for d in ingest.list_documents(store, include_incomplete=True)] == [name]  # leftover gone
    assert ingest.open_collection(store, name, embedder).count() == chunks


def test_cli_reembeds_every_document_made_with_another_embedder_and_reports_each(store, embedder, tmp_path):
    moved = ingest.ingest_pdf(write_text_pdf(tmp_path / "a.pdf", ["Alpha page about apples."]), store, embedder).collection
    lost = ingest.ingest_pdf(write_text_pdf(tmp_path / "b.pdf", ["Beta page about bees."]), store, embedder).collection
    ingest.ingest_pdf(write_text_pdf(tmp_path / "c.pdf", ["Gamma page about goats."]), store, embedder)
    for name in (moved, lost):
        pretend_made_by(store, name)
    ingest.kept_pdf_path(lost).unlink()
    env = {**os.environ, "CHROMA_PERSIST_DIR": ingest.config.CHROMA_PERSIST_DIR, "EMBED_BACKEND": "embedded"}
    proc = subprocess.run([sys.executable, str(REPO / "ingest.py"), "--reembed", "--no-enrich"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]  # one could not be done
    lines = proc.stdout.splitlines()
    assert len(lines) == 3  # header, then one line per document made with another embedder
    a_line = next(line for line in lines if line.startswith("a.pdf (re-embed)"))
    assert a_line.endswith(f"re-embedded with all-MiniLM-L6-v2 (was {OTHER_EMBEDDER})")
    b_line = next(line for line in lines if line.startswith("b.pdf (re-embed)"))
    assert b_line.endswith("FAILED: The PDF of 'b.pdf' is not on this machine, so it cannot be re-embedded here; add the PDF again.")
    embedders = {d["doc_name"]: d["embedder"] for d in ingest.list_documents(store)}
    assert embedders == {"a.pdf": "all-MiniLM-L6-v2", "b.pdf": OTHER_EMBEDDER, "c.pdf": "all-MiniLM-L6-v2"}


# -----------------------------------------------------------------------------
# Crash safety: kill -9 mid-ingest, then re-run

CRASHER = """
import os, signal, sys
sys.path.insert(0, {repo!r})
import config, embedders, ingest
config.PAGE_BATCH_SIZE = 4
def die(current, total, message):
    if message.startswith("Indexed") and current >= 8:
        os.kill(os.getpid(), signal.SIGKILL)
ingest.ingest_pdf({pdf!r}, ingest.get_client({store!r}), embedders.MiniLMEmbeddings(), progress=die)
"""


def test_a_killed_ingest_never_looks_complete_and_a_rerun_repairs_it(tmp_path, embedder, monkeypatch):
    pdf = bench_file("misc", "en_R-data.pdf")
    store_dir = tmp_path / "store"
    monkeypatch.setattr(config, "CHROMA_PERSIST_DIR", str(store_dir))
    script = CRASHER.format(repo=str(REPO), pdf=str(pdf), store=str(store_dir))
    env = {**os.environ, "CHROMA_PERSIST_DIR": str(store_dir)}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=600)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]

    client = ingest.get_client(str(store_dir))
    name = ingest.collection_name_for(ingest.file_sha256(pdf))
    half = client.get_collection(name)
    assert half.count() > 0 and not ingest.is_complete(half)  # it really was half-written
    assert ingest.list_documents(client) == []  # ...and nobody treats it as a document
    with pytest.raises(ingest.IngestError):
        ingest.open_collection(client, name, embedder)

    rerun = ingest.ingest_pdf(pdf, client, embedder)
    assert not rerun.cached
    clean = ingest.ingest_pdf(pdf, ingest.get_client(str(tmp_path / "clean")), embedder)
    col = ingest.open_collection(client, name, embedder)
    assert ingest.is_complete(col) and col.count() == clean.chunks == rerun.chunks
    assert col.metadata["pages"] == clean.pages


# -----------------------------------------------------------------------------
# Enrichment with the real embedded LLM


def test_parse_enrichment_is_forgiving_but_not_gullible():
    assert ingest.parse_enrichment('Sure! {"title": "Revenue", "keywords": ["sales", "2021"]} done') == (
        "Revenue",
        ["sales", "2021"],
    )
    assert ingest.parse_enrichment('{"title": "X", "keywords": "a, b"}') == ("X", ["a", "b"])
    assert ingest.parse_enrichment("Title: Revenue") is None
    assert ingest.parse_enrichment('{"title": ""}') is None


def test_a_page_is_labelled_in_its_documents_language():
    texts = {1: "Vorwort", 2: "Pakete installiert man mit apt.", 3: "Weiter"}
    german = ingest.label_messages(2, texts, "de")
    assert german[0].content.endswith("Write the title and keywords in German, the language of the page.")
    assert "Pakete installiert man mit apt." in german[1].content and "Vorwort" in german[1].content
    for english in ("en", None):  # an English document keeps the plain prompt
        assert ingest.label_messages(2, texts, english)[0].content == prompts.ENRICH_SYSTEM


def test_a_german_document_is_labelled_with_the_german_prompt(store, embedder, llm, tmp_path, monkeypatch):
    pdf = write_text_pdf(tmp_path / "de.pdf", [
        "Die Paketverwaltung lädt die Archive aus dem Netz und legt sie im Zwischenspeicher ab. "
        "Mit apt-get clean wird dieser Zwischenspeicher geleert, wenn der Platz auf der Platte knapp wird. "
        "Ältere Versionen der Pakete werden dabei nicht mehr gebraucht, denn sie sind längst installiert. "
        "Wer die Archive behalten möchte, sollte sie vorher in ein anderes Verzeichnis kopieren.",
    ])
    result = ingest.ingest_pdf(pdf, store, embedder)
    col = ingest.open_collection(store, result.collection, embedder)
    assert col.metadata["language"] == "de"
    asked = []
    real = ingest.label_messages
    monkeypatch.setattr(ingest, "label_messages", lambda *args: asked.append(real(*args)) or asked[-1])
    assert ingest.enrich_document(col, llm) == 1
    assert asked and asked[0][0].content.endswith("in German, the language of the page.")


def test_enrichment_labels_pages_after_search_works_and_resumes(store, embedder, llm, tmp_path):
    pdf = write_text_pdf(
        tmp_path / "two.pdf",
        [
            "Photosynthesis converts light energy into chemical energy in chloroplasts. "
            "Chlorophyll absorbs red and blue light.",
            "The Krebs cycle takes place in the mitochondria and releases carbon dioxide.",
        ],
    )
    result = ingest.ingest_pdf(pdf, store, embedder)
    col = ingest.open_collection(store, result.collection, embedder)
    assert ingest.pages_to_enrich(col) == [1, 2]  # searchable before any label exists

    cancel = threading.Event()
    labelled = ingest.enrich_document(col, llm, progress=lambda *a: cancel.set(), cancel=cancel)
    assert labelled == 1 and ingest.pages_to_enrich(col) == [2]  # stopped after one page

    col = ingest.open_collection(store, result.collection, embedder)  # as after a restart
    assert ingest.enrich_document(col, llm) == 1
    assert ingest.pages_to_enrich(col) == []
    metas = col.get(include=["metadatas"])["metadatas"]
    for meta in metas:
        assert meta["enriched"] and meta["title"] and not meta["label_failed"]
    assert col.metadata["enriched_pages"] == 2 and col.metadata["label_failed_pages"] == 0


def test_a_page_without_a_usable_label_is_counted_as_failed_not_done(store, embedder, llm, three_page_pdf, monkeypatch):
    monkeypatch.setattr(config, "ENRICH_MAX_TOKENS", 4)  # far too few for the JSON: every reply is cut off
    result = ingest.ingest_pdf(three_page_pdf, store, embedder)
    col = ingest.open_collection(store, result.collection, embedder)
    messages = []
    ingest.enrich_document(col, llm, progress=lambda done, total, message: messages.append(message))
    assert col.metadata["label_failed_pages"] == 3 and col.metadata["enriched_pages"] == 3
    assert all("no usable label" in m for m in messages)
    metas = col.get(include=["metadatas"])["metadatas"]
    assert all(m["label_failed"] and m["title"] == "" for m in metas)  # no made-up "Page N" title in the index


# -----------------------------------------------------------------------------
# Command line


@pytest.mark.slow  # starts another process
def test_cli_ingests_a_folder_and_fails_loudly_on_a_bad_file(tmp_path):
    folder = tmp_path / "docs" / "nested"
    folder.mkdir(parents=True)
    write_text_pdf(folder / "a.pdf", ["Alpha page about apples."])
    (folder / "broken.pdf").write_text("not a pdf")
    env = {**os.environ, "CHROMA_PERSIST_DIR": str(tmp_path / "store"), "EMBED_BACKEND": "embedded"}
    proc = subprocess.run(
        [sys.executable, str(REPO / "ingest.py"), str(tmp_path / "docs"), "--no-enrich"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert "a.pdf" in proc.stdout and "FAILED: broken.pdf is not a PDF" in proc.stdout
    assert len(ingest.list_documents(ingest.get_client(str(tmp_path / "store")))) == 1


def test_the_background_enricher_queues_waits_for_questions_and_survives_a_removed_document(store, embedder, three_page_pdf, llm):
    import time

    result = ingest.ingest_pdf(three_page_pdf, store, embedder)
    enricher = ingest.BackgroundEnricher(store, embedder, lambda: llm)
    with models.QUESTIONS.asking():  # a question is being answered: labelling must wait for it
        enricher.submit("pdf_rag_" + "0" * 16)  # removed before its turn came
        enricher.submit(result.collection)
        assert enricher.progress()[result.collection].ahead == 1  # a queue, shown as one
        time.sleep(3)
        assert enricher.progress()[result.collection].state == "labelling"
        assert ingest.pages_to_enrich(store.get_collection(result.collection)) == [1, 2, 3]  # paused
    deadline = time.monotonic() + 240
    while enricher.progress().get(result.collection, ingest.EnrichmentProgress()).state != "done" and time.monotonic() < deadline:
        time.sleep(0.5)
    progress = enricher.progress()
    assert "pdf_rag_" + "0" * 16 not in progress
    assert (progress[result.collection].state, progress[result.collection].done) == ("done", 3)
    assert progress[result.collection].failed_pages == 0
    labelled = store.get_collection(result.collection).get(include=["metadatas"])["metadatas"]
    assert all(m["enriched"] and m["title"] and not m["label_failed"] for m in labelled)


def test_labels_are_missing_while_a_page_with_text_has_none():
    assert ingest.labels_missing({"pages": 3, "empty_pages": 1, "enriched_pages": 1})
    assert not ingest.labels_missing({"pages": 3, "empty_pages": 1, "enriched_pages": 2})  # an empty page needs no label


def test_a_scanned_document_has_its_language_told_from_its_ocr_text(store, embedder, tmp_path):
    doc = pymupdf.open()
    image_only_page(doc, "Die Bahnstrecke erreichte die Stadt im Jahr 1871. Der Bahnhof wurde neben dem Marktplatz "
                         "errichtet und brachte Händler aus dem ganzen Tal in die Gemeinde. Die Stadtbibliothek besitzt "
                         "zwölftausend Bücher, und das Ausleihen ist für alle Schüler kostenlos.")
    path = tmp_path / "scan.pdf"
    doc.save(path)
    result = ingest.ingest_pdf(path, store, embedder)
    meta = ingest.open_collection(store, result.collection, embedder).metadata
    assert result.ocr_pages == 1 and result.language == meta["language"] == "de"
    assert meta["embedder"] == config.MULTILINGUAL_EMBEDDER_NAME
    assert ingest.ingest_pdf(path, store, embedder).cached  # the same scan again: nothing rebuilt
