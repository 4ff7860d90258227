"""Two processes ingesting into one store at once (the CLI beside the app): both documents
end complete, and the same PDF twice ends as one collection, not two half ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pymupdf

import extract
import ingest
from conftest import write_text_pdf
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
