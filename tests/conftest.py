"""Shared fixtures: real PDFs made with PyMuPDF, a real Chroma store in a temp dir,
and the real embedded models, loaded once per test session."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pymupdf
import httpx
import pytest

import config
import embedders
import ingest
import models

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = Path(__file__).resolve().parents[2] / "shared" / "bench"  # beside the repo, not in it

# The test suite uses the small embedded chat model: answer quality is not what it tests.
TEST_LLM = "qwen2.5-coder-0.5b"


def shown(markdown: str) -> str:
    """The text that Markdown made by ``safe_text.md`` displays: its backslash escapes and
    invisible word joiners undone."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown).replace("  \n", "\n").replace("\u2060", "")


def bench_file(*parts: str) -> Path:
    """A file of the shared bench (``../shared/bench``, outside this repo); the calling test is skipped, naming the
    file, where that folder or the file is not there."""
    path = BENCH_DIR.joinpath(*parts)
    if not path.is_file():
        pytest.skip(f"needs the shared bench file {path}, which is missing (../shared/bench is not part of this repo)")
    return path


def write_text_pdf(path: Path, pages: list[str]) -> Path:
    """A PDF with one page of real (selectable) text per entry of ``pages``."""
    doc = pymupdf.open()
    for text in pages:
        page = doc.new_page()
        page.insert_textbox(pymupdf.Rect(50, 50, 545, 800), text, fontsize=11)
    doc.save(path)
    doc.close()
    return path


def image_only_page(doc: pymupdf.Document, text: str) -> None:
    """Append a page that shows ``text`` only as a picture (no text layer), like a scan."""
    scratch = pymupdf.open()
    page = scratch.new_page()
    page.insert_textbox(pymupdf.Rect(50, 50, 545, 800), text, fontsize=16)
    pix = page.get_pixmap(dpi=150)
    target = doc.new_page()
    target.insert_image(target.rect, pixmap=pix)
    scratch.close()


# A test that loads a model, opens a store or starts a server is "slow"; the others run in seconds:
# `python -m pytest -m "not slow"` while editing, the whole suite before a commit (and in CI).
HEAVY_FIXTURES = {"embedder", "llm", "default_llm", "store", "llama_server", "serve_app", "ollama_server", "open_api", "token_api"}


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: loads a model, opens a store, starts a server or fuzzes at length")


def pytest_collection_modifyitems(items):
    for item in items:
        if HEAVY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def embedder() -> embedders.MiniLMEmbeddings:
    return embedders.MiniLMEmbeddings()


@pytest.fixture(scope="session")
def llm() -> models.EmbeddedChatModel:
    return models.EmbeddedChatModel.load(TEST_LLM)


