"""The Streamlit page: upload PDFs, watch them become searchable, ask, check every answer.

Flow of one run of this script (Streamlit re-runs it top to bottom on every
interaction):

    sidebar: uploads -> ingest.ingest_pdf() inside st.status with a progress bar
             -> searchable at once; page labelling queued on the BackgroundEnricher
             library (live progress) with remove, and re-embed for a document made with another embedder;
             scope; settings; model picker (models.chat_choices, probed at most every 30 s) and status
    main:    replay the chat -> st.chat_input -> answering.ask(): the question is queued on the conversation's
             worker thread, which answers its questions in turn (write_answer -> qa.ask()) outside any script
             run, so a question sent meanwhile (a rerun stops the run) waits its turn instead of stopping the
             answer; the run only watches the worker (watch_answers, LiveAnswer), and the next run watches again
             -> its evidence lines (evidence.py), shown as soon as ask() returns, before any model call:
                "What your documents say", the first EVIDENCE_LINES lines numbered [L1].. as the model
                reads them, the rest of the ANSWER_LINES it read in a collapsed "All N lines the model read";
                each line with a chip opening its page, the line highlighted
             -> the answer drawn under them as it streams
             (a status line says what is happening, and for how long, until the answer is done)
             -> the lines drawn again once the answer is known: when nothing in the library was close to
                the question (Answer.nothing_found) they are only the nearest lines, so they move into a
                collapsed "Nearest lines ... none is about your question" and are not numbered
             -> citation chips (st.pills) named like the answer's markers ("[L2] report.pdf · p. 7 ✓", or [2]
                for passages), a long document name shortened in the middle; a chosen chip shows that very
                cited line (or passage) and its page rendered by preview.render_page(), the line highlighted
             -> unsupported sentences (⚠), one sentence saying how many checked sentences a cited line
                backs (checker.backing_summary: it agrees with the ⚠ shown), rewritten query, the model that
                wrote it, optional trace
             The lines lead every answer and are kept with its message: when the model refuses, or no page
             backs what it wrote, they are still there, so the person has what the documents say.
    conversations (conversations.py): each question (when its turn comes) and each answer (its Answer,
             evidence lines, error) is saved by the worker as it happens in a SQLite file beside the store; the page's address names the
             conversation shown (?c=<id>), so a reload, a new tab with that address or a restart opens it
             again and replays it exactly as before: the same lines, chips and page previews. The sidebar
             lists them (new, switch, rename, delete for good, export as Markdown); a chip whose document
             has been removed since says so, and its passage is still shown from the conversation.

Heavy objects (embedder, Chroma client, retriever, enricher) live behind
``st.cache_resource`` and are shared by every browser tab; chat models are loaded
once per process by ``models.get_chat_model``. What one person has done (the chat,
which uploads were handled, the model they picked) lives in ``st.session_state``; the chat is also
saved as a conversation, and ``st.session_state.messages`` is filled from it when a session opens one;
the picked model is also saved beside the store (``models.save_choice``), so a
reload or a restart starts with it. Page labels are written by the settings'
model, whatever a person picks.
Everything that is not layout lives in the other modules. ``main()`` runs when Streamlit runs this file
(as ``__main__``); importing it (the tests do) only defines its functions.
"""

from __future__ import annotations

import functools
import logging
import re
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

import streamlit as st

try:  # first, alone: every module below reads its settings from it
    import config
except SystemExit as err:  # config.SettingError: a setting in the environment cannot be used
    st.error(str(err))
    st.stop()

import answering
import checker
import conversations
import embedders
import ingest
import language
import models
import preview
import prompts
import qa
import rerankers
from records import Hit
from retriever import Retriever
from safe_text import md, passage_md

config.setup_logging()
log = logging.getLogger(__name__)
st.set_page_config(page_title="Chat with your PDFs", page_icon="📄", layout="wide")


@st.cache_resource
def store():
    """The store, once per process; made first, so it is swept of ingests that never finished (``sweep_unfinished``)
    before anything reads it."""
    client = ingest.get_client()
    ingest.sweep_unfinished(client)
    return client


