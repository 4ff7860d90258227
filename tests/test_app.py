"""The Streamlit page, run headless with streamlit.testing.v1.AppTest on a real store."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

import config
import ingest

APP = str(Path(__file__).resolve().parents[1] / "app.py")


@pytest.fixture
def small_model(monkeypatch):
    """The app loads its chat model itself; point it at the small embedded one."""
    monkeypatch.setattr(config, "LLM_BACKEND", "embedded")
    monkeypatch.setattr(config, "EMBEDDED_LLM", "qwen2.5-coder-0.5b")
    st.cache_resource.clear()
    yield
    st.cache_resource.clear()


def test_a_question_gets_a_streamed_answer_with_a_verified_page_citation(store, embedder, three_page_pdf, small_model):
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    app = AppTest.from_file(APP, default_timeout=300).run()
    assert not app.exception
    assert "facts.pdf" in app.sidebar.markdown[0].value
    app.chat_input[0].set_value("When did the railway reach the town?").run()
    assert not app.exception
    assistant = app.chat_message[1]
    assert "1889" in assistant.markdown[0].value
    assert any("facts.pdf · p. 3` ✓" in c.value for c in assistant.caption)
    assert app.session_state["messages"][-1]["role"] == "assistant"  # the chat is kept


def test_an_empty_library_says_so_instead_of_answering(store, small_model):
    app = AppTest.from_file(APP, default_timeout=120).run()
    app.chat_input[0].set_value("Anything?").run()
    assert not app.exception and "library is empty" in app.info[0].value
