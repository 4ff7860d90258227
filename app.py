"""The Streamlit page: upload PDFs, watch them become searchable, ask, read cited answers.

Flow of one run of this script (Streamlit re-runs it top to bottom on every
interaction):

    sidebar: uploads -> ingest.ingest_pdf() with a progress bar -> library list, scope
    main:    replay the chat -> st.chat_input -> qa.ask() streamed by st.write_stream
             -> citations (verified, inferred, unsupported), confidence, rewritten query

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
import qa
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


@st.cache_resource
def chat_model():
    return models.get_chat_model()


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


def sidebar() -> list[str] | None:
    """Uploads, the library and the scope; returns the chosen collections (None: all)."""
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
    docs = {d["doc_name"]: d["collection"] for d in ingest.list_documents(store())}
    chosen = st.sidebar.multiselect("Ask only these documents", sorted(docs), help="Empty: the whole library")
    return [docs[name] for name in chosen] or None


def citation_lines(answer: qa.Answer) -> list[str]:
    """Markdown lines under an answer: citation chips, unsupported sentences, confidence, rewrite."""
    lines = []
    if answer.citations:
        chips = [
            f"`{c.doc_name} · p. {c.page}`" + (" ✓" if c.verified else " ⚠ not supported") + (" (inferred)" if c.inferred else "")
            for c in answer.citations
        ]
        lines.append("Sources: " + "  ".join(chips))
    lines += [f"⚠ *Not backed by the cited page:* {s.text}" for s in answer.sentences if s.supported is False]
    if answer.confidence is not None:
        lines.append(f"Confidence: {answer.confidence:.0%} of checked sentences are supported")
    if answer.rewritten_query:
        lines.append(f"Searched for: *{answer.rewritten_query}*")
    if answer.refused and answer.sources:
        lines += [f"- `{h.doc_name} · p. {h.page}` {h.text[:200]}" for h in answer.sources]
    return lines


def show_message(message: dict) -> None:
    with st.chat_message(message["role"]):
        st.markdown(message["content"])
        for line in message.get("notes", []):
            st.caption(line)


def main() -> None:
    try:
        scope = sidebar()
    except ingest.StoreUnavailableError as err:  # a CHROMA_HOST server that is down: say how to fix it
        st.error(str(err))
        return
    st.title("Chat with your PDFs")
    st.session_state.setdefault("messages", [])
    for message in st.session_state.messages:
        show_message(message)
    question = st.chat_input("Ask about your documents")
    if not question:
        return
    if not ingest.list_documents(store()):
        st.info("Your library is empty: add a PDF in the sidebar first.")
        return
    history = [(m["role"], m["content"]) for m in st.session_state.messages]
    st.session_state.messages.append({"role": "user", "content": question})
    show_message(st.session_state.messages[-1])
    with st.chat_message("assistant"):
        try:
            stream = qa.ask(question, retriever(), llm=chat_model(), history=history, scope=scope)
            st.write_stream(stream)
        except (models.ModelUnavailableError, ingest.IngestError) as err:
            st.error(str(err))
            return
        answer = stream.result
        notes = citation_lines(answer)
        for line in notes:
            st.caption(line)
    st.session_state.messages.append({"role": "assistant", "content": answer.text, "notes": notes})


main()