@st.cache_resource
def embedder():
    return embedders.get_embeddings()


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
        if message := language.support_message(result.language):
            add_notice(f"**{name}** is in {md(language.language_name(result.language))}. {md(message)}", "warning")
        if result.damaged_pages:
            add_notice(f"**{name}** is damaged: pages {ingest.page_ranges(result.damaged_pages)} could not be read and were left out.", "warning")
        if result.cut_pages:
            add_notice(f"**{name}** has pages with more text than is kept: {md(ingest.cut_pages_note(result.cut_pages))}.", "warning")


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


def document_card(doc: dict, labelling: ingest.EnrichmentProgress | None) -> None:
    """One library entry: name, counts, labelling state, and a remove button."""
    name_col, remove_col = st.columns([5, 1])
    facts = f"{doc['pages']} pages · {doc['chunks']} passages · {doc['ocr_pages']} OCR"
    if doc.get("language"):
        facts += f" · {md(language.language_name(doc['language']))}"
    name_col.markdown(f"**{md(doc['doc_name'])}**  \n{facts}")
    if cuts := ingest.cut_pages_in(doc):  # the rest of those pages cannot be found: say so where the document is listed
        name_col.caption(f"Text cut: {md(ingest.cut_pages_note(cuts))}")
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
    elif not ingest.labels_missing(doc):
        name_col.caption(f"Page labels: done, {failed} page(s) failed" if failed else "Page labels: done")
    if remove_col.button("", icon=":material/delete:", key=f"rm-{doc['collection']}", help="Remove from library"):
        if config.ENRICH_ENABLED:
            enricher().cancel(doc["collection"])  # stop labelling it now, not after its next page
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
    now = embedders.embedder_name(embedder())
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
    if config.ENRICH_ENABLED and ingest.labels_missing(doc):
        enricher().submit(doc["collection"])  # a labelling that failed on the old vectors starts again


def labelling_progress() -> dict[str, ingest.EnrichmentProgress]:
    """Page-labelling state per collection; queues documents whose labels were left unfinished earlier."""
    if not config.ENRICH_ENABLED:
        return {}
    progress = enricher().progress()
    for doc in ingest.list_documents(store()):
        if ingest.labels_missing(doc) and doc["collection"] not in progress and embedded_elsewhere(doc) is None:
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
    st.sidebar.caption(f"Model: {md(label)} · embeddings: {md(embedders.embedder_name(embedder()))}")
    if label.startswith("embedded") and models.ollama_models() is None:
        st.sidebar.caption(f"Ollama: not reachable at `{config.OLLAMA_BASE_URL}`")


def sidebar() -> tuple[list[str] | None, int, bool, str | None, object]:
    """Draw the sidebar; return the scope (None: all documents), top-k, whether to show traces,
    the chosen model (None: the settings' model, which could not be named) and the place of the
    conversations panel (drawn after the chat, so that it lists a conversation its question began)."""
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
    panel = st.sidebar.container()
    choice = model_picker()
    model_status(choice)
    return [docs[name] for name in chosen] or None, k, show_trace, choice, panel


# -----------------------------------------------------------------------------
# Chat: answers, citation chips, page previews


REMOVED = " · removed"  # on a chip whose document has left the library since the answer
NAME_CHARS = 28  # a document's name on a chip; a longer one is shortened in its middle (short_name)


def short_name(name: str, limit: int = NAME_CHARS) -> str:
    """``name`` cut in its middle to ``limit`` characters, so that its chip fits its column; its start
    and its end (a date, the extension) stay. The full name is in the chip's tooltip and under the page.

    short_name("GPL-Graduate-Studies-Professional-Learning-Brochure-Jul-2021.pdf") -> "GPL-Graduate-S…-Jul-2021.pdf"
    """
    if len(name) <= limit:
        return name
    tail = (limit - 1) // 2
    return name[: limit - 1 - tail] + "…" + name[len(name) - tail :]


def chip_label(citation: checker.Citation, as_lines: bool = False) -> str:
    """The chip carries the marker the answer uses: "[L2] report.pdf · p. 7 ✓" ("[2] …" for passages)."""
    mark = "✓" if citation.verified else "⚠"
    name = md(short_name(citation.doc_name))
    return f"{md(checker.marker(citation.number, as_lines))} {name} · p. {citation.page} {mark}" + (" (inferred)" if citation.inferred else "")


def chips_help(citations: list[checker.Citation]) -> str:
    """The chips' tooltip: what a click does, and the full name of every document shortened on a chip."""
    shortened = sorted({c.doc_name for c in citations if short_name(c.doc_name) != c.doc_name})
    names = "".join(f"  \n{md(name)}" for name in shortened)
    return "Open a source to see the page" + names


