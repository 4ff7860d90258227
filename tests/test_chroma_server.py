"""The same library over a real ChromaDB server: ``chroma run`` in a subprocess, reached
through ``CHROMA_HOST`` / ``CHROMA_PORT``, with the real embedded embedder."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

import config
import ingest
from retriever import Retriever

SERVER_START_SECONDS = 60
HTTP_API = "chromadb.api.fastapi.FastAPI"  # what chromadb.HttpClient talks through
# What the LLM says for every page: the label itself is not what these tests are about.
LABEL = '{"title": "Railway history", "keywords": ["trains", "1889"]}'


def free_port() -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def chroma_executable() -> str:
    """The ``chroma`` CLI of this Python's chromadb (next to the interpreter), else the one on PATH."""
    beside = Path(sys.executable).parent / "chroma"
    found = str(beside) if beside.exists() else shutil.which("chroma")
    if not found:
        pytest.fail("The `chroma` command (installed with chromadb) was not found next to Python or on PATH.")
    return found


def wait_for_heartbeat(proc: subprocess.Popen, port: int, log_path: Path) -> None:
    """Return once the server answers its heartbeat; fail with its output if it dies or is slow."""
    url = f"http://127.0.0.1:{port}/api/v2/heartbeat"
    deadline = time.monotonic() + SERVER_START_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"`chroma run` exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:  # not listening yet
            time.sleep(0.2)
    pytest.fail(f"`chroma run` did not answer {url} within {SERVER_START_SECONDS}s:\n{log_path.read_text()[-3000:]}")


@contextmanager
def running_chroma(root: Path) -> Iterator[int]:
    """A real ChromaDB server on a free local port, with its data under ``root``: yields the port."""
    port = free_port()
    log_path = root / "server.log"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            [chroma_executable(), "run", "--path", str(root / "data"), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_heartbeat(proc, port, log_path)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory) -> Iterator[int]:
    with running_chroma(tmp_path_factory.mktemp("chroma_server")) as port:
        yield port


def point_config_at_server(monkeypatch, port: int, tmp_path: Path) -> None:
    monkeypatch.setattr(config, "CHROMA_HOST", "127.0.0.1")
    monkeypatch.setattr(config, "CHROMA_PORT", port)
    monkeypatch.setattr(config, "CHROMA_PERSIST_DIR", str(tmp_path / "local"))  # locks go here


@pytest.fixture
def server_store(chroma_server, tmp_path, monkeypatch):
    """config points at the server (and keeps locks in tmp_path); yields a client emptied of documents."""
    point_config_at_server(monkeypatch, chroma_server, tmp_path)
    client = ingest.get_client()
    yield client
    for col in client.list_collections():  # the server outlives each test
        client.delete_collection(col.name)


@pytest.mark.slow  # starts another process
def test_get_client_talks_to_the_server_when_chroma_host_is_set(server_store):
    assert server_store.get_settings().chroma_api_impl == HTTP_API
    assert server_store.heartbeat() > 0


def test_a_folder_named_outright_stays_a_folder_even_with_chroma_host_set(server_store, tmp_path):
    local = ingest.get_client(str(tmp_path / "folder"))
    assert local.get_settings().chroma_api_impl != HTTP_API


def test_ingest_list_search_and_delete_over_http(server_store, embedder, three_page_pdf, tmp_path):
    result = ingest.ingest_pdf(three_page_pdf, server_store, embedder)
    assert (result.pages, result.cached) == (3, False) and result.chunks >= 3
    assert (tmp_path / "local" / "locks").is_dir()  # the lock stayed on this machine

    docs = ingest.list_documents(server_store)
    assert [(d["collection"], d["status"], d["pages"], d["chunks"]) for d in docs] == [
        (result.collection, "complete", 3, result.chunks)
    ]
    col = ingest.open_collection(server_store, result.collection, embedder)
    assert col.count() == result.chunks
    assert ingest.ingest_pdf(three_page_pdf, server_store, embedder).cached

    retriever = Retriever(server_store, embedder)
    hits = retriever.search("When did the railway reach the town?")
    assert (hits[0].collection, hits[0].page) == (result.collection, 3)

    ingest.delete_document(server_store, result.collection)
    assert ingest.list_documents(server_store) == []
    retriever.refresh()
    assert retriever.search("When did the railway reach the town?") == []


def test_enrichment_labels_persist_over_http(server_store, embedder, three_page_pdf):
    """enrich_document rewrites chunk metadata (update) and the collection's (modify, which
    replaces the whole dict): every other document fact must survive, and the retriever
    must notice the labels."""

    result = ingest.ingest_pdf(three_page_pdf, server_store, embedder)
    retriever = Retriever(server_store, embedder)
    retriever.search("railway")
    col = ingest.open_collection(server_store, result.collection, embedder)
    assert ingest.enrich_document(col, FakeListChatModel(responses=[LABEL])) == 3

    fresh = ingest.open_collection(ingest.get_client(), result.collection, embedder)
    assert ingest.pages_to_enrich(fresh) == []
    assert fresh.metadata["enriched_pages"] == 3
    assert {k: fresh.metadata[k] for k in ("status", "chunks", "pages", "doc_name")} == {
        "status": "complete", "chunks": result.chunks, "pages": 3, "doc_name": "facts.pdf"
    }
    retriever.refresh()
    assert retriever.search("railway")[0].title == "Railway history"


def test_a_server_that_is_down_gets_a_clear_message(monkeypatch, tmp_path):
    port = free_port()
    point_config_at_server(monkeypatch, port, tmp_path)
    with pytest.raises(ingest.StoreUnavailableError, match=f"127.0.0.1:{port}.*chroma run.*CHROMA_HOST"):
        ingest.get_client()


def test_a_server_that_stops_mid_session_gets_the_same_clear_message(monkeypatch, tmp_path, embedder):
    with running_chroma(tmp_path) as port:
        point_config_at_server(monkeypatch, port, tmp_path)
        client = ingest.get_client()
    with pytest.raises(ingest.StoreUnavailableError, match=f"127.0.0.1:{port}"):
        ingest.list_documents(client)
    with pytest.raises(ingest.StoreUnavailableError):  # not "the document is not in the store"
        ingest.open_collection(client, "pdf_rag_0123456789abcdef", embedder)
