"""The Streamlit page: upload PDFs, watch them become searchable, ask, check every answer.

Flow of one run of this script (Streamlit re-runs it top to bottom on every
interaction):

    sidebar: uploads -> ingest.ingest_pdf() inside st.status with a progress bar
             -> searchable at once; page labelling queued on the BackgroundEnricher
             library (live progress) with remove, and re-embed for a document made with another embedder;
             scope; settings; model picker (models.chat_choices, probed at most every 30 s) and status
    main:    replay the chat -> st.chat_input -> qa.ask()
             -> its evidence lines (evidence.py), shown as soon as ask() returns, before any model call:
                "What your documents say", each line with a chip opening its page, the line highlighted
             -> the answer streamed under them by st.write_stream
             (a status line says what is happening until the first words arrive)
             -> citation chips (st.pills) numbered like the answer's [n] markers; a chosen chip shows the passage and the
                page rendered by preview.render_page() with the passage highlighted
             -> unsupported sentences, confidence, rewritten query, the model that wrote it, optional trace
             The lines lead every answer and are kept with its message: when the model refuses, or no page
             backs what it wrote, they are still there, so the person has what the documents say.

Heavy objects (embedder, Chroma client, retriever, enricher) live behind
``st.cache_resource`` and are shared by every browser tab; chat models are loaded
once per process by ``models.get_chat_model``. What one person has done (the chat,
which uploads were handled, the model they picked) lives in ``st.session_state``;
the picked model is also saved beside the store (``models.save_choice``), so a
reload or a restart starts with it. Page labels are written by the settings'
model, whatever a person picks.
Everything that is not layout lives in the other modules.
"""

from __future__ import annotations

import logging
import tempfile
import uuid
from pathlib import Path

import streamlit as st

try:  # first, alone: every module below reads its settings from it
    import config
except SystemExit as err:  # config.SettingError: a setting in the environment cannot be used
    st.error(str(err))
    st.stop()

import checker
import ingest
import models
import preview
import qa
from retriever import Hit, Retriever
from safe_text import md, md_stream, passage_md

config.setup_logging()
log = logging.getLogger(__name__)
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


@st.cache_data(ttl=30, show_spinner=False)
def chat_choices(ollama_url: str, server_url: str) -> list[models.ChatChoice]:
    """The models that can answer now. Listing them probes Ollama and the model server over HTTP,
    so it is done at most every 30 s, not on every rerun; the addresses are arguments so that a
    change of setting is probed anew."""
    return models.chat_choices()


@st.cache_resource
def enricher() -> ingest.BackgroundEnricher:
    return ingest.BackgroundEnricher(store(), embedder(), models.get_chat_model)


# -----------------------------------------------------------------------------
# Sidebar: uploads, library, scope, settings, model status


def progress_to(bar):
    """An ingest progress callback that moves ``bar``; its messages can hold a file name, so they stay text."""
    return lambda cur, tot, msg: bar.progress(min(cur / max(tot, 1), 1.0), text=md(msg))


def ingest_upload(upload) -> None:
    """Save one uploaded file to a temp path and ingest it, showing each stage's progress."""
    name = md(upload.name)
    with st.status(f"Adding {name}…", expanded=True) as status:
        bar = st.progress(0.0, text="Checking the file")
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(upload.name).name
            path.write_bytes(upload.getvalue())
            try:
                result = ingest.ingest_pdf(
                    path,
                    store(),
                    embedder(),
                    progress=progress_to(bar),
                    doc_name=upload.name,
                )
            except ingest.IngestError as err:
                status.update(label=f"{name}: not added", state="error", expanded=False)
                add_notice(f"**{name}** was not added. {md(err)}")
                return
        retriever().refresh()
        if config.ENRICH_ENABLED:
            enricher().submit(result.collection)
        note = "already in the library" if result.cached else f"{result.pages} pages, {result.chunks} passages"
        ocr = f", {result.ocr_pages} read by OCR" if result.ocr_pages else ""
        status.update(label=f"{name}: searchable ({note}{ocr})", state="complete", expanded=False)
        if result.damaged_pages:
            add_notice(f"**{name}** is damaged: pages {ingest.page_ranges(result.damaged_pages)} could not be read and were left out.", "warning")


