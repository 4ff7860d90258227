"""Two processes ingesting into one store at once (the CLI beside the app): both documents
end complete, and the same PDF twice ends as one collection, not two half ones.

Threads of one process at once (the page labeller beside a question): each model is loaded
once, and labelling cancelled while a question is open stops instead of waiting for it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import pymupdf
import pytest

import config
import embedders
import extract
import ingest
import models
import qa
from conftest import TEST_LLM, write_text_pdf
from retriever import Retriever

REPO = Path(__file__).resolve().parents[1]
PAGES = 12  # enough batches of writes for two ingests to interleave


def topic_pdf(path: Path, topic: str, fact_page: int, fact: str) -> Path:
    """A PDF of PAGES pages about ``topic``, with ``fact`` on page ``fact_page`` only."""
    pages = [
        f"Page {n} on {topic}. " + " ".join(f"Note {i} about {topic} and its everyday details." for i in range(25))
        for n in range(1, PAGES + 1)
    ]
    pages[fact_page - 1] += " " + fact
    return write_text_pdf(path, pages)


def expected_chunks(pdf: Path) -> int:
    """Chunks a text-layer PDF should end with: the chunker applied to each page's text."""
    with pymupdf.open(pdf) as doc:
        return sum(len(extract.chunk_page(page.get_text("text").strip())) for page in doc)


