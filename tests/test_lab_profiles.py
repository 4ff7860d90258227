"""The lab passes profiles in (issue 57): an ablation or a benchmark variant is handed to the code it varies
(an ``ingest.IngestProfile``, a store's client, a server's address), and no module outside tests/ assigns
to config, or to another module's names, at run time."""

from __future__ import annotations

import ast
import dataclasses
import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from conftest import FACT_PAGES, REPO, serving, write_text_pdf

import config
import embedders
import eval_retrieval
import ingest
import models

# -----------------------------------------------------------------------------
# Nothing outside tests/ changes config (or another module) at run time


def repo_modules() -> set[str]:
    """The names ``import X`` binds to a module of this repo: its top-level modules and packages."""
    return {p.stem for p in REPO.glob("*.py")} | {p.parent.name for p in REPO.glob("*/__init__.py")}


def module_assignments(source: str, modules: set[str]) -> list[tuple[int, str]]:
    """(line, code) of every assignment to a name of ``config``, or of another module of ``modules`` that the
    source imports as a whole (``import retriever`` ... ``retriever.TOP = 3``): ``=``, ``+=``, annotated,
    ``del``, and ``setattr``/``delattr`` on such a module.

    module_assignments("import config\\nconfig.TOP_K = 3\\n", {"config"}) -> [(2, "config.TOP_K = 3")]
    """
    tree = ast.parse(source)
    imported = {"config"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.asname or alias.name.split(".")[0] for alias in node.names
                         if alias.name.split(".")[0] in modules}
    on_module = lambda node: isinstance(node, ast.Name) and node.id in imported  # noqa: E731
    found = []
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete))
                   else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for target in targets:
            if any(isinstance(t, ast.Attribute) and on_module(t.value) for t in ast.walk(target)):
                found.append((node.lineno, ast.unparse(node)))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr")
                and node.args and on_module(node.args[0])):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_the_finder_sees_every_way_of_assigning_to_a_module_and_nothing_else():
    source = "\n".join([
        "import config", "import retriever as r", "import streamlit as st",
        "config.TOP_K = 3", "config.TOP_K += 1", "config.TOP_K: int = 4", "a, config.LINES = 1, 2", "del config.TOP_K",
        "setattr(config, 'TOP_K', 5)", "r.TOP = 2",  # found: lines 4-10
        "x = config.TOP_K", "config.TOP_K == 3", "st.session_state.pick = 1", "d = {}", "d['config'] = 1",
        "config.STOPWORDS.add('x')",  # a call on a setting's value: not an assignment to a name of config
    ])
    assert [line for line, _ in module_assignments(source, {"config", "retriever"})] == [4, 5, 6, 7, 8, 9, 10]


def test_no_module_outside_tests_assigns_to_config_or_to_another_modules_names():
    modules = repo_modules()
    found = []
    for path in sorted(REPO.rglob("*.py")):
        relative = path.relative_to(REPO)
        if relative.parts[0] == "tests" or any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
            continue
        found += [f"{relative}:{line}: {code}" for line, code in module_assignments(path.read_text(encoding="utf-8"), modules)]
    assert not found, "hand the value in instead (a profile, a parameter):\n" + "\n".join(found)


# -----------------------------------------------------------------------------
# A profile handed in is honoured; the settings stay as they were


def settings() -> dict:
    return {name: getattr(config, name) for name in dir(config) if name.isupper()}


def test_the_flags_make_a_profile_and_what_they_leave_out_keeps_the_setting():
    assert eval_retrieval.ingest_profile() == ingest.IngestProfile(config.EXTRACTOR, config.CHUNK_SIZE, config.CHUNK_OVERLAP)
    assert eval_retrieval.ingest_profile("layout", 300, 0) == ingest.IngestProfile("layout", 300, 0)
    assert eval_retrieval.ingest_profile(chunk_size=0).chunk_size == config.CHUNK_SIZE  # --chunk-size 0: the setting, as before
    assert eval_retrieval.extractor_store("layout", Path("/x/store")) == Path("/x/store-extract-layout")
    assert eval_retrieval.extractor_store(None, Path("/x/store")) == Path("/x/store")


def test_a_default_profile_reads_the_settings_when_it_is_made(monkeypatch):
    monkeypatch.setattr(config, "CHUNK_SIZE", 123)
    assert ingest.IngestProfile().chunk_size == 123  # tests that change a setting still change what ingest does
    with pytest.raises(dataclasses.FrozenInstanceError):
        ingest.IngestProfile().chunk_size = 5


def test_ingest_cuts_chunks_of_the_profiles_size_into_the_store_handed_in(tmp_path, embedder, monkeypatch):
    elsewhere = tmp_path / "settings-store"
    monkeypatch.setattr(config, "CHROMA_PERSIST_DIR", str(elsewhere))  # the settings' store: nothing may land there
    before = settings()
    pdf = write_text_pdf(tmp_path / "facts.pdf", FACT_PAGES)
    folder = tmp_path / "lab-store"
    client = ingest.get_client(str(folder))

    small = ingest.IngestProfile(chunk_size=60, chunk_overlap=0)
    result = ingest.ingest_pdf(pdf, client, embedder, profile=small)

    got = client.get_collection(result.collection).get(include=["documents", "metadatas"])
    spans = [m["end"] - m["start"] for m in got["metadatas"]]
    assert result.chunks == len(spans) > len(FACT_PAGES) and max(spans) <= 60  # the profile's size, not CHUNK_SIZE's 800
    assert all(len(text) <= 60 for text in got["documents"])
    assert ingest.kept_pdf_path(result.collection, folder).exists()  # the kept PDF and the lock: beside the store handed in
    assert (folder / "locks").is_dir() and ingest.store_dir(client) == folder
    assert not elsewhere.exists() and settings() == before

    whole = ingest.ingest_pdf(pdf, ingest.get_client(str(tmp_path / "default-store")), embedder)  # no profile: the settings
    assert whole.chunks == len(FACT_PAGES)  # one chunk per short page at CHUNK_SIZE