def uploads_panel() -> None:
    """Ingest each file once per upload: Streamlit gives every upload its own id, so the same
    file uploaded again after a remove, or two files that share a name, are each handled."""
    uploads = st.sidebar.file_uploader(
        "Add PDFs", type=["pdf"], accept_multiple_files=True, help=f"Up to {config.MAX_FILE_MB} MB each"
    )
    handled = st.session_state.setdefault("handled_uploads", set())
    for upload in uploads or []:
        if upload.file_id not in handled:
            handled.add(upload.file_id)  # first: a refused file is reported once, not retried on every rerun
            with st.sidebar:
                ingest_upload(upload)


def add_notice(markdown: str, kind: str = "error") -> None:
    """A problem the person must read (``kind`` "error" or "warning"): shown in the sidebar until dismissed."""
    st.session_state.setdefault("notices", {})[uuid.uuid4().hex] = (kind, markdown)


def notices_panel() -> None:
    for key, (kind, text) in list(st.session_state.get("notices", {}).items()):
        getattr(st.sidebar, kind)(text)
        if st.sidebar.button("Dismiss", key=f"dismiss-{key}"):
            del st.session_state.notices[key]
            st.rerun()


def labels_missing(doc: dict) -> bool:
    return doc.get("enriched_pages", 0) < doc["pages"] - doc.get("empty_pages", 0)


def document_card(doc: dict, labelling: ingest.EnrichmentProgress | None) -> None:
    """One library entry: name, counts, labelling state, and a remove button."""
    name_col, remove_col = st.columns([5, 1])
    facts = f"{doc['pages']} pages · {doc['chunks']} passages · {doc['ocr_pages']} OCR"
    name_col.markdown(f"**{md(doc['doc_name'])}**  \n{facts}")
    if (made_by := embedded_elsewhere(doc)) is not None:
        reembed_offer(doc, made_by, name_col)
    failed = doc.get("label_failed_pages", 0)
    if labelling is not None and labelling.state == "queued":
        name_col.caption(f"Page labels: queued, {labelling.ahead} document(s) first")
    elif labelling is not None and labelling.state == "labelling":
        paused = " · paused while answering" if models.QUESTIONS.busy() else ""
        name_col.progress(labelling.done / max(labelling.total, 1), text=f"Page labels: {labelling.done}/{labelling.total}{paused}")
    elif labelling is not None and labelling.state == "failed":
        name_col.caption(f"Page labels stopped: {md(labelling.message)}")
    elif not labels_missing(doc):
        name_col.caption(f"Page labels: done, {failed} page(s) failed" if failed else "Page labels: done")
    if remove_col.button("", icon=":material/delete:", key=f"rm-{doc['collection']}", help="Remove from library"):
        try:
            ingest.delete_document(store(), doc["collection"])
        except ingest.IngestError as err:  # removed but not purged, or the server went away
            add_notice(md(err), "warning")
        retriever().refresh()
        st.rerun()


def embedded_elsewhere(doc: dict) -> str | None:
    """The embedder a document was embedded with, when it is not the one this app embeds with now
    (its vectors cannot be compared with a question's, so searches leave it out); else None."""
    if not ingest.made_with_other_embedder(doc, embedder()):
        return None
    return doc.get("embedder") or "an unrecorded embedder"


def reembed_offer(doc: dict, made_by: str, col) -> None:
    """Say why a document is left out of searches, with a button that embeds it again from its kept PDF."""
    now = models.embedder_name(embedder())
    col.warning(f"Embedded with {md(made_by)}; this app now embeds with {md(now)}, so it is left out of searches.")
    if col.button("Re-embed", key=f"reembed-{doc['collection']}", help="Embed its pages again with this app's embedder"):
        with col:
            reembed(doc)
        st.rerun()  # the whole page: the card without its warning, and a notice if it failed


def reembed(doc: dict) -> None:
    """Embed one document again with this app's embedder, showing progress like an upload."""
    name = md(doc["doc_name"])
    with st.status(f"Re-embedding {name}…", expanded=True) as status:
        bar = st.progress(0.0, text="Reading the kept PDF")
        try:
            ingest.reembed_document(store(), embedder(), doc["collection"], progress=progress_to(bar))
        except ingest.IngestError as err:  # e.g. the kept PDF is on the machine that added it
            status.update(label=f"{name}: not re-embedded", state="error", expanded=False)
            add_notice(f"**{name}** was not re-embedded. {md(err)}")
            return
        status.update(label=f"{name}: searchable again", state="complete", expanded=False)
    retriever().refresh()
    if config.ENRICH_ENABLED and labels_missing(doc):
        enricher().submit(doc["collection"])  # a labelling that failed on the old vectors starts again