@pytest.fixture(scope="session")
def default_llm() -> models.EmbeddedChatModel:
    """The app's default embedded model, for the few tests where answer quality is the point."""
    return models.EmbeddedChatModel.load(config.EMBEDDED_LLM)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A real, empty ChromaDB store on disk; config points at it."""
    path = tmp_path / "chroma_store"
    monkeypatch.setattr(config, "CHROMA_PERSIST_DIR", str(path))
    return ingest.get_client(str(path))


# A document as if another embedder had made it (the re-embedding tests of ingest, retriever and the store viewer)
OTHER_EMBEDDER = "ollama:nomic-embed-text"


def pretend_made_by(client, collection_name: str, embedder_name: str = OTHER_EMBEDDER) -> None:
    """Record another embedder on a collection, as if another embedder had made it (modify replaces
    the whole metadata, so every other key is written back)."""
    col = client.get_collection(collection_name)
    col.modify(metadata={**col.metadata, "embedder": embedder_name})


# The three pages of facts.pdf, the suite's small document with known answers.
FACT_PAGES = [
    "Chapter 1. The lighthouse keeper of Port Elwin was Margaret Tolland. "
    "She kept the lamp burning for forty-one winters without missing a night.",
    "Chapter 2. The harbour's fishing fleet landed mostly cod and haddock. "
    "In 1911 the catch reached 3,200 tonnes, a record for the coast.",
    "Chapter 3. The railway reached the town in 1889. Trains to the capital "
    "took nine hours and carried mail, fish and passengers.",
]

# A small income statement as Markdown rows (the checker's and the answer tests' table)
INCOME_TABLE = ("Consolidated statement of income (in millions)\n| | 2023 | 2022 |\n| Net sales | 3,226.8 | 2,729.4 |\n"
                "| Operating income | 412.0 | 318.0 |\n| Net income | 296.0 | 223.0 |")


@pytest.fixture
def three_page_pdf(tmp_path) -> Path:
    return write_text_pdf(tmp_path / "facts.pdf", FACT_PAGES)


def held_chats(ollama_server, monkeypatch, timeout: float) -> tuple[threading.Event, threading.Event]:
    """Make the Ollama stand-in hold every chat reply until ``release`` is set (at most ``timeout`` s); ``asked`` is
    set when a chat arrives. Returns (asked, release): a test sees what the app shows while the model "writes"."""
    asked, release = threading.Event(), threading.Event()
    reply_now = ollama_server.do_POST

    def held(handler):
        if handler.path == "/api/chat":
            asked.set()
            release.wait(timeout=timeout)
        reply_now(handler)

    monkeypatch.setattr(ollama_server, "do_POST", held)
    return asked, release


def release_pdf(path: Path) -> Path:
    """A short earnings release: the company named on its first page (its file name does not), a balance sheet on the second."""
    doc = pymupdf.open()
    doc.new_page().insert_textbox(pymupdf.Rect(50, 50, 545, 800), "Harbor Lane Outfitters Reports Fourth Quarter and Fiscal 2019 "
                                  "Results. PORTLAND, Maine. Harbor Lane Outfitters, Inc. today reported net sales of $412 million "
                                  "for fiscal 2019. " + "The company sells outdoor clothing through its stores and online. " * 6,
                                  fontsize=11)
    page = doc.new_page()
    page.insert_text((50, 60), "Condensed Consolidated Balance Sheets", fontsize=12)
    page.insert_text((50, 78), "(In thousands)", fontsize=9)
    for x, year in zip((330, 410), ("2019", "2018")):
        page.insert_text((x, 100), year, fontsize=10)
    for row, (label, figures) in enumerate([("Cash and cash equivalents", ("3,138", "2,249")), ("Inventories", ("8,020", "7,511")),
                                            ("Total current assets", ("16,525", "15,134")), ("Total assets", ("45,400", "40,830"))]):
        for x, text in zip((50, 330, 410), (label, *figures)):
            page.insert_text((x, 122 + row * 18), text, fontsize=10)
    doc.new_page().insert_textbox(pymupdf.Rect(50, 50, 545, 800), "Forward-looking statements involve risks. " * 20, fontsize=11)
    doc.save(path)
    return path


# -----------------------------------------------------------------------------
# A local server speaking Ollama's HTTP API (no Ollama can run here): /api/tags,
# /api/embed (the embedders and the Ollama reranker) and streamed /api/chat, with Ollama's own error for a missing model.


class FakeOllama(BaseHTTPRequestHandler):
    models: list[str] = []

    def do_GET(self):
        if self.path == "/api/tags":
            self._json({"models": [{"name": m, "model": m} for m in self.models]})
        else:
            self.send_error(404)

    reply = "The railway reached the town in 1889 [1]."
    replies: list[str] = []  # when set, one per chat request, in order (then `reply`)
    chats: list[dict] = []  # the chat requests received, when a test sets a list here
    embeds: list[dict] = []  # the embedding requests received, when a test sets a list here

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/api/chat":
            self.chats.append(body)
            reply = self.replies.pop(0) if self.replies else self.reply
            if body["model"] not in self.models:
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps({"error": f"model '{body['model']}' not found"}).encode())
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.end_headers()
            for word in reply.split(" "):
                line = {"model": body["model"], "created_at": "2026-11-23T00:00:00Z",
                        "message": {"role": "assistant", "content": word + " "}, "done": False}
                self.wfile.write((json.dumps(line) + "\n").encode())
            done = {"model": body["model"], "created_at": "2026-11-23T00:00:00Z", "message": {"role": "assistant", "content": ""},
                    "done": True, "done_reason": "stop", "total_duration": 1, "prompt_eval_count": 1, "eval_count": 1}
            self.wfile.write((json.dumps(done) + "\n").encode())
        elif self.path == "/api/embed":
            self.embeds.append(body)
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            self._json({"model": body["model"], "embeddings": [[float(len(t)), 1.0, 0.0] for t in inputs]})
        else:
            self.send_error(404)

    def _json(self, data):
        payload = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def serving(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A stand-in server on a free port of this machine, answering with ``handler`` on a thread of its own."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def ollama_server(monkeypatch):
    server = serving(FakeOllama)
    monkeypatch.setattr(config, "OLLAMA_BASE_URL", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setattr(config, "OPENAI_BASE_URL", "")  # "auto" would try a model server first
    embedders.get_embeddings.cache_clear()
    yield FakeOllama
    server.shutdown()
    embedders.get_embeddings.cache_clear()


# -----------------------------------------------------------------------------
# A real OpenAI-compatible model server: llama.cpp's, in its own process, with the small model

SERVER_KEY, SERVER_MODEL = "test-key", "qwen-small"


@pytest.fixture
def ollama_chat(ollama_server, monkeypatch):
    """The app's chat model is the Ollama stand-in (``ollama_server``), holding the default model and recording
    this test's chat requests in ``chats``; a test sets its ``replies`` (or other ``models``)."""
    monkeypatch.setattr(config, "LLM_BACKEND", "ollama")
    monkeypatch.setattr(ollama_server, "models", [config.OLLAMA_DEFAULT_LLM])
    monkeypatch.setattr(ollama_server, "chats", [])
    models.forget_chat_models()
    yield ollama_server
    models.forget_chat_models()