def test_the_profiles_extractor_reads_the_pages_and_decides_the_cache(tmp_path, embedder, monkeypatch):
    monkeypatch.setattr(config, "EXTRACTOR", "text")
    pdf = write_text_pdf(tmp_path / "facts.pdf", FACT_PAGES)
    client = ingest.get_client(str(tmp_path / "store"))
    layout = ingest.IngestProfile(extractor="layout")

    first = ingest.ingest_pdf(pdf, client, embedder, profile=layout)
    assert client.get_collection(first.collection).metadata["extractor"] == "layout" and config.EXTRACTOR == "text"
    assert ingest.ingest_pdf(pdf, client, embedder, profile=layout).cached  # made with this profile's extractor: kept
    again = ingest.ingest_pdf(pdf, client, embedder)  # the settings' extractor: rebuilt with it
    assert not again.cached and client.get_collection(again.collection).metadata["extractor"] == "text"


def test_eval_retrieval_hands_its_chunking_and_extractor_to_ingest_and_leaves_the_settings_alone(tmp_path, embedder, monkeypatch):
    (tmp_path / "pdfs").mkdir()
    write_text_pdf(tmp_path / "pdfs" / "facts.pdf", FACT_PAGES)
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps([{"question": "Who kept the lighthouse?", "doc": "facts.pdf", "pages": [1]}]))
    monkeypatch.setattr(config, "CHROMA_PERSIST_DIR", str(tmp_path / "settings-store"))
    monkeypatch.setattr(config, "setup_logging", lambda *args: None)  # no handlers on the test run's root logger
    monkeypatch.setattr(embedders, "get_embeddings", lambda: embedder)
    before = settings()

    code = eval_retrieval.main(["--questions", str(questions), "--store", str(tmp_path / "store"), "--scope", "doc", "--k", "2",
                                "--chunk-size", "40", "--chunk-overlap", "0", "--extractor", "layout", "--ablations", "hybrid",
                                "--no-evidence", "--report", str(tmp_path / "report.md")])

    assert code == 0 and settings() == before
    folder = tmp_path / "store-chunks40-0-extract-layout"  # the policy's own store, named as before
    [doc] = ingest.list_documents(ingest.get_client(str(folder)))
    assert doc["extractor"] == "layout" and ingest.kept_pdf_path(doc["collection"], folder).exists()
    spans = [m["end"] - m["start"] for m in ingest.get_client(str(folder)).get_collection(doc["collection"]).get()["metadatas"]]
    assert max(spans) <= 40
    assert not (tmp_path / "settings-store").exists()


def test_an_outline_is_read_from_the_pdf_kept_beside_the_store_searched(tmp_path, embedder, monkeypatch):
    import pymupdf

    import qa
    from retriever import Retriever
    from test_overview import SECTIONS

    pdf = write_text_pdf(tmp_path / "elmsbridge.pdf", [text for _, pages in SECTIONS for text in pages])
    with pymupdf.open(pdf) as doc:
        doc.set_toc([[1, title, 1 + sum(len(p) for _, p in SECTIONS[:i])] for i, (title, _) in enumerate(SECTIONS)])
        doc.saveIncr()
    monkeypatch.setattr(config, "CHROMA_PERSIST_DIR", str(tmp_path / "settings-store"))  # not where the bench's store is
    client = ingest.get_client(str(tmp_path / "bench-store"))  # as bench summary opens --store
    ingest.ingest_pdf(pdf, client, embedder)

    answer = qa.answer_question("What are the sections of this report?", Retriever(client, embedder), llm=object())  # never called
    assert "4 sections (from its table of contents)" in answer.text  # the kept PDF's outline was found


# -----------------------------------------------------------------------------
# A benchmark's server address is handed to models.get_chat_model


class ModelServer(BaseHTTPRequestHandler):
    """A stand-in OpenAI-compatible server: one model, its context length in /v1/models (as vLLM says it)."""

    asked: list[str] = []

    def do_GET(self):
        self.asked.append(self.path)
        if self.path == "/v1/models":
            payload = json.dumps({"data": [{"id": "bench-model", "max_model_len": 2048}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        else:
            self.send_error(404)

    def do_POST(self):  # no /tokenize: token counts are estimated
        self.asked.append(self.path)
        self.send_error(404)

    def log_message(self, *args):
        pass


@pytest.fixture
def model_server(monkeypatch):
    server = serving(ModelServer)
    monkeypatch.setattr(ModelServer, "asked", [])
    monkeypatch.setattr(config, "OPENAI_BASE_URL", "")  # the settings name no server
    models.forget_chat_models()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    models.forget_chat_models()
    server.shutdown()


def test_a_server_address_handed_in_is_the_one_asked_and_named(model_server):
    llm = models.get_chat_model("openai:", base_url=model_server)  # the server's first model

    assert ModelServer.asked[0] == "/v1/models" and llm.model_name == "bench-model" and llm.context_window == 2048
    assert llm.openai_api_base == model_server and config.OPENAI_BASE_URL == ""
    assert models.chat_model_label(llm) == f"bench-model on {model_server}"
    assert models.get_chat_model("openai:", base_url=model_server) is llm  # loaded once
    with pytest.raises(models.ModelUnavailableError, match="needs OPENAI_BASE_URL"):
        models.get_chat_model("openai:")  # without it, the settings' (none) as before