def labelling_progress() -> dict[str, ingest.EnrichmentProgress]:
    """Page-labelling state per collection; queues documents whose labels were left unfinished earlier."""
    if not config.ENRICH_ENABLED:
        return {}
    progress = enricher().progress()
    for doc in ingest.list_documents(store()):
        if labels_missing(doc) and doc["collection"] not in progress and embedded_elsewhere(doc) is None:
            enricher().submit(doc["collection"])
    return enricher().progress()


def library_panel() -> None:
    """The documents in the store; redrawn every few seconds while pages are being labelled."""
    docs = ingest.list_documents(store())
    progress = labelling_progress()
    if not docs:
        st.caption("No documents yet.")
    for doc in docs:
        document_card(doc, progress.get(doc["collection"]))


def settings_choice() -> str | None:
    """The model the settings choose; None when they name a server that cannot say which
    (model_status then shows that sentence)."""
    try:
        return models.default_choice()
    except models.ModelUnavailableError:
        return None


def answering_choice(listed: list[str], default: str | None) -> str | None:
    """The model that answers now: this session's pick (a fresh session starts from the pick saved beside
    the store) while it is listed, else the settings' model. A pick that is no longer listed (its server
    is down) is said in one line and stays saved, so it comes back with its server."""
    if "model_choice" not in st.session_state:
        st.session_state.model_choice = models.saved_choice()
    wanted = st.session_state.model_choice
    if wanted is None or wanted == default or wanted in listed:
        return wanted or default
    instead = md(models.choice_label(default)) if default else "no model"
    st.sidebar.warning(f"{md(models.choice_label(wanted))} is not available now, so {instead} answers.")
    return default


def keep_pick() -> None:
    """The person switched models: the next question uses it, and it is saved for later visits."""
    picked = st.session_state["model-picker"]
    if picked is not None:
        st.session_state.model_choice = picked
        models.save_choice(picked)


def model_picker() -> str | None:
    """The sidebar's "Model that answers": every model that can answer now; returns the one that will."""
    choices = chat_choices(config.OLLAMA_BASE_URL, config.OPENAI_BASE_URL)
    labels = {c.id: c.label for c in choices}
    default = settings_choice()
    current = answering_choice(list(labels), default)
    options = list(labels)
    if current is not None and current not in labels:  # the settings' model with its server down: listed, its load error says why
        options.insert(0, current)
    st.session_state["model-picker"] = current  # the widget shows the model that answers, also after a fallback
    labeller = md(models.choice_label(default)) if default else "the model set at start"
    st.sidebar.selectbox(
        "Model that answers", options, key="model-picker", on_change=keep_pick,
        format_func=lambda choice: labels.get(choice) or models.choice_label(choice),  # options are plain text, not Markdown
        help=f"Used from your next question on, and kept for your next visit. Page labels are written by "
             f"the model set at start: {labeller}.",
    )
    return current


def model_status(choice: str | None) -> None:
    """Which model answers and which embedder searches; a model that cannot be loaded says why."""
    try:
        label = models.chat_model_label(models.get_chat_model(choice))
    except models.ModelUnavailableError as err:
        st.sidebar.error(md(err))
        return
    st.sidebar.caption(f"Model: {md(label)} · embeddings: {md(models.embedder_name(embedder()))}")
    if label.startswith("embedded") and models.ollama_models() is None:
        st.sidebar.caption(f"Ollama: not reachable at `{config.OLLAMA_BASE_URL}`")


def sidebar() -> tuple[list[str] | None, int, bool, str | None]:
    """Draw the sidebar; return the scope (None: all documents), top-k, whether to show traces
    and the chosen model (None: the settings' model, which could not be named)."""
    st.sidebar.header("Your documents")
    uploads_panel()
    notices_panel()
    busy = any(p.state in ("queued", "labelling") for p in labelling_progress().values())
    with st.sidebar:
        st.fragment(library_panel, run_every=3 if busy else None)()
    docs = {d["doc_name"]: d["collection"] for d in ingest.list_documents(store())}
    chosen = st.sidebar.multiselect("Ask only these documents", sorted(docs), help="Empty: the whole library")
    with st.sidebar.expander("Settings"):
        k = st.slider("Pages to show the model", 1, 10, config.TOP_K)
        show_trace = st.toggle("Show retrieval trace", value=False)
    if st.sidebar.button("Clear chat", key="clear-chat"):
        st.session_state.messages = []
    choice = model_picker()
    model_status(choice)
    return [docs[name] for name in chosen] or None, k, show_trace, choice