@pytest.fixture(scope="session")
def llama_server() -> str:
    """Start llama.cpp's OpenAI-compatible server (tests/llama_server.py) once per session; its /v1 URL.
    It asks for the key ``SERVER_KEY`` and calls its one model ``SERVER_MODEL``."""
    port = free_port()
    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "llama_server.py"), str(port), SERVER_KEY, SERVER_MODEL],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = server.stdout.readline()
    if not line.startswith("ready"):
        server.kill()
        raise RuntimeError(f"llama.cpp server did not start: {line}{server.stdout.read()}")
    yield f"http://127.0.0.1:{port}/v1"
    server.kill()
    server.wait(timeout=30)


@pytest.fixture
def server_backend(llama_server, monkeypatch):
    """Settings that make the app answer with the llama.cpp server (LLM_BACKEND=openai)."""
    for name, value in {"LLM_BACKEND": "openai", "OPENAI_BASE_URL": llama_server, "OPENAI_API_KEY": SERVER_KEY,
                        "LLM_MODEL": ""}.items():
        monkeypatch.setattr(config, name, value)
    models.forget_chat_models()
    yield llama_server
    models.forget_chat_models()


# -----------------------------------------------------------------------------
# The real app, served by `streamlit run` (with the repo's .streamlit/config.toml)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_healthy(url: str, server: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"streamlit exited early:\n{server.stdout.read()}")
        try:
            if urllib.request.urlopen(url, timeout=2).read() == b"ok":
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"streamlit did not answer {url} within {timeout}s")


@pytest.fixture
def serve_app(tmp_path):
    """Start the real app with `streamlit run` on a temp store and the small embedded model
    (``flags`` are added to the command line, ``env`` overrides settings); returns its URL."""
    servers = []

    def start(*flags: str, **env: str) -> str:
        port = free_port()
        settings = {
            **os.environ,
            "CHROMA_PERSIST_DIR": str(tmp_path / "store"),
            "LOG_FILE": str(tmp_path / "app.log"),
            "LLM_BACKEND": "embedded",
            "EMBED_BACKEND": "embedded",
            "EMBEDDED_LLM": "qwen2.5-coder-0.5b",
            "ENRICH_ENABLED": "false",
            **env,
        }
        server = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true", *flags],
            cwd=REPO, env=settings, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        servers.append(server)
        wait_until_healthy(f"http://127.0.0.1:{port}/_stcore/health", server)
        return f"http://127.0.0.1:{port}"

    yield start
    for server in servers:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def api(server):
    """An HTTP client of the test module's own ``server`` fixture (a URL): each module that starts a server
    defines ``server``, and this fixture follows it."""
    with httpx.Client(base_url=server, timeout=300) as client:
        yield client
