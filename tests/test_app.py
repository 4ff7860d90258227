"""The Streamlit page, run headless with streamlit.testing.v1.AppTest on a real store."""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from streamlit.testing.v1 import AppTest

import ingest

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def test_library_lists_a_document_and_a_question_gets_page_cited_passages(store, embedder, three_page_pdf):
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    st.cache_resource.clear()
    app = AppTest.from_file(APP, default_timeout=120).run()
    assert not app.exception
    assert "facts.pdf" in app.sidebar.markdown[0].value
    app.chat_input[0].set_value("How many tonnes of fish were landed in 1911?").run()
    reply = app.chat_message[1].markdown[0].value
    assert reply.startswith("**facts.pdf · p. 2**")
    st.cache_resource.clear()