def ingest_at_once(pdfs: list[Path], store: Path) -> list[subprocess.CompletedProcess]:
    """Run ``python ingest.py --no-enrich PDF`` for every PDF at the same time, all on ``store``."""
    env = {**os.environ, "CHROMA_PERSIST_DIR": str(store), "EMBED_BACKEND": "embedded", "CHROMA_HOST": ""}
    procs = [
        subprocess.Popen(
            [sys.executable, str(REPO / "ingest.py"), "--no-enrich", str(pdf)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for pdf in pdfs
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    for result in done:
        assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    return done


def test_two_different_pdfs_ingested_at_once_both_end_complete_and_searchable(store, embedder, tmp_path):
    ships = topic_pdf(tmp_path / "ships.pdf", "ships", 7, "The clipper Thermopylae sailed from London to Melbourne in 60 days.")
    bees = topic_pdf(tmp_path / "bees.pdf", "bees", 4, "A honeybee colony raises a new queen on royal jelly.")
    ingest_at_once([ships, bees], Path(ingest.config.CHROMA_PERSIST_DIR))

    docs = {d["doc_name"]: d for d in ingest.list_documents(store)}
    assert sorted(docs) == ["bees.pdf", "ships.pdf"]
    for pdf in (ships, bees):
        doc = docs[pdf.name]
        assert (doc["status"], doc["pages"], doc["chunks"]) == ("complete", PAGES, expected_chunks(pdf))
        assert store.get_collection(doc["collection"]).count() == doc["chunks"]

    retriever = Retriever(store, embedder)
    hit = retriever.search("How many days did the clipper take to reach Melbourne?")[0]
    assert (hit.doc_name, hit.page) == ("ships.pdf", 7)
    hit = retriever.search("What is a new queen bee fed?")[0]
    assert (hit.doc_name, hit.page) == ("bees.pdf", 4)


def test_the_same_pdf_ingested_twice_at_once_ends_as_one_complete_collection(store, tmp_path):
    pdf = topic_pdf(tmp_path / "ships.pdf", "ships", 7, "The clipper Thermopylae sailed from London to Melbourne in 60 days.")
    runs = ingest_at_once([pdf, pdf], Path(ingest.config.CHROMA_PERSIST_DIR))

    assert sum("cached" in run.stdout for run in runs) == 1  # the lock made the second one wait, then reuse
    [doc] = ingest.list_documents(store, include_incomplete=True)
    assert (doc["status"], doc["chunks"]) == ("complete", expected_chunks(pdf))
    ids = store.get_collection(doc["collection"]).get(include=[])["ids"]
    assert len(ids) == len(set(ids)) == doc["chunks"]


# -----------------------------------------------------------------------------
# The page labeller and a question in one process


@pytest.fixture
def fresh_models(monkeypatch):
    """The app's settings with the small embedded model, and no chat model or embedder loaded yet."""
    for name, value in {"LLM_BACKEND": "embedded", "EMBEDDED_LLM": TEST_LLM, "EMBED_BACKEND": "embedded",
                        "OPENAI_BASE_URL": ""}.items():
        monkeypatch.setattr(config, name, value)
    models.forget_chat_models()
    embedders.forget_embeddings()
    yield
    models.forget_chat_models()
    embedders.forget_embeddings()


def test_the_labeller_and_a_question_starting_together_load_each_model_once(
    fresh_models, store, embedder, three_page_pdf, monkeypatch, caplog
):
    result = ingest.ingest_pdf(three_page_pdf, store, embedder)
    embedder_loads = []
    real_init = embedders.MiniLMEmbeddings.__init__

    def counted_init(self, *args, **kwargs):
        embedder_loads.append(threading.current_thread().name)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(embedders.MiniLMEmbeddings, "__init__", counted_init)  # still the real embedder, counted
    caplog.set_level(logging.INFO, logger="models")
    start, made, errors = threading.Barrier(2), {}, []

    def labeller() -> None:  # what app.enricher() does on the first upload
        try:
            start.wait()
            made["enricher"] = ingest.BackgroundEnricher(store, embedders.get_embeddings(), models.get_chat_model)
            made["enricher"].submit(result.collection)
        except Exception as err:
            errors.append(err)

    def question() -> None:  # what app.py does for a question: a retriever, asking, the chosen model
        try:
            start.wait()
            retriever = Retriever(store)  # its embedder: embedders.get_embeddings(), as the labeller asks for it
            with models.QUESTIONS.asking():
                llm = made["llm"] = models.get_chat_model()
                made["answer"] = qa.answer_question("When did the railway reach the town?", retriever, llm=llm)
        except Exception as err:
            errors.append(err)

    threads = [threading.Thread(target=labeller), threading.Thread(target=question)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors and not any(t.is_alive() for t in threads)
    enricher = made["enricher"]
    deadline = time.monotonic() + 60  # the labeller loads (or is handed) its model, then labels
    while enricher.progress()[result.collection].done < 1 and time.monotonic() < deadline:
        time.sleep(0.2)

    chat_loads = [r for r in caplog.records if r.getMessage().startswith("Loaded embedded chat model")]
    assert len(chat_loads) == 1, [r.getMessage() for r in chat_loads]
    assert len(embedder_loads) == 1, embedder_loads
    assert models.get_chat_model() is made["llm"] and enricher._embedder is embedders.get_embeddings()
    assert enricher.progress()[result.collection].done >= 1  # the labeller did label with the one model
    assert "1889" in made["answer"].text

    enricher.cancel(result.collection)  # leave no labelling running into the next test
    deadline = time.monotonic() + 30
    while result.collection in enricher.progress() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert result.collection not in enricher.progress()


@pytest.mark.parametrize("question_open", [True, False], ids=["question-open", "no-question"])
def test_labelling_cancelled_just_as_a_question_opens_stops_while_the_question_is_still_open(
    store, embedder, three_page_pdf, llm, monkeypatch, question_open
):
    """The race behind the bench hang: the labeller has passed its wait before a model call, then a
    question opens and labelling is cancelled before the call starts. The labeller must stop, not
    wait for the question (which here, as in ``evaluation/bench.py answer --while-labelling``, waits for it)."""
    result = ingest.ingest_pdf(three_page_pdf, store, embedder)
    collection = ingest.open_collection(store, result.collection, embedder)
    at_the_call, go_on = threading.Event(), threading.Event()
    real_request = models.EmbeddedChatModel._request

    def request_after_a_pause(self, *args, **kwargs):  # the labeller's first call holds here: the race window
        if self.background and not at_the_call.is_set():
            at_the_call.set()
            go_on.wait(timeout=60)
        return real_request(self, *args, **kwargs)

    monkeypatch.setattr(models.EmbeddedChatModel, "_request", request_after_a_pause)
    cancel, outcome = threading.Event(), {}

    def label() -> None:
        try:
            outcome["pages"] = ingest.enrich_document(collection, llm, cancel=cancel)
        except Exception as err:
            outcome["error"] = err

    labeller = threading.Thread(target=label, name="labeller", daemon=True)
    labeller.start()
    assert at_the_call.wait(timeout=60)
    with models.QUESTIONS.asking() if question_open else nullcontext():
        cancel.set()
        go_on.set()
        t = time.monotonic()
        labeller.join(timeout=10)
        stopped_s = time.monotonic() - t
        assert not labeller.is_alive(), "the labeller waited for the question instead of seeing cancel"
        assert models.QUESTIONS.busy() == question_open
    assert outcome == {"pages": 0} and stopped_s < 5
    assert ingest.pages_to_enrich(store.get_collection(result.collection)) == [1, 2, 3]  # nothing labelled


def test_the_background_enricher_cancels_a_document_in_hand_while_a_question_is_open(store, embedder, three_page_pdf, llm):
    first = ingest.ingest_pdf(three_page_pdf, store, embedder)
    second_pdf = write_text_pdf(three_page_pdf.with_name("other.pdf"), ["The ferry crossed the sound twice a day."])
    second = ingest.ingest_pdf(second_pdf, store, embedder)
    enricher = ingest.BackgroundEnricher(store, embedder, lambda: llm)
    with models.QUESTIONS.asking():
        enricher.submit(first.collection)
        enricher.submit(second.collection)
        deadline = time.monotonic() + 10
        while enricher.progress()[first.collection].state != "labelling" and time.monotonic() < deadline:
            time.sleep(0.1)
        enricher.cancel(second.collection)  # queued: dropped at once
        assert second.collection not in enricher.progress()
        enricher.cancel(first.collection)  # in hand, waiting for the question: stops without it ending
        deadline = time.monotonic() + 5
        while first.collection in enricher.progress() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert first.collection not in enricher.progress() and models.QUESTIONS.busy()
    assert ingest.pages_to_enrich(store.get_collection(first.collection)) == [1, 2, 3]
    enricher.submit(second.collection)  # the thread lives on: a document submitted again is labelled
    deadline = time.monotonic() + 120
    while enricher.progress()[second.collection].state != "done" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert (enricher.progress()[second.collection].state, enricher.progress()[second.collection].done) == ("done", 1)