# -----------------------------------------------------------------------------
# Chat: answers, citation chips, page previews


def chip_label(citation: checker.Citation) -> str:
    """The chip carries the number the answer's markers use: "[2] report.pdf · p. 7 ✓"."""
    mark = "✓" if citation.verified else "⚠"
    return f"\\[{citation.number}\\] {md(citation.doc_name)} · p. {citation.page} {mark}" + (" (inferred)" if citation.inferred else "")


def source_for(answer: qa.Answer, citation: checker.Citation) -> Hit | None:
    return next((h for h in answer.sources if (h.collection, h.page) == (citation.collection, citation.page)), None)


def excerpt(text: str, limit: int = 300) -> str:
    """The passage's first whole lines within about ``limit`` characters (at least one line),
    so a table keeps its header and whole rows.

    excerpt("| a | b |\n|---|---|\n| 1 | 2 |", limit=20) -> "| a | b |\n|---|---|"
    """
    lines, kept = text.split("\n"), []
    for line in lines:
        if kept and len("\n".join(kept + [line])) > limit:
            return "\n".join(kept) + ("\n…" if not line.startswith("|") else "")
        kept.append(line)
    return "\n".join(kept)


def show_citation(answer: qa.Answer, citation: checker.Citation) -> None:
    """The cited passage beside its page as an image, the passage highlighted."""
    hit = source_for(answer, citation)
    if hit is None:
        st.warning(f"Page {citation.page} was not among the passages the model was shown.")
        return
    show_passage(hit)


def show_passage(hit: Hit) -> None:
    """A passage or an evidence line beside its page as an image, highlighted by its [start, end) offsets."""
    text_col, page_col = st.columns([2, 3])
    text_col.container(border=True).markdown(passage_md(hit.text))
    if hit.title:
        text_col.caption(f"Page title: {md(hit.title)}")
    pdf = ingest.kept_pdf_path(hit.collection)
    if not pdf.exists():
        page_col.info(missing_page_sentence())
        return
    png = preview.render_page(pdf, hit.page, hit.start, hit.end, hit.ocr_boxes or None)
    page_col.image(png, caption=f"{md(hit.doc_name)}, page {hit.page}", width="stretch")


def missing_page_sentence() -> str:
    """Why a passage's page cannot be shown: the store keeps the PDFs beside itself, so with a shared
    ChromaDB server only the machine that added a document has its PDF."""
    if config.CHROMA_HOST:
        return ("The PDF of this page is kept on the machine that added it; this machine has no copy, so its page "
                "cannot be shown here (the text above is from the shared store).")
    return "This document is no longer in the library, so its page cannot be shown."


def show_evidence(lines: list[Hit], key: str, answering: bool = False) -> None:
    """The lines of the documents that answer the question, each beside a chip that opens its page
    with the line highlighted. While an answer is being written the chips are disabled: a click
    reruns the script, which would stop the answer half-way and lose it."""
    if not lines:
        return
    st.markdown("**What your documents say**")
    for number, line in enumerate(lines):
        text_col, chip_col = st.columns([4, 1], vertical_alignment="center")
        text_col.markdown(f"> {md(line.text)}")
        chosen = chip_col.pills(
            f"Open page {line.page} of {md(line.doc_name)}",
            [f"{md(line.doc_name)} · p. {line.page}"],
            key=f"evidence-{key}-{number}" + ("-answering" if answering else ""),  # drawn twice in that run: two keys
            disabled=answering,
            label_visibility="collapsed",
        )
        if chosen:
            show_passage(line)


def trace_rows(answer: qa.Answer) -> list[dict]:
    return [
        {
            "source": f"[{n}] {h.doc_name} · p. {h.page}",
            "semantic rank": h.trace.get("semantic_rank"),
            "similarity": h.trace.get("semantic_score"),
            "BM25 rank": h.trace.get("bm25_rank"),
            "fused score": round(h.score, 4),
        }
        for n, h in enumerate(answer.sources, 1)
    ]


