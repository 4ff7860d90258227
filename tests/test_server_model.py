"""An OpenAI-compatible model server as the chat model (LLM_BACKEND=openai), against llama.cpp's own
server run by the test (conftest.llama_server): answers stream with checked citations, and every way
the server can fail is one plain sentence after which the next question is answered."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import config
import ingest
import models
import qa
from conftest import REPO, SERVER_KEY, SERVER_MODEL
from retriever import Retriever

QUESTION = "When did the railway reach the town?"


@pytest.fixture
def facts(store, embedder, three_page_pdf):
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    return Retriever(store, embedder)


class CuttingProxy:
    """A TCP proxy in front of the real server that spoils its replies the way a network does:
    ``delay`` seconds of silence before the reply, or the connection cut after ``cut_after`` bytes of it."""

    def __init__(self, upstream_port: int, delay: float = 0.0, cut_after: int | None = None):
        self.upstream_port, self.delay, self.cut_after = upstream_port, delay, cut_after
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
        time.sleep(self.delay)
        self._pipe(upstream, client, self.cut_after)

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket, limit: int | None) -> None:
        sent = 0
        try:
            while data := source.recv(4096):
                if limit is not None and sent + len(data) > limit:
                    target.sendall(data[: limit - sent])
                    break
                target.sendall(data)
                sent += len(data)
        except OSError:
            pass
        for sock in (source, target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.listener.close()


def _port(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


def test_the_server_answers_in_a_stream_with_a_verified_citation(server_backend, facts):
    llm = models.get_chat_model()
    assert isinstance(llm, models.ServerChatModel) and llm.model_name == SERVER_MODEL
    assert models.context_length(llm) == 4096  # asked of the server (llama.cpp's /props), not assumed
    assert models.count_tokens(llm, "hello world") == 2  # counted by the server's own tokenizer
    stream = qa.ask(QUESTION, facts, llm=llm)
    pieces = list(stream)
    answer = stream.result
    assert len(pieces) > 1 and "1889" in answer.text
    assert answer.citations and answer.citations[0].page == 3 and answer.citations[0].verified
    assert answer.model == f"{SERVER_MODEL} on {server_backend}"


def test_the_choices_list_the_embedded_models_and_the_servers(server_backend):
    ids = [c.id for c in models.chat_choices()]
    assert f"openai:{SERVER_MODEL}" in ids and "embedded:qwen2.5-coder-0.5b" in ids
    assert models.default_choice() == f"openai:{SERVER_MODEL}"


def test_page_labels_come_back_as_json_from_the_server(server_backend):
    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    llm = models.for_background_json(models.get_chat_model(), 40, schema)
    reply = llm.invoke("Give a title for a page about a railway reaching a fishing town in 1889.").content
    assert isinstance(json.loads(reply)["title"], str)


def test_a_server_that_is_down_is_a_sentence_and_the_next_question_is_answered(server_backend, facts, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    monkeypatch.setattr(config, "OPENAI_BASE_URL", nowhere)
    with pytest.raises(models.ModelUnavailableError, match="is not answering"):
        models.get_chat_model(f"openai:{SERVER_MODEL}")
    monkeypatch.setattr(config, "OPENAI_BASE_URL", server_backend)
    assert "1889" in qa.answer_question(QUESTION, facts, llm=models.get_chat_model(f"openai:{SERVER_MODEL}")).text


def test_a_wrong_key_is_a_sentence_at_load_and_mid_chat(server_backend, facts, monkeypatch):
    llm = models.get_chat_model()
    monkeypatch.setattr(config, "OPENAI_API_KEY", "wrong")
    models.forget_chat_models()
    with pytest.raises(models.ModelUnavailableError, match=r"refused the key \(401\)"):
        models.get_chat_model()
    wrong = models.ServerChatModel(model=SERVER_MODEL, base_url=server_backend, api_key="wrong", max_retries=0)
    with pytest.raises(models.ModelUnavailableError, match=r"refused the key \(401\)"):
        qa.answer_question(QUESTION, facts, llm=wrong)
    assert "1889" in qa.answer_question(QUESTION, facts, llm=llm).text


def test_a_model_the_server_does_not_have_names_the_ones_it_has(server_backend):
    with pytest.raises(models.ModelUnavailableError, match=f"does not have the model 'llama-70b'. It has: {SERVER_MODEL}"):
        models.get_chat_model("openai:llama-70b")


def test_a_connection_dropped_mid_answer_is_a_sentence_and_the_chat_goes_on(server_backend, facts):
    proxy = CuttingProxy(_port(server_backend), cut_after=900)  # the headers and a few tokens, then nothing
    try:
        cut = models.ServerChatModel(model=SERVER_MODEL, base_url=f"http://127.0.0.1:{proxy.port}/v1", api_key=SERVER_KEY, max_retries=0)
        stream = qa.ask(QUESTION, facts, llm=cut)
        with pytest.raises(models.ModelUnavailableError, match="failed or dropped mid-answer"):
            list(stream)
    finally:
        proxy.close()
    assert "1889" in qa.answer_question(QUESTION, facts, llm=models.get_chat_model()).text


def test_a_server_slower_than_the_timeout_is_a_sentence_naming_the_setting(server_backend, facts, monkeypatch):
    proxy = CuttingProxy(_port(server_backend), delay=3.0)
    try:
        slow = models.ServerChatModel(model=SERVER_MODEL, base_url=f"http://127.0.0.1:{proxy.port}/v1", api_key=SERVER_KEY,
                                      max_retries=0, timeout=0.5)
        with pytest.raises(models.ModelUnavailableError, match="longer than LLM_TIMEOUT"):
            qa.answer_question(QUESTION, facts, llm=slow)
    finally:
        proxy.close()
    assert "1889" in qa.answer_question(QUESTION, facts, llm=models.get_chat_model()).text


@pytest.mark.parametrize("setting", ["LLM_BACKEND=openia", "EMBED_BACKEND=openai"])
def test_a_backend_the_app_does_not_know_stops_at_start_naming_the_valid_ones(setting):
    name, value = setting.split("=")
    proc = subprocess.run([sys.executable, "-c", "import config"], cwd=REPO, env={**os.environ, name: value},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert f"Setting {name}='{value}' is not one of: auto, embedded, ollama" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_openai_without_a_server_address_says_which_setting_is_missing(monkeypatch):
    monkeypatch.setattr(config, "LLM_BACKEND", "openai")
    monkeypatch.setattr(config, "OPENAI_BASE_URL", "")
    models.forget_chat_models()
    try:
        with pytest.raises(models.ModelUnavailableError, match="needs OPENAI_BASE_URL"):
            models.get_chat_model()
    finally:
        models.forget_chat_models()


def test_two_threads_asking_for_the_same_model_load_it_once(server_backend):
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(models.get_chat_model(f"openai:{SERVER_MODEL}"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and all(m is got[0] for m in got)


def test_the_picked_model_is_saved_beside_the_store(store):
    assert models.saved_choice() is None
    models.save_choice(f"openai:{SERVER_MODEL}")
    assert models.saved_choice() == f"openai:{SERVER_MODEL}"
