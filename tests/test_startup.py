"""What the app, the API and ``ingest.py`` do as they start: remove whole any document whose ingest never
finished (a killed process), leaving alone one a live process is adding."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import config
import ingest
from conftest import FACT_PAGES, REPO, write_text_pdf
from retriever import Retriever
from test_security import files_holding, live_segments, segment_folders

# -----------------------------------------------------------------------------
# An ingest killed midway leaves nothing behind once the store is opened again

PHRASE = "Quorvath-Lindqvist ledger 7741"  # on every page of the document whose ingest is killed

INGEST_IN_CHILD = """
import sys
sys.path.insert(0, {repo!r})
import config, embedders, ingest
config.PAGE_BATCH_SIZE = 2  # many small writes, so passages are in the store long before the end
ingest.ingest_pdf({pdf!r}, ingest.get_client({store!r}), embedders.MiniLMEmbeddings())
"""


def start_ingest_and_kill_it_mid_embedding(pdf: Path, folder: Path) -> None:
    """Ingest ``pdf`` into the store ``folder`` in a child process and SIGKILL it as soon as passages of it are
    in the store, with most pages still to embed."""
    child = subprocess.Popen([sys.executable, "-c", INGEST_IN_CHILD.format(repo=str(REPO), pdf=str(pdf), store=str(folder))],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    database, deadline = folder / "chroma.sqlite3", time.monotonic() + 600
    while not (database.exists() and PHRASE.encode() in database.read_bytes()):
        assert child.poll() is None, f"the ingest ended before it was killed: {child.stdout.read().decode()[-2000:]}"
        assert time.monotonic() < deadline, "no passage of the document reached the store in 600 s"
        time.sleep(0.1)
    child.kill()
    assert child.wait(timeout=60) == -9


def store_command_env(folder: Path, tmp_path: Path) -> dict[str, str]:
    """The environment of a command run on the store ``folder``: the built-in embedder, no model server."""
    return {**os.environ, "CHROMA_PERSIST_DIR": str(folder), "CHROMA_HOST": "", "LOG_FILE": str(tmp_path / "rag.log"),
            "EMBED_BACKEND": "embedded", "ENRICH_ENABLED": "false"}


def test_an_ingest_killed_mid_embedding_is_swept_whole_at_start_up_unless_a_live_process_holds_it(store, embedder, tmp_path):
    folder = Path(config.CHROMA_PERSIST_DIR)
    kept = ingest.ingest_pdf(write_text_pdf(tmp_path / "facts.pdf", FACT_PAGES), store, embedder)
    pages = [f"Page {n}. {PHRASE} records the sale of lot {n}. " * 10 for n in range(80)]
    half = write_text_pdf(tmp_path / "ledger.pdf", pages)
    name = ingest.collection_name_for(ingest.file_sha256(half))

    start_ingest_and_kill_it_mid_embedding(half, folder)

    assert files_holding(folder, PHRASE.encode()) and ingest.kept_pdf_path(name, folder).exists()  # there before
    assert [d["status"] for d in ingest.list_documents(store, include_incomplete=True) if d["collection"] == name] == ["ingesting"]
    with ingest._file_lock(name.removeprefix(config.COLLECTION_PREFIX), folder):  # as a live process adding it would
        assert ingest.sweep_unfinished(store) == []
    assert files_holding(folder, PHRASE.encode())  # left alone while its lock was held

    started = subprocess.run([sys.executable, "ingest.py", str(tmp_path / "facts.pdf"), "--no-enrich"], cwd=REPO,
                             env=store_command_env(folder, tmp_path), capture_output=True, text=True, timeout=600)

    assert started.returncode == 0, started.stderr[-3000:]
    assert f"Removed ledger.pdf ({name}), whose ingest never finished" in started.stderr  # the log's line for it
    assert "cached" in started.stdout  # the finished document was found whole
    assert files_holding(folder, PHRASE.encode(), PHRASE.encode("utf-16-le")) == []  # not a byte of it, in any file
    assert not ingest.kept_pdf_path(name, folder).exists() and not list((folder / "pdfs").glob(f"{name}*"))
    assert segment_folders(folder) <= live_segments(folder)  # no vector index folder without its collection
    assert [d["collection"] for d in ingest.list_documents(store, include_incomplete=True)] == [kept.collection]
    assert store.get_collection(kept.collection).count() == kept.chunks
    assert Retriever(store, embedder).search("Who kept the lighthouse?")[0].doc_name == "facts.pdf"


def test_a_kept_pdf_without_a_finished_collection_is_swept_and_a_finished_document_is_not(store, embedder, three_page_pdf):
    folder = Path(config.CHROMA_PERSIST_DIR)
    kept = ingest.ingest_pdf(three_page_pdf, store, embedder)
    orphan = "pdf_rag_0123456789abcdef"  # killed after its PDF was copied, before its collection was made
    shutil.copyfile(three_page_pdf, ingest.kept_pdf_path(orphan, folder))
    shutil.copyfile(three_page_pdf, ingest.kept_pdf_path(orphan, folder).with_suffix(".partial"))

    assert ingest.sweep_unfinished(store) == [orphan]

    assert sorted(p.name for p in (folder / "pdfs").iterdir()) == [f"{kept.collection}.pdf"]
    assert ingest.sweep_unfinished(store) == []  # nothing left to sweep; the finished document stays
    assert store.get_collection(kept.collection).count() == kept.chunks


def test_a_rebuild_stopped_between_its_two_swap_writes_is_swapped_in_at_start_up(store, embedder, three_page_pdf):
    kept = ingest.ingest_pdf(three_page_pdf, store, embedder)
    old = store.get_collection(kept.collection)
    rows = old.get(include=["documents", "metadatas", "embeddings"])
    staging = store.create_collection(kept.collection + ingest.REBUILD_SUFFIX, metadata={**old.metadata, "status": "rebuilt"},
                                      configuration={"hnsw": {"space": "cosine"}}, embedding_function=None)
    staging.add(ids=rows["ids"], documents=rows["documents"], metadatas=rows["metadatas"], embeddings=rows["embeddings"])
    store.delete_collection(kept.collection)  # the swap's first write; killed before its second
    assert ingest.list_documents(store) == []

    assert ingest.sweep_unfinished(store) == []  # nothing removed: the whole copy is the document

    [doc] = ingest.list_documents(store)
    assert doc["collection"] == kept.collection and doc["chunks"] == kept.chunks
    assert ingest.kept_pdf_path(kept.collection).exists()
    assert Retriever(store, embedder).search("Who kept the lighthouse?")[0].doc_name == "facts.pdf"