def is_removed(collection: str, library: set[str] | None) -> bool:
    """Whether a document an answer points to has left the library (``library``: the ids in it; None: not known)."""
    return library is not None and collection not in library


def marking_removed(removed: dict[str, bool]):
    """A chip's format_func: its option (a label) with REMOVED added when its document has gone. The
    options themselves stay the same, so a chip opened before a removal stays open after it."""
    return lambda label: label + (REMOVED if removed[label] else "")


def source_for(answer: qa.Answer, citation: checker.Citation) -> Hit | None:
    """The source a citation names: ``answer.sources[number - 1]`` (that very line or passage), or, for an
    answer whose numbers do not match its sources (none should), the first source on the cited page."""
    if 1 <= citation.number <= len(answer.sources):
        hit = answer.sources[citation.number - 1]
        if (hit.collection, hit.page) == (citation.collection, citation.page):
            return hit
    return next((h for h in answer.sources if (h.collection, h.page) == (citation.collection, citation.page)), None)


def show_citation(answer: qa.Answer, citation: checker.Citation) -> None:
    """The cited passage beside its page as an image, the passage highlighted."""
    hit = source_for(answer, citation)
    if hit is None:
        st.warning(f"Page {citation.page} was not among the sources the model was shown.")
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
    try:
        png = preview.render_page(pdf, hit.page, hit.start, hit.end, hit.ocr_boxes or None)
    except Exception:  # removed while being drawn, or no longer the file the answer read: the text above stays
        log.warning("Page %d of %s could not be drawn", hit.page, pdf, exc_info=True)
        page_col.info(missing_page_sentence())
        return
    page_col.image(png, caption=f"{md(hit.doc_name)}, page {hit.page}", width="stretch")


def missing_page_sentence() -> str:
    """Why a passage's page cannot be shown: the store keeps the PDFs beside itself, so with a shared
    ChromaDB server only the machine that added a document has its PDF."""
    if config.CHROMA_HOST:
        return ("The PDF of this page is kept on the machine that added it; this machine has no copy, so its page "
                "cannot be shown here (the text above is from the shared store).")
    return "This document is no longer in the library, so its page cannot be shown."


def found_nothing(answer: qa.Answer | None) -> bool:
    """Whether nothing in the library was close to the question, so the lines kept with the answer are
    only the nearest ones (a conversation saved before ``Answer.nothing_found`` is told by its fixed reply)."""
    if answer is None:
        return False
    return answer.nothing_found or (answer.refused and answer.model is None and answer.text == prompts.NOT_FOUND)


def show_evidence(lines: list[Hit], key: str, answering: bool = False, library: set[str] | None = None,
                  answer: qa.Answer | None = None) -> None:
    """The lines of the documents that answer the question, numbered [L1].. as the model reads them: the
    first EVIDENCE_LINES under "What your documents say", the others in a collapsed expander; each beside
    a chip that opens its page with the line highlighted (marked "removed" when its document has left
    ``library``). While an answer is being written the chips are disabled: the lines are drawn again, under
    other keys, once it is done, which would close a page opened meanwhile.

    When ``answer`` found nothing close to the question, the lines are only the nearest ones: they are not
    presented as what the documents say, but kept, unnumbered, in a collapsed expander that says none is
    about the question (what is near can help to ask again)."""
    if not lines:
        return
    if found_nothing(answer):
        with st.expander("Nearest lines in your documents: none is about your question"):
            for number, line in enumerate(lines):
                evidence_row(line, number, key, answering, library, numbered=False)
        return
    st.markdown("**What your documents say**")
    shown_first = config.EVIDENCE_LINES
    for number, line in enumerate(lines[:shown_first]):
        evidence_row(line, number, key, answering, library)
    if len(lines) > shown_first:
        with st.expander(more_lines_label(len(lines), answer)):
            for number, line in enumerate(lines[shown_first:], shown_first):
                evidence_row(line, number, key, answering, library)


def more_lines_label(count: int, answer: qa.Answer | None) -> str:
    """The expander of the lines beyond those shown first: all ``count`` the model read, or, when no model
    wrote the answer (it was read in code), all that were found."""
    if answer is not None and answer.model is None:
        return f"All {count} lines found for your question"
    return f"All {count} lines the model read"


