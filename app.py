"""The Streamlit page: upload PDFs, watch them become searchable, search them.

Flow of one run of this script (Streamlit re-runs it top to bottom on every
interaction):

    sidebar: uploads -> ingest.ingest_pdf() with a progress bar -> library list
    main:    st.chat_input -> retriever.Retriever.search() (hybrid) -> cited passages

Heavy objects (the embedder, the Chroma client) live behind
``st.cache_resource``; what a person has done lives in ``st.session_state``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import streamlit as st

import config
import ingest
import models
from retriever import Retriever

config.setup_logging()
st.set_page_config(page_title="Chat with your PDFs", page_icon="📄", layout="wide")


@st.cache_resource
def store():
    return ingest.get_client()


@st.cache_resource
def embedder():
    return models.get_embeddings()


@st.cache_resource
def retriever() -> Retriever:
    return Retriever(store(), embedder())


def ingest_upload(upload) -> None:
    """Save one uploaded file to a temp path and ingest it, showing progress."""
    with st.status(f"Adding {upload.name}…", expanded=True) as status:
        bar = st.progress(0.0)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(upload.name).name
            path.write_bytes(upload.getvalue())
            try:
                result = ingest.ingest_pdf(
                    path,
                    store(),
                    embedder(),
                    progress=lambda cur, tot, msg: bar.progress(min(cur / max(tot, 1), 1.0), text=msg),
                    doc_name=upload.name,
                )
            except ingest.IngestError as err:
                status.update(label=f"{upload.name}: not added", state="error")
                st.error(str(err))
                return
        retriever().refresh()
        note = "already in the library" if result.cached else f"{result.pages} pages, {result.chunks} passages"
        status.update(label=f"{upload.name}: searchable ({note})", state="complete", expanded=False)


def sidebar() -> None:
    st.sidebar.header("Your documents")
    uploads = st.sidebar.file_uploader("Add PDFs", type=["pdf"], accept_multiple_files=True)
    done = st.session_state.setdefault("ingested_uploads", set())
    for upload in uploads or []:
        key = (upload.name, upload.size)
        if key not in done:
            with st.sidebar:
                ingest_upload(upload)
            done.add(key)
    for doc in ingest.list_documents(store()):
        col1, col2 = st.sidebar.columns([5, 1])
        col1.markdown(f"**{doc['doc_name']}**  \n{doc['pages']} pages · {doc['chunks']} passages · {doc['ocr_pages']} OCR")
        if col2.button("✕", key=f"rm-{doc['collection']}", help="Remove from library"):
            ingest.delete_document(store(), doc["collection"])
            retriever().refresh()
            st.rerun()


def main() -> None:
    sidebar()
    st.title("Chat with your PDFs")
    st.session_state.setdefault("messages", [])
    for message in st.session_state.messages:
        with st.chat_message(message["role"]):
            st.markdown(message["content"])
    question = st.chat_input("Ask about your documents")
    if not question:
        return
    st.session_state.messages.append({"role": "user", "content": question})
    with st.chat_message("user"):
        st.markdown(question)
    hits = retriever().search(question, config.TOP_K)
    if hits:
        reply = "\n\n".join(f"**{h.doc_name} · p. {h.page}** — {h.text[:400]}" for h in hits)
    else:
        reply = "Your library is empty: add a PDF in the sidebar first."
    st.session_state.messages.append({"role": "assistant", "content": reply})
    with st.chat_message("assistant"):
        st.markdown(reply)


main()
