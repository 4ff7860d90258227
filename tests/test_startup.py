"""What the app, the API and ``ingest.py`` do as they start: remove whole any document whose ingest never
finished (a killed process), leaving alone one a live process is adding; and, when they cannot start, say
why in one plain sentence with no traceback (the real ``uvicorn api:app`` and ``ingest.py`` as subprocesses)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import config
import conversations
import embedders
import extract
import ingest
from conftest import FACT_PAGES, REPO, TEST_LLM, free_port, write_text_pdf
from evaluation import bench
from retriever import Retriever
from test_api import start_server
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


@pytest.mark.slow  # starts the API server
def test_the_api_sweeps_its_store_as_it_starts(tmp_path, three_page_pdf):
    folder = tmp_path / "store"
    orphan = ingest.kept_pdf_path("pdf_rag_0123456789abcdef", folder)  # a PDF copied by an ingest killed before its collection
    orphan.parent.mkdir(parents=True)
    shutil.copyfile(three_page_pdf, orphan)
    proc, url = start_server(tmp_path)
    try:
        assert not orphan.exists()
        assert httpx.get(f"{url}/api/documents").json()["documents"] == []
    finally:
        bench.stop_api_server(proc)
    assert "Removed a document (pdf_rag_0123456789abcdef), whose ingest never finished" in (tmp_path / "rag.log").read_text()


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


# -----------------------------------------------------------------------------
# A start-up that cannot happen says why in one sentence


def link_loop(tmp_path: Path) -> Path:
    """Two symbolic links naming each other."""
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    return tmp_path / "loop-a"


def test_a_symbolic_link_loop_is_named_as_such_wherever_a_path_is_taken(tmp_path):
    loop = link_loop(tmp_path)
    assert config.is_link_loop(loop) and config.is_link_loop(loop / "inside.pdf")
    assert not config.is_link_loop(tmp_path / "missing") and not config.is_link_loop(tmp_path)
    with pytest.raises(extract.FileProblemError, match="^loop-a is a symbolic link loop, not a file.$"):
        extract.open_pdf(loop)
    with pytest.raises(embedders.ModelUnavailableError, match="EMBED_MODEL names '.*loop-a', which is a symbolic link loop"):
        embedders.local_model(str(loop), "EMBED_MODEL")
    with pytest.raises(ingest.StoreFolderError, match="is a symbolic link loop"):
        ingest.get_client(str(loop))
    with pytest.raises(conversations.ConversationStoreError, match="loop-a is a symbolic link loop, not a file.$"):
        conversations.list_conversations(loop)


def api_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    """The environment of ``uvicorn api:app`` on a store of its own, the small models, no model server; ``settings`` on top."""
    return {**os.environ, "CHROMA_PERSIST_DIR": str(tmp_path / "store"), "CHROMA_HOST": "", "LOG_FILE": str(tmp_path / "rag.log"),
            "LLM_BACKEND": "embedded", "EMBEDDED_LLM": TEST_LLM, "EMBED_BACKEND": "embedded", "ENRICH_ENABLED": "false",
            "OLLAMA_BASE_URL": "http://127.0.0.1:9", "API_TOKEN": "", **settings}


def start_api(port: int, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run the real ``uvicorn api:app`` on ``port`` until it exits (each case here makes it exit)."""
    return subprocess.run([sys.executable, "-m", "uvicorn", "api:app", "--host", "127.0.0.1", "--port", str(port)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def failed_plainly(run: subprocess.CompletedProcess, sentence: str) -> None:
    assert run.returncode != 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    assert sentence in run.stderr, run.stderr[-3000:]
    assert run.stderr.count(sentence) == 1, run.stderr[-3000:]  # said once


# (case, its settings given tmp_path, the sentence's telling part)
START_UP_FAILURES = [
    ("bad embedder setting", lambda tmp: {"EMBED_BACKEND": "bogus"}, "Setting EMBED_BACKEND='bogus' is not one of: auto, embedded"),
    ("embedder folder missing", lambda tmp: {"EMBED_BACKEND": "local", "EMBED_MODEL": str(tmp / "no-model")},
     "but there is no such folder or file on this machine"),
    ("model file not a model", lambda tmp: {"EMBED_BACKEND": "local", "EMBED_MODEL": str(write_text_pdf(tmp / "model.pdf", ["x"]))},
     "a file but not an ONNX model (.onnx)"),
    ("store folder cannot be made", lambda tmp: {"CHROMA_PERSIST_DIR": str(write_text_pdf(tmp / "a-file.pdf", ["x"]) / "store")},
     "a-file.pdf/store cannot be created (Not a directory). Set CHROMA_PERSIST_DIR to a folder this user can write to."),
    ("store folder is a link loop", lambda tmp: {"CHROMA_PERSIST_DIR": str(link_loop(tmp))}, "loop-a is a symbolic link loop."),
    ("log file cannot be written", lambda tmp: {"LOG_FILE": str(write_text_pdf(tmp / "a-file.pdf", ["x"]) / "rag.log")},
     "rag.log' cannot be written (Not a directory)"),
]


@pytest.mark.slow  # starts the API server
@pytest.mark.parametrize("case, settings, sentence", START_UP_FAILURES, ids=[case for case, _, _ in START_UP_FAILURES])
def test_the_api_that_cannot_start_says_why_in_one_sentence_without_a_traceback(tmp_path, case, settings, sentence):
    failed_plainly(start_api(free_port(), api_env(tmp_path, **settings(tmp_path))), sentence)


@pytest.mark.slow  # starts the API server
def test_an_api_store_folder_that_cannot_be_written_is_said_in_one_sentence(tmp_path):
    unwritable = tmp_path / "read-only"
    unwritable.mkdir(mode=0o500)
    if os.access(unwritable, os.W_OK):  # root writes anywhere: a folder of a file system no one writes to
        unwritable = Path("/proc/1")
    if os.access(unwritable, os.W_OK):
        pytest.skip("no folder on this machine is unwritable for this user")
    run = start_api(free_port(), api_env(tmp_path, CHROMA_PERSIST_DIR=str(unwritable)))
    failed_plainly(run, f"The store folder {unwritable} cannot be written to. Set CHROMA_PERSIST_DIR")


@pytest.mark.slow  # starts the API server, with its embedder
def test_an_api_port_already_taken_is_said_in_one_sentence_without_a_traceback(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = start_api(port, api_env(tmp_path))
    failed_plainly(run, f"Port {port} on 127.0.0.1 is already in use by another program: stop it, or start the API on another port")
    assert "Errno" not in run.stderr


@pytest.mark.slow  # runs ingest.py, which loads the embedder
def test_ingest_py_given_a_symbolic_link_loop_names_it_as_such(tmp_path):
    run = subprocess.run([sys.executable, "ingest.py", str(link_loop(tmp_path)), "--no-enrich"], cwd=REPO,
                         env=store_command_env(tmp_path / "store", tmp_path), capture_output=True, text=True, timeout=600)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert "FAILED: loop-a is a symbolic link loop, not a file." in run.stdout
    assert "no such" not in (run.stdout + run.stderr).lower()