def evidence_row(line: Hit, number: int, key: str, answering: bool, library: set[str] | None, numbered: bool = True) -> None:
    """One evidence line (the ``number``-th, from 0), "[L1]" before it when ``numbered``, beside the chip
    that opens its page; a long document name is shortened on the chip, whole in its tooltip."""
    text_col, chip_col = st.columns([3, 2], vertical_alignment="center")  # wide enough for a chip of NAME_CHARS
    number_md = f"**{md(checker.marker(number + 1, True))}** " if numbered else ""
    text_col.markdown(f"> {number_md}{md(line.text)}")
    label = f"{md(short_name(line.doc_name))} · p. {line.page}"
    chosen = chip_col.pills(
        f"Open page {line.page} of {md(line.doc_name)}",
        [label],
        format_func=marking_removed({label: is_removed(line.collection, library)}),
        key=f"evidence-{key}-{number}" + ("-answering" if answering else ""),  # drawn twice in that run: two keys
        help=f"Open page {line.page} of {md(line.doc_name)}",
        disabled=answering,
        label_visibility="collapsed",
    )
    if chosen:
        show_passage(line)


def trace_rows(answer: qa.Answer) -> list[dict]:
    as_lines = answer.reads_lines
    return [
        {
            "source": f"{checker.marker(n, as_lines)} {h.doc_name} · p. {h.page}",
            "semantic rank": h.trace.get("semantic_rank"),
            "similarity": h.trace.get("semantic_score"),
            "BM25 rank": h.trace.get("bm25_rank"),
            "fused score": round(h.score, 4),
        }
        for n, h in enumerate(answer.sources, 1)
    ]


def show_answer_details(answer: qa.Answer, key: str, show_trace: bool, library: set[str] | None = None) -> None:
    """Everything under an answer's text: chips (marked "removed" for documents no longer in ``library``),
    the unbacked sentences, the backing summary, rewrite, who wrote it, trace."""
    as_lines = answer.reads_lines
    chips = answer.citations
    if chips:
        labels = [chip_label(c, as_lines) for c in chips]
        removed = {label: is_removed(c.collection, library) for label, c in zip(labels, chips)}
        chosen = st.pills("Sources", labels, key=f"cite-{key}", help=chips_help(chips), format_func=marking_removed(removed))
        if chosen:
            show_citation(answer, chips[labels.index(chosen)])
    unit = "line" if as_lines else "passage"
    for sentence in answer.sentences:
        if sentence.supported is False and sentence.citations:
            st.caption(f"⚠ *Not backed by the {unit} it cites:* {md(sentence.text)}")
        elif sentence.supported is False:
            st.caption(f"⚠ *No {unit} backs:* {md(sentence.text)}")
    if summary := checker.backing_summary(answer.sentences, chips, as_lines):
        st.caption(md(summary))
    elif answer.sentences and not answer.refused:
        st.caption("Citations not checked: no sentence was long enough to judge")
    if answer.rewritten_query:
        st.caption(f"Searched for: *{md(answer.rewritten_query)}*")
    if answer.model:
        st.caption(f"Written by {md(answer.model)}")
    elif answer.sources and not answer.refused:
        st.caption(f"No model wrote this: it was worked out in code from the cited {unit}s.")
    if show_trace and answer.sources:
        st.dataframe(trace_rows(answer), hide_index=True)


def show_message(index: int, message: dict, show_trace: bool, library: set[str] | None = None) -> None:
    with st.chat_message(message["role"]):
        show_evidence(message.get("evidence", []), str(index), library=library, answer=message.get("answer"))
        if message.get("error"):
            st.error(md(message["error"]))
            return
        st.markdown(md(message["content"]))
        if "answer" in message:
            show_answer_details(message["answer"], str(index), show_trace, library)