def show_answer_details(answer: qa.Answer, key: str, show_trace: bool) -> None:
    """Everything under an answer's text: chips, warnings, confidence, rewrite, trace."""
    citations = answer.citations
    if citations:
        labels = [chip_label(c) for c in citations]
        chosen = st.pills("Sources", labels, key=f"cite-{key}", help="Open a source to see the page")
        if chosen:
            show_citation(answer, citations[labels.index(chosen)])
    for sentence in answer.sentences:
        if sentence.supported is False and sentence.citations:
            st.caption(f"⚠ *Not backed by the cited page:* {md(sentence.text)}")
        elif sentence.supported is False:
            st.caption(f"*No passage backs:* {md(sentence.text)}")
    if answer.confidence is not None:
        st.caption(f"Confidence: {answer.confidence:.0%} of checked sentences are supported")
    elif answer.sentences and not answer.refused:
        st.caption("Citations not checked: no sentence was long enough to judge")
    if answer.rewritten_query:
        st.caption(f"Searched for: *{md(answer.rewritten_query)}*")
    if answer.model:
        st.caption(f"Written by {md(answer.model)}")
    elif answer.sources and not answer.refused:
        st.caption("No model wrote this: it was worked out in code from the cited pages.")
    if answer.refused and answer.sources:
        st.caption("Nearest passages:")
        for h in answer.sources:
            st.caption(f"**{md(h.doc_name)} · p. {h.page}**")
            st.markdown(passage_md(excerpt(h.text)))
    if show_trace and answer.sources:
        st.dataframe(trace_rows(answer), hide_index=True)


def show_message(index: int, message: dict, show_trace: bool) -> None:
    with st.chat_message(message["role"]):
        show_evidence(message.get("evidence", []), str(index))
        if message.get("error"):
            st.error(md(message["error"]))
            return
        st.markdown(md(message["content"]))
        if "answer" in message:
            show_answer_details(message["answer"], str(index), show_trace)


def answer_now(question: str, history: list[tuple[str, str]], scope, k: int, key: str, choice: str | None) -> dict:
    """Show the evidence lines as soon as the search has found them, then stream the answer under
    them into the open chat message; return the message to keep, the lines with it (``key``: the
    message's index, so a replay finds the chips' state under the same keys).

    Any failure becomes a message in the chat, so the conversation so far survives it; the lines
    found before it stay.
    """
    if any(p.state == "labelling" for p in labelling_progress().values()):
        st.caption("Page labelling paused while answering")
    evidence_slot = st.empty()  # above the answer: the lines are known before the model says a word
    status = st.empty()  # what is happening while the person waits: searching, reading, writing
    lines: list[Hit] = []
    llm = None
    try:
        with models.QUESTIONS.asking():  # the background labeller waits until the answer is out
            llm = models.get_chat_model(choice)  # the model picked in the sidebar, loaded once per process
            stream = qa.ask(question, retriever(), llm=llm, history=history, scope=scope, k=k,
                            on_stage=lambda text: status.caption(text))
            lines = stream.evidence
            with evidence_slot.container():
                show_evidence(lines, key, answering=True)
            st.write_stream(md_stream(stream))
        reply = {"role": "assistant", "content": stream.result.text, "answer": stream.result}
    except (models.ModelUnavailableError, ingest.IngestError) as err:
        reply = {"role": "assistant", "content": "", "error": str(err)}
    except Exception as err:  # e.g. Ollama's embedder gone mid-search: say so, keep the chat
        log.exception("Answering failed")
        reply = {"role": "assistant", "content": "", "error": models.explain_failure(err, llm)}
    finally:
        status.empty()
    with evidence_slot.container():  # the same lines, their chips usable now that nothing is being written
        show_evidence(lines, key)
    return {**reply, "evidence": lines}


def main() -> None:
    try:
        scope, k, show_trace, choice = sidebar()
    except ingest.StoreUnavailableError as err:  # a CHROMA_HOST server that is down: say how to fix it
        st.error(md(err))
        return
    st.title("Chat with your PDFs")
    messages = st.session_state.setdefault("messages", [])
    for index, message in enumerate(messages):
        show_message(index, message, show_trace)
    question = st.chat_input("Ask about your documents")
    if not question:
        return
    if not ingest.list_documents(store()):
        st.info("Your library is empty: add a PDF in the sidebar first.")
        return
    history = [(m["role"], m["content"]) for m in messages if not m.get("error")]
    messages.append({"role": "user", "content": question})
    show_message(len(messages) - 1, messages[-1], show_trace)
    key = str(len(messages))  # the index the reply will have when the chat is replayed
    with st.chat_message("assistant"):
        reply = answer_now(question, history, scope, k, key, choice)
        if reply.get("error"):
            st.error(md(reply["error"]))
        else:
            show_answer_details(reply["answer"], key, show_trace)
    messages.append(reply)


main()
