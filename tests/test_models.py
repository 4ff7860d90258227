"""The embedded chat models install from PyPI wheels alone (nothing compiles) and load with no network.
The embedders' tests are in test_embedders.py."""

from __future__ import annotations

import json
import threading
import time

import pytest
from langchain_core.messages import HumanMessage

import config
import models
import qa


def test_default_embedded_llm_assembles_and_verifies_against_its_pins(default_llm):
    path = models.embedded_gguf_path(config.EMBEDDED_LLM)
    spec = config.EMBEDDED_LLMS[config.EMBEDDED_LLM]
    assert path.stat().st_size == spec["size"]
    assert models.read_gguf_metadata(path)["general.architecture"] == spec["architecture"]
    assert default_llm.count_tokens("Hello world") >= 2  # the app's default model really loads


@pytest.mark.slow  # starts another process
def test_a_model_that_does_not_match_its_pinned_hash_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "MODEL_CACHE_DIR", str(tmp_path))
    bad = {**config.EMBEDDED_LLMS["qwen2.5-coder-0.5b"], "sha256": "0" * 64}
    monkeypatch.setitem(config.EMBEDDED_LLMS, "tampered", bad)
    with pytest.raises(models.ModelUnavailableError, match="SHA-256"):
        models.embedded_gguf_path("tampered")
    assert list(tmp_path.iterdir()) == []  # no half-made file left behind


def test_read_gguf_metadata_rejects_other_files(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"not a model")
    with pytest.raises(ValueError):
        models.read_gguf_metadata(tmp_path / "x.gguf")


def test_embedded_llm_streams_an_answer(llm):
    tokens = [c.content for c in models.with_max_tokens(llm, 8).stream([HumanMessage("Say hello.")])]
    assert len([t for t in tokens if t]) >= 2 and "".join(tokens).strip()
    assert llm.count_tokens("hello world") >= 2


def test_a_stream_left_unread_frees_the_model_for_the_next_call(llm):
    stream = models.with_max_tokens(llm, 200).stream([HumanMessage("Count from 1 to 100, one number per line.")])
    next(stream)
    stream.close()  # like a browser tab closed mid-answer
    reply = models.with_max_tokens(llm, 4).invoke([HumanMessage("Say yes.")])
    assert reply.content.strip()


def test_a_cancelled_question_stops_the_model_while_it_still_reads_the_prompt(llm):
    asker_left = threading.Event()
    leaving = models.cancellable(models.with_max_tokens(llm, 50), asker_left)
    prompt = "Summarise these notes. " + " ".join(f"Note {n}: the harbour logged vessel {n} at noon." for n in range(250))

    def leave_once_the_model_reads() -> None:
        while not models._REPLIES:  # the call has reached llama.cpp, which reads ~3,000 prompt tokens first
            time.sleep(0.005)
        asker_left.set()

    threading.Thread(target=leave_once_the_model_reads).start()
    written = []
    with pytest.raises(models.ReplyCancelled):
        for chunk in leaving.stream([HumanMessage(prompt)]):
            written.append(chunk.content)
    assert not "".join(written)  # stopped before a word of the reply
    assert leaving._request([HumanMessage(prompt)], None)["return_progress"]  # a step per prompt batch: it can stop mid-prompt
    assert models.with_max_tokens(llm, 4).invoke([HumanMessage("Say yes.")]).content.strip()  # the model is free


def test_a_cancelled_reply_is_no_model_failure_and_passes_through_as_it_is():
    stopped = models.ReplyCancelled("the asker went away")
    assert qa.model_failure(stopped, None) is stopped


def test_stop_words_end_the_reply(llm):
    reply = models.with_max_tokens(llm, 60).invoke([HumanMessage("Count from 1 to 20, separated by commas.")], stop=["5"])
    assert "5" not in reply.content and "6" not in reply.content and reply.content.strip()


def test_background_json_replies_parse_and_yield_to_a_question(llm):
    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    labeller = models.for_background_json(llm, 300, schema)
    reply = labeller.invoke([HumanMessage("Give a title for a page about lighthouses.")])
    assert json.loads(reply.content)["title"]

    given_way = threading.Event()

    def ask_once_the_reply_is_under_way() -> None:
        while not models._REPLIES:  # the labeller's call has reached llama.cpp
            time.sleep(0.01)
        with models.QUESTIONS.asking():
            given_way.wait(timeout=120)  # the question stays open until the labeller has noticed, however busy the CPU

    counting = models.for_background_json(llm, 300, {"type": "object", "properties": {"numbers": {"type": "array", "items": {"type": "integer"}}}})
    stream = counting.stream([HumanMessage("Reply with the numbers from 1 to 150 as JSON.")])
    thread = threading.Thread(target=ask_once_the_reply_is_under_way)
    thread.start()
    try:
        with pytest.raises(models.YieldedToQuestion):
            list(stream)
    finally:
        given_way.set()
        thread.join()