def write_answer(question: str, history: list[tuple[str, str]], progress: answering.Progress, *, retriever: Retriever,
                 scope, k: int, choice: str | None) -> dict:
    """Answer ``question`` on the answering worker's thread (answering.py), out of any script run, so that
    nothing the person does on the page stops it: ``progress`` gets each stage, the evidence lines as soon as
    the search has found them, and the text as it streams; returns the message to keep, the lines with it.
    No Streamlit call here: the page draws ``progress`` (watch_answers).

    Any failure becomes a message in the chat, so the conversation so far survives it; the lines
    found before it stay.
    """
    lines: list[Hit] = []
    llm = None
    try:
        with models.QUESTIONS.asking():  # the background labeller waits until the answer is out
            progress.say("Getting the model ready…")
            llm = models.get_chat_model(choice)  # the model picked in the sidebar, loaded once per process
            stream = qa.ask(question, retriever, llm=llm, history=history, scope=scope, k=k, on_stage=progress.say)
            progress.evidence = lines = stream.evidence
            for piece in stream:
                progress.text += piece
        return {"role": "assistant", "content": stream.result.text, "answer": stream.result, "evidence": lines,
                "model_id": choice if stream.result.model else None}  # kept with the conversation, as the API keeps it
    except (models.ModelUnavailableError, ingest.IngestError) as err:
        return {"role": "assistant", "content": "", "error": str(err), "evidence": lines}
    except Exception as err:  # e.g. Ollama's embedder gone mid-search: say so, keep the chat
        log.exception("Answering failed")
        return {"role": "assistant", "content": "", "error": models.explain_failure(err, llm), "evidence": lines}


class LiveAnswer:
    """An answer being written by the worker, drawn in its chat message as it comes: the evidence lines as
    soon as they are known (their chips disabled: the lines are drawn again when the answer is done), the text
    so far, and a status line saying what is going on and for how long. ``finish`` draws it as it is kept."""

    def __init__(self, progress: answering.Progress, show_trace: bool, labelling: bool):
        self.key = str(progress.index + 1)  # the index the reply has when the chat is replayed
        self.show_trace = show_trace
        self.message = st.chat_message("assistant")
        with self.message:
            if labelling:
                st.caption("Page labelling paused while answering")
            self.nearest_slot = st.empty()  # the lines set aside, should they turn out to be only the nearest
            self.evidence_slot = st.empty()  # above the answer: the lines are known before the model says a word
            self.text_slot = st.empty()
            self.status_slot = st.empty()  # what is happening while the person waits: searching, reading, writing
        self.lines_drawn = False
        self.text_drawn = ""

    def update(self, progress: answering.Progress) -> None:
        if progress.evidence and not self.lines_drawn:
            with self.evidence_slot.container():
                show_evidence(progress.evidence, self.key, answering=True)
            self.lines_drawn = True
        if progress.text != self.text_drawn:
            self.text_slot.markdown(md(progress.text))
            self.text_drawn = progress.text
        # drawn on every look, changed or not: Streamlit hears a new question from the page only at a call like this
        self.status_slot.caption(f"{md(progress.stage or 'Starting…')} ({progress.seconds()} s)")

    def finish(self, reply: dict) -> None:
        self.status_slot.empty()
        answer = reply.get("answer")
        slot = self.evidence_slot
        if found_nothing(answer):  # in a slot of their own: a container redrawn smaller keeps what it held below
            slot.empty()
            slot = self.nearest_slot
        with slot.container():  # the same lines, their chips usable now that nothing is being written
            show_evidence(reply.get("evidence", []), self.key, answer=answer)
        if reply.get("error"):
            self.text_slot.error(md(reply["error"]))
        else:
            self.text_slot.markdown(md(reply["content"]))
            with self.message:
                show_answer_details(answer, self.key, self.show_trace)


WAITING = "Asked while the answer above was being written: answered next, when that one is saved."
LOOK_EVERY = 0.2  # seconds between two looks at the worker


def watch_answers(job: answering.Answering, drawn: int, show_trace: bool, library: set[str]) -> None:
    """Draw what the conversation's worker does until it has answered every question queued: each message it
    finishes, the answer being written (LiveAnswer) and the questions waiting their turn. ``drawn``: how many
    of its messages are on the page already. A rerun (a new question, a click) stops this watching, not the
    worker; the next run replays what is done and watches again."""
    turns = st.container()  # the messages finished while watching, and the answer being written, in order
    waiting_slot = st.empty()  # below them: the questions asked meanwhile
    labelling = any(p.state == "labelling" for p in labelling_progress().values())
    live: LiveAnswer | None = None
    waiting_drawn: list[str] | None = None
    while True:
        messages, current, waiting, busy = job.state()
        for index in range(drawn, len(messages)):
            if live is not None and index == int(live.key):
                live.finish(messages[index])
                live = None
            else:
                with turns:
                    show_message(index, messages[index], show_trace, library)
        drawn = max(drawn, len(messages))
        if current is not None and live is None and current.index < drawn:
            with turns:
                live = LiveAnswer(current, show_trace, labelling)
        if live is not None and current is not None:
            live.update(current)
        if waiting != waiting_drawn and not waiting:
            waiting_slot.empty()
            waiting_drawn = waiting
        elif waiting != waiting_drawn:
            with waiting_slot.container():
                for question in waiting:
                    with st.chat_message("user"):
                        st.markdown(md(question))
                        st.caption(WAITING)
            waiting_drawn = waiting
        for problem in job.take_problems():
            add_notice(f"This chat is not being saved. {md(problem)}", "warning")
        if not busy and live is None and drawn >= len(messages):
            return
        time.sleep(LOOK_EVERY)


# -----------------------------------------------------------------------------
# Conversations: saved as they happen (conversations.py); the page's address names the one shown


def open_conversation(conversation_id: str | None) -> None:
    """Show the conversation ``conversation_id`` (None: a new chat, saved from its first question on) in
    this session and name it in the page's address (?c=<id>), so that a reload, a restart or the same
    address in another tab opens it again. The chips' state of the chat shown before is forgotten:
    the same keys name another chat's chips now."""
    for key in [k for k in st.session_state if str(k).startswith(("cite-", "evidence-"))]:
        del st.session_state[key]
    messages = []
    if conversation_id is not None:
        conversation = load_conversation(conversation_id)
        if conversation is None:
            conversation_id = None
        else:
            messages = conversation.messages
    st.session_state.conversation = conversation_id
    st.session_state.messages = messages
    if conversation_id is None:
        st.query_params.pop("c", None)
    else:
        st.query_params["c"] = conversation_id


def load_conversation(conversation_id: str) -> conversations.Conversation | None:
    """The saved conversation with its messages; None, said on the page, when it cannot be read or is gone."""
    try:
        conversation = conversations.get(conversation_id)
    except conversations.ConversationStoreError as err:
        add_notice(md(err))
        return None
    if conversation is None:
        st.session_state.address_note = "The conversation this page's address names is not here any more (it was deleted); this is a new chat."
    return conversation


def follow_address() -> None:
    """Open the conversation the page's address names when this session shows another one: a reload,
    a new tab or a restart of the app starts a session, which opens it again."""
    wanted = st.query_params.get("c") or None
    if "conversation" not in st.session_state or st.session_state.conversation != wanted:
        open_conversation(wanted)


def start_conversation() -> str:
    conversation = conversations.create()
    st.session_state.conversation = conversation.id
    st.query_params["c"] = conversation.id
    return conversation.id


UNSAVED = "unsaved-"  # the worker's key of a chat whose conversation could not be started (the file cannot be written)


def conversation_key() -> str:
    """The conversation shown, started at its first question; when it cannot be started the chat goes on
    unsaved (under a key of this session's), and the sidebar says so."""
    if conversation := st.session_state.get("conversation"):
        return conversation
    try:
        return start_conversation()
    except conversations.ConversationStoreError as err:
        add_notice(f"This chat is not being saved. {md(err)}", "warning")
        return st.session_state.setdefault("unsaved", f"{UNSAVED}{uuid.uuid4().hex}")


def save_message(conversation_id: str, message: dict) -> str | None:
    """Add ``message`` to the conversation (on the answering worker's thread: no Streamlit here); what went
    wrong, in words, when it could not be saved (the page says it in the sidebar), else None."""
    if conversation_id.startswith(UNSAVED):
        return None
    try:
        conversations.append(conversation_id, message)
    except conversations.ConversationNotFound:
        return "Its conversation was deleted in another window; start a new chat to keep the next questions."
    except conversations.ConversationStoreError as err:
        return str(err)
    return None


def rename_conversation(conversation_id: str) -> None:
    """The title box was edited: save the new title (an empty one puts the saved title back in the box)."""
    key = f"title-{conversation_id}"
    try:
        conversations.rename(conversation_id, st.session_state[key])
    except ValueError:
        del st.session_state[key]
    except (conversations.ConversationNotFound, conversations.ConversationStoreError) as err:
        add_notice(f"The conversation was not renamed. {md(err)}", "warning")


def delete_conversation(conversation_id: str) -> None:
    """Delete a conversation for good (conversations.delete); a new chat takes its place."""
    try:
        conversations.delete(conversation_id)
    except conversations.ConversationStoreError as err:
        add_notice(f"The conversation was not deleted. {md(err)}")
        return
    if st.session_state.get("conversation") == conversation_id:
        open_conversation(None)
    st.toast("Conversation deleted")


def export_name(title: str) -> str:
    """export_name("When did the railway come?") -> "When-did-the-railway-come.md" """
    return (re.sub(r"[^\w-]+", "-", title).strip("-")[:60] or "conversation") + ".md"


def conversations_panel(library: set[str]) -> None:
    """New chat; the saved conversations, the latest first, a click opening one; for the one shown:
    its title (editable), a Markdown export and delete."""
    st.subheader("Conversations")
    st.button("New chat", key="clear-chat", icon=":material/add:", on_click=open_conversation, args=(None,),
              help="Start an empty chat; this one stays in the list")
    try:
        listed = conversations.list_conversations()
    except conversations.ConversationStoreError as err:
        st.error(md(err))
        return
    if not listed:
        st.caption("Your questions and answers are kept here, on this machine.")
    current = st.session_state.get("conversation")
    box = st.container(height=320) if len(listed) > 8 else st.container()
    for conversation in listed:
        box.button(
            md(conversation.title or "Untitled"), key=f"conversation-{conversation.id}", width="stretch",
            type="primary" if conversation.id == current else "tertiary", on_click=open_conversation, args=(conversation.id,),
            help=f"Last message {time.strftime('%Y-%m-%d %H:%M', time.localtime(conversation.updated))}",
        )
    shown = next((c for c in listed if c.id == current), None)
    if shown is None:
        return
    st.text_input("Title of this conversation", value=shown.title, key=f"title-{shown.id}", max_chars=conversations.TITLE_CHARS,
                  on_change=rename_conversation, args=(shown.id,))
    export_col, delete_col = st.columns(2)
    export_col.download_button(
        "Export", conversations.export_markdown(replace(shown, messages=st.session_state.messages), library),
        file_name=export_name(shown.title), mime="text/markdown", key="export-conversation", on_click="ignore",
        icon=":material/download:", help="This conversation as Markdown: each answer with its cited pages and passages",
    )
    delete_col.button("Delete", key="delete-conversation", icon=":material/delete:", on_click=delete_conversation, args=(shown.id,),
                      help="Delete this conversation for good: nothing of it stays on this machine")


# -----------------------------------------------------------------------------


def chat(scope: list[str] | None, k: int, show_trace: bool, choice: str | None, library: set[str]) -> None:
    """Replay the conversation, take a new question, then watch the answers being written (answering.py):
    a question asked while another is being answered waits its turn and is answered after it; the box stays
    open, and nothing sent from it stops an answer. Each message is saved as it is made."""
    job = answering.running(st.session_state.get("conversation") or st.session_state.get("unsaved"))
    if job is not None:  # being answered (in this session, or another: a reload, a tab): the worker's list is the chat
        st.session_state.messages = job.messages
    messages = job.state()[0] if job is not None else list(st.session_state.messages)
    for index, message in enumerate(messages):
        show_message(index, message, show_trace, library)
    question = st.chat_input("Ask about your documents")
    if question and not library:
        st.info("Your library is empty: add a PDF in the sidebar first.")
    elif question:
        work = functools.partial(write_answer, retriever=retriever(), scope=scope, k=k, choice=choice)  # this question's settings
        job = answering.ask(conversation_key(), st.session_state.messages, question, work, save_message)
    if job is not None:
        watch_answers(job, len(messages), show_trace, library)


def main() -> None:
    follow_address()
    try:
        embedder()  # first: an embedder that cannot be had (a folder not there) is said now, not at the first upload
        rerankers.check_reranker()  # RERANKER too: loaded now, or what is wrong with it said now
        scope, k, show_trace, choice, panel = sidebar()
        library = {d["collection"] for d in ingest.list_documents(store())}
    except (ingest.StoreUnavailableError, models.ModelUnavailableError) as err:
        st.error(md(err))  # a CHROMA_HOST server that is down, an EMBED_MODEL folder that is not there: how to fix it
        return
    st.title("Chat with your PDFs")
    if note := st.session_state.pop("address_note", None):
        st.info(note)
    chat(scope, k, show_trace, choice, library)
    with panel:
        conversations_panel(library)


if __name__ == "__main__":  # Streamlit runs this file as __main__; tests import its functions
    main()
