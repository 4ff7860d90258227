"""The Streamlit page, run headless with streamlit.testing.v1.AppTest on a real store,
the real embedder and the small embedded chat model."""

from __future__ import annotations

import functools
import itertools
import json
import re
import threading
import time
from dataclasses import replace
from pathlib import Path

import pymupdf
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

import checker
import config
import embedders
import ingest
import models
import prompts
from checker import CheckedSentence, Citation
from conftest import SERVER_KEY, SERVER_MODEL, free_port, held_chats, shown, write_text_pdf
from retriever import Retriever
from safe_text import passage_md
from test_chroma_server import running_chroma

APP = str(Path(__file__).resolve().parents[1] / "app.py")
QUESTION = "When did the railway reach the town?"


@pytest.fixture
def small_model(monkeypatch):
    """The app loads its chat model itself; point it at the small embedded one. Page
    labelling is off unless a test turns it on (it would compete for the CPU)."""
    monkeypatch.setattr(config, "LLM_BACKEND", "embedded")
    monkeypatch.setattr(config, "EMBEDDED_LLM", "qwen2.5-coder-0.5b")
    monkeypatch.setattr(config, "ENRICH_ENABLED", False)
    st.cache_resource.clear()
    st.cache_data.clear()  # the models the picker lists, probed under another test's settings
    models.forget_chat_models()
    yield
    st.cache_resource.clear()
    st.cache_data.clear()
    models.forget_chat_models()


def upload(app: AppTest, path: Path) -> AppTest:
    app.sidebar.file_uploader[0].set_value((path.name, path.read_bytes(), "application/pdf"))
    return app.run()


def sidebar_text(app: AppTest) -> str:
    return shown(" ".join(m.value for m in app.sidebar.markdown) + " " + " ".join(c.value for c in app.sidebar.caption))


EVIDENCE_NUMBER = re.compile(r"^\*\*\[(L\d+)\]\*\* ")  # "**[L2]** " before a line, as shown()


def evidence_lines(message) -> list[str]:
    """The evidence lines a chat message shows (each a quotation, those in the expander too), as the
    person reads them, without the number before each."""
    return [EVIDENCE_NUMBER.sub("", shown(m.value)[2:]) for m in message.markdown if m.value.startswith("> ")]


def evidence_numbers(message) -> list[str]:
    """The numbers before the evidence lines a chat message shows, in order: ["L1", "L2", ...]; "" for an unnumbered line."""
    return [(match.group(1) if (match := EVIDENCE_NUMBER.match(shown(m.value)[2:])) else "")
            for m in message.markdown if m.value.startswith("> ")]


def cited_line(answer, chip: str):
    """The line a citation chip ("[L2] facts.pdf · p. 3 ✓") names: the answer's source of that number."""
    return answer.sources[int(re.match(r"\[L(\d+)\]", shown(chip)).group(1)) - 1]


def answer_markdown(message) -> str:
    """The answer's own text in a chat message: the first Markdown after the evidence."""
    return next(m.value for m in message.markdown if not m.value.startswith("> ") and m.value != "**What your documents say**")


def test_upload_ask_open_a_citation_then_remove_the_document(store, embedder, three_page_pdf, small_model):
    app = AppTest.from_file(APP, default_timeout=300).run()
    assert not app.exception and "No documents yet" in sidebar_text(app)

    upload(app, three_page_pdf)
    assert not app.exception
    assert "facts.pdf: searchable (3 pages" in shown(app.sidebar.status[0].label)
    assert "facts.pdf" in sidebar_text(app)

    app.chat_input[0].set_value(QUESTION).run()
    assert not app.exception
    answer = app.chat_message[1]
    assert "1889" in answer_markdown(answer)
    chips = answer.button_group(key="cite-1")
    chip = next(o for o in chips.options if re.match(r"\[L\d+\] facts\.pdf · p\. 3 ✓", shown(o)))  # verified (maybe inferred)
    number = re.match(r"\[L(\d+)\]", shown(chip)).group(1)
    assert f"[L{number}]" in shown(answer_markdown(answer)) or "(inferred)" in shown(chip)  # the marker's number
    assert any("checked sentence" in c.value for c in answer.caption)  # the backing summary
    assert not any("Confidence" in c.value or "%" in c.value for c in answer.caption)
    assert not any("Reading" in c.value or "Searching" in c.value for c in answer.caption)  # the status line is gone

    chips.set_value(chip).run()
    opened = app.chat_message[1]
    cited = cited_line(app.session_state["messages"][1]["answer"], chip)  # that very line, not the page's first source
    assert "1889" in cited.text and passage_md(cited.text) in [m.value for m in opened.markdown]
    assert [shown(c) for c in opened.get("image")[0].captions] == ["facts.pdf, page 3"]  # the rendered page
    assert len(app.session_state["messages"]) == 2  # opening a source keeps the chat

    app.sidebar.button(key=f"rm-{ingest.list_documents(store)[0]['collection']}").click().run()
    assert not app.exception
    assert ingest.list_documents(store) == [] and "No documents yet" in sidebar_text(app)
    opened = app.chat_message[1]  # the old answer stays; its page can no longer be shown
    assert any("no longer in the library" in i.value for i in opened.info)


def test_a_refused_answer_still_shows_the_lines_that_answer_and_keeps_them(store, embedder, three_page_pdf, small_model, ollama_server, monkeypatch):
    """The model (a stand-in speaking Ollama's protocol) says the documents do not say; the real embedder and store found the line that does: it is shown, kept, replayed, and opens its page."""
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    monkeypatch.setattr(config, "LLM_BACKEND", "ollama")
    monkeypatch.setattr(config, "EMBED_BACKEND", "embedded")
    monkeypatch.setattr(ollama_server, "models", [config.OLLAMA_DEFAULT_LLM])
    monkeypatch.setattr(ollama_server, "reply", prompts.REFUSAL)
    monkeypatch.setattr(ollama_server, "chats", [])
    st.cache_resource.clear()
    models.forget_chat_models()
    app = AppTest.from_file(APP, default_timeout=300).run()
    app.chat_input[0].set_value(QUESTION).run()
    assert not app.exception and ollama_server.chats  # the model was asked, and refused
    kept = app.session_state["messages"][1]
    assert kept["answer"].refused and kept["answer"].evidence

    answer = app.chat_message[1]
    headings = [m.value for m in answer.markdown]
    assert headings.index("**What your documents say**") < headings.index(answer_markdown(answer))  # the lines lead
    assert shown(answer_markdown(answer)) == prompts.NEAREST_LINES  # the lines found are the nearest, not nothing
    lines = evidence_lines(answer)
    number = next(n for n, line in enumerate(lines) if "The railway reached the town in 1889" in line)  # the line that answers
    assert [line.text for line in kept["evidence"]] == lines  # kept with the message
    assert evidence_numbers(answer) == [f"L{n}" for n in range(1, len(lines) + 1)]  # as the model reads and cites them
    if len(lines) > config.EVIDENCE_LINES:  # the first ones shown, the others the model read in a collapsed expander
        assert [e.label for e in answer.expander] == [f"All {len(lines)} lines the model read"]
        assert evidence_numbers(answer.expander[0]) == [f"L{n}" for n in range(config.EVIDENCE_LINES + 1, len(lines) + 1)]
    else:
        assert len(lines) == config.EVIDENCE_LINES and not answer.expander
    assert not [b for b in answer.button_group if b.key.endswith("-answering")]  # the disabled chips were redrawn usable

    app.run()  # a rerun replays the chat from session_state: the same lines, the same chips
    answer = app.chat_message[1]
    assert evidence_lines(answer) == lines
    chip = answer.button_group(key=f"evidence-1-{number}")
    assert [shown(o) for o in chip.options] == ["facts.pdf · p. 3"]

    chip.set_value(chip.options[0]).run()
    opened = app.chat_message[1]
    assert [shown(c) for c in opened.get("image")[0].captions] == ["facts.pdf, page 3"]  # the page, the line highlighted
    assert evidence_lines(opened) == lines and len(app.session_state["messages"]) == 2


OFF_TOPIC = "How do I configure a Kubernetes ingress controller?"
NEAREST = "Nearest lines in your documents: none is about your question"


def test_a_question_nothing_in_the_library_is_about_shows_its_nearest_lines_only_set_aside(store, embedder, three_page_pdf, small_model):
    """Nothing is close to the question: the fixed reply, no model call; the nearest lines are not presented as
    "What your documents say" but kept, unnumbered, in a collapsed expander that says none is about the question."""
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    app = AppTest.from_file(APP, default_timeout=300).run()
    app.chat_input[0].set_value(OFF_TOPIC).run()
    assert not app.exception
    kept = app.session_state["messages"][1]
    assert kept["answer"].nothing_found and kept["evidence"]  # the nearest lines, kept with the message
    for message in (app.chat_message[1], app.run().chat_message[1]):  # as answered, then replayed
        said = shown(" ".join(m.value for m in message.markdown) + " " + " ".join(c.value for c in message.caption))
        assert shown(answer_markdown(message)) == prompts.NOT_FOUND
        assert "What your documents say" not in said and "Nearest passages" not in said
        assert [e.label for e in message.expander] == [NEAREST]
        assert evidence_lines(message) == [line.text for line in kept["evidence"]]
        assert evidence_numbers(message) == [""] * len(kept["evidence"])  # no answer cites them: no [L1]


# -----------------------------------------------------------------------------
# The page's own helpers, called directly (app.py runs its main() only as Streamlit's script)


def the_page():
    import app as page  # imported here: its module-level Streamlit calls run bare, only for these tests

    return page


LONG_NAME = "GPL-Graduate-Studies-Professional-Learning-Brochure-Jul-2021.pdf"


def test_a_long_document_name_is_shortened_in_its_middle_on_its_chip_and_kept_whole_in_the_tooltip():
    page = the_page()
    assert page.short_name(LONG_NAME) == "GPL-Graduate-S…-Jul-2021.pdf" and len(page.short_name(LONG_NAME)) == page.NAME_CHARS
    assert page.short_name("facts.pdf") == "facts.pdf" and page.short_name("x" * 28) == "x" * 28
    assert page.short_name("x" * 29) == "x" * 14 + "…" + "x" * 13 and page.short_name("abcdef", 5) == "ab…ef"
    citation = Citation(2, LONG_NAME, 7, "c", True)
    assert shown(page.chip_label(citation, as_lines=True)) == "[L2] GPL-Graduate-S…-Jul-2021.pdf · p. 7 ✓"
    assert shown(page.chip_label(replace(citation, verified=False))) == "[2] GPL-Graduate-S…-Jul-2021.pdf · p. 7 ⚠"
    assert LONG_NAME in shown(page.chips_help([citation]))
    assert shown(page.chips_help([replace(citation, doc_name="facts.pdf")])) == "Open a source to see the page"


BACKS, WARNS = Citation(1, "a.pdf", 3, "c", True), Citation(2, "a.pdf", 4, "c", False)
FOUND = Citation(3, "a.pdf", 5, "c", True, inferred=True)  # no marker: the checker found the line that backs it
BACKED = CheckedSentence("The railway reached the town in 1889 [L1].", [BACKS], True)
UNBACKED = CheckedSentence("Trains took two hours [L2].", [WARNS], False)
UNCITED = CheckedSentence("The town had a harbour.", [], False)
INFERRED = CheckedSentence("The catch reached 3,200 tonnes.", [FOUND], True)
SHORT = CheckedSentence("Yes.", [], None)


def test_the_backing_summary_counts_the_checked_sentences_and_the_backed_ones():
    summary = checker.backing_summary
    assert summary([BACKED, SHORT], [BACKS]) == "The one checked sentence is backed by a line it cites."
    assert summary([BACKED, BACKED, SHORT], [BACKS]) == "Each of the 2 checked sentences is backed by a line it cites."
    assert summary([BACKED, BACKED, UNBACKED], [BACKS, WARNS]) == "2 of 3 checked sentences are backed by a cited line; ⚠ marks the other."
    assert summary([BACKED, UNBACKED, UNCITED], [BACKS, WARNS]) == "1 of 3 checked sentences is backed by a cited line; ⚠ marks the other 2."
    assert summary([UNBACKED], [WARNS]) == "The one checked sentence is not backed by any line; ⚠ marks it."
    assert summary([UNBACKED, UNCITED], [WARNS], as_lines=False) == "None of the 2 checked sentences is backed by a passage; ⚠ marks each."
    assert summary([BACKED, INFERRED], [BACKS, FOUND]) == (
        "Each of the 2 checked sentences is backed by a line, 1 of them by one the model did not cite (marked inferred).")
    assert shown(summary([BACKED, replace(SHORT, fabricated=[12])], [BACKS])).endswith(" [L12] names no line the model read.")
    assert summary([SHORT], []) is None  # nothing judged: no summary at all


def test_the_backing_summary_never_says_all_backed_beside_a_warning():
    """Whatever mix of sentences and chips: a ⚠ on screen (an unbacked sentence, or a chip of a cited line that
    does not back its sentence, even beside a backed one) is named in the summary; none shown, none named."""
    summary = checker.backing_summary
    both_cited = CheckedSentence("The railway reached the town in 1889 [L1][L2].", [BACKS, WARNS], True)
    said = summary([BACKED, both_cited], [BACKS, WARNS])  # every sentence backed, yet a ⚠ chip
    assert said.startswith("Each of the 2 checked sentences is backed") and "⚠ marks a cited line that does not back" in said
    for sentences in itertools.product([BACKED, UNBACKED, UNCITED, INFERRED, both_cited, SHORT], repeat=3):
        chips = list({c.number: c for s in sentences for c in s.citations}.values())
        said = summary(list(sentences), chips)
        if all(s.supported is None for s in sentences):
            assert said is None
            continue
        warned = any(s.supported is False for s in sentences) or any(not c.verified for c in chips)
        assert ("⚠" in said) == warned and "%" not in said, (sentences, said)
        if any(s.supported is False for s in sentences):
            assert not said.startswith(("Each", "The one checked sentence is backed")), said


def test_a_bad_upload_is_refused_in_plain_words_and_stores_nothing(store, tmp_path, small_model):
    bad = tmp_path / "notes.pdf"
    bad.write_bytes(b"this is a text file wearing a .pdf name")
    app = upload(AppTest.from_file(APP, default_timeout=120).run(), bad)
    assert not app.exception
    assert "not added" in app.sidebar.status[0].label
    assert "not a PDF" in shown(app.sidebar.error[0].value)
    assert ingest.list_documents(store, include_incomplete=True) == []


def test_the_model_failing_mid_chat_is_an_error_message_and_the_chat_survives(store, embedder, three_page_pdf, small_model, ollama_server, monkeypatch):
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    app = AppTest.from_file(APP, default_timeout=300).run()
    app.chat_input[0].set_value("Hello!").run()  # answered without a model call
    monkeypatch.setattr(config, "LLM_BACKEND", "ollama")
    ollama_server.models = []  # Ollama is up but has not pulled the model
    st.cache_resource.clear()
    models.forget_chat_models()
    app.chat_input[0].set_value(QUESTION).run()
    assert not app.exception
    assert "llama3.2:3b" in shown(app.sidebar.error[0].value)  # the sidebar says which model is missing
    assert len(app.chat_message) == 4 and app.chat_message[3].error  # the failure is in the chat
    assert app.chat_message[1].markdown[0].value  # the earlier reply is still there


def test_an_empty_library_says_so_instead_of_answering(store, small_model):
    app = AppTest.from_file(APP, default_timeout=120).run()
    app.chat_input[0].set_value("Anything?").run()
    assert not app.exception and "library is empty" in shown(app.info[0].value)


def test_clear_chat_and_the_retrieval_trace(store, embedder, three_page_pdf, small_model):
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    app = AppTest.from_file(APP, default_timeout=300).run()
    app.sidebar.toggle[0].set_value(True).run()
    app.chat_input[0].set_value(QUESTION).run()
    trace = app.chat_message[1].dataframe[0].value
    assert {"semantic rank", "BM25 rank", "fused score"} <= set(trace.columns)
    assert "facts.pdf · p. 3" in " ".join(trace["source"])
    app.sidebar.button(key="clear-chat").click().run()
    assert app.session_state["messages"] == [] and not app.chat_message


def test_page_labels_are_made_in_the_background_and_their_progress_is_shown(store, embedder, three_page_pdf, small_model, monkeypatch):
    monkeypatch.setattr(config, "ENRICH_ENABLED", True)
    app = upload(AppTest.from_file(APP, default_timeout=300).run(), three_page_pdf)
    assert "facts.pdf: searchable" in shown(app.sidebar.status[0].label)  # searchable before any label exists
    deadline = time.monotonic() + 240
    while "Page labels: done" not in sidebar_text(app.run()) and time.monotonic() < deadline:
        time.sleep(2)
    assert "Page labels: done" in sidebar_text(app)
    labels = store.get_collection(ingest.list_documents(store)[0]["collection"]).get(include=["metadatas"])
    assert all(m["enriched"] and m["title"] for m in labels["metadatas"])


def test_the_server_listens_on_localhost_only_with_the_upload_limit_ingest_enforces():
    import tomllib

    settings = tomllib.loads((Path(APP).parent / ".streamlit" / "config.toml").read_text())
    assert settings["server"]["address"] == "127.0.0.1"
    assert settings["server"]["maxUploadSize"] == config.MAX_FILE_MB


def test_a_refused_upload_says_why_until_dismissed(store, tmp_path, small_model):
    bad = tmp_path / "notes.pdf"
    bad.write_bytes(b"this is a text file wearing a .pdf name")
    app = upload(AppTest.from_file(APP, default_timeout=120).run(), bad)
    app.run()  # another interaction: the reason stays, without a click
    assert "notes.pdf" in shown(app.sidebar.error[0].value) and "not a PDF" in app.sidebar.error[0].value
    app.sidebar.button(key=next(b.key for b in app.sidebar.button if b.key.startswith("dismiss-"))).click().run()
    assert not app.sidebar.error


def test_the_same_file_uploaded_again_after_removal_is_added_again(store, embedder, three_page_pdf, small_model):
    app = upload(AppTest.from_file(APP, default_timeout=300).run(), three_page_pdf)
    collection = ingest.list_documents(store)[0]["collection"]
    app.sidebar.button(key=f"rm-{collection}").click().run()
    assert ingest.list_documents(store) == []
    upload(app, three_page_pdf)
    assert not app.exception and [d["collection"] for d in ingest.list_documents(store)] == [collection]


def test_two_different_files_with_the_same_name_and_size_are_both_added(store, embedder, small_model):
    doc = pymupdf.open()
    doc.new_page().insert_text((50, 50), "The harbour opened in 1850.")
    doc.set_metadata({"subject": "copy a"})
    first = doc.tobytes(no_new_id=True)
    # the same page, told apart by a same-length subject line; the bytes are edited rather than saved
    # twice because each save writes a random file ID whose escaped length varies
    copies = [first, first.replace(b"(copy a)", b"(copy b)")]
    assert len(copies[0]) == len(copies[1]) and copies[0] != copies[1]
    app = AppTest.from_file(APP, default_timeout=300).run()
    app.sidebar.file_uploader[0].set_value([("report.pdf", data, "application/pdf") for data in copies])
    app.run()
    assert not app.exception and len(ingest.list_documents(store)) == 2


# -----------------------------------------------------------------------------
# The model picker: the small embedded model is the settings' one, llama.cpp's server the second choice

SMALL_CHOICE, SMALL_LABEL = "embedded:qwen2.5-coder-0.5b", "embedded Qwen2.5-Coder-0.5B-Instruct Q4"
SERVER_CHOICE = f"openai:{SERVER_MODEL}"


@pytest.fixture
def with_server(llama_server, monkeypatch):
    """llama.cpp's real OpenAI-compatible server, reachable as a second model; its /v1 URL."""
    monkeypatch.setattr(config, "OPENAI_BASE_URL", llama_server)
    monkeypatch.setattr(config, "OPENAI_API_KEY", SERVER_KEY)
    monkeypatch.setattr(config, "LLM_MODEL", "")
    return llama_server


def picker(app: AppTest):
    return app.sidebar.selectbox(key="model-picker")


def test_the_picker_lists_every_model_switches_to_the_servers_and_keeps_the_pick(store, embedder, three_page_pdf, small_model, with_server):
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    server_label = f"{SERVER_MODEL} on {with_server}"
    app = AppTest.from_file(APP, default_timeout=300).run()
    assert not app.exception and picker(app).label == "Model that answers"
    assert set(picker(app).options) == {"embedded Qwen2.5-Coder-1.5B-Instruct Q4_K_M", SMALL_LABEL, server_label}
    assert picker(app).value == SMALL_CHOICE and f"Model: {SMALL_LABEL}" in sidebar_text(app)

    picker(app).set_value(SERVER_CHOICE).run()
    assert not app.exception and picker(app).value == SERVER_CHOICE
    assert f"Model: {server_label}" in sidebar_text(app)
    assert models.saved_choice() == SERVER_CHOICE  # beside the store: kept across reloads and restarts

    app.chat_input[0].set_value(QUESTION).run()
    assert not app.exception
    assert app.session_state["messages"][1]["answer"].model == server_label
    assert f"Written by {server_label}" in [shown(c.value) for c in app.chat_message[1].caption]

    reloaded = AppTest.from_file(APP, default_timeout=300).run()  # a new session, as after a reload
    assert picker(reloaded).value == SERVER_CHOICE and f"Model: {server_label}" in sidebar_text(reloaded)


def test_a_picked_model_whose_server_is_down_gives_way_to_the_settings_model_until_it_is_back(store, small_model, llama_server, monkeypatch):
    down = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    monkeypatch.setattr(config, "OPENAI_BASE_URL", down)
    monkeypatch.setattr(config, "OPENAI_API_KEY", SERVER_KEY)
    models.save_choice(SERVER_CHOICE)
    app = AppTest.from_file(APP, default_timeout=300).run()
    assert not app.exception
    assert [shown(w.value) for w in app.sidebar.warning] == [f"{SERVER_MODEL} on {down} is not available now, so {SMALL_LABEL} answers."]
    assert picker(app).value == SMALL_CHOICE and f"Model: {SMALL_LABEL}" in sidebar_text(app)
    assert models.saved_choice() == SERVER_CHOICE  # still the pick: it comes back with its server

    monkeypatch.setattr(config, "OPENAI_BASE_URL", llama_server)  # the server is back
    app.run()
    assert not app.sidebar.warning and picker(app).value == SERVER_CHOICE
    assert f"Model: {SERVER_MODEL} on {llama_server}" in sidebar_text(app)


class HalfMiniLM(embedders.MiniLMEmbeddings):
    """Another embedder (its own name, half the dimensions): what a document added before a switch of embedder had."""

    name = "half-minilm-test"

    def embed_documents(self, texts):
        return [v[:192] for v in super().embed_documents(texts)]

    def embed_query(self, text):
        return super().embed_query(text)[:192]


def test_a_document_embedded_with_another_embedder_says_so_and_is_re_embedded(store, embedder, three_page_pdf, small_model):
    result = ingest.ingest_pdf(three_page_pdf, store, HalfMiniLM())
    kept, aside = ingest.kept_pdf_path(result.collection), three_page_pdf.with_name("aside.pdf")
    app = AppTest.from_file(APP, default_timeout=300).run()
    assert not app.exception
    line = f"Embedded with half-minilm-test; this app now embeds with {embedder.name}, so it is left out of searches."
    assert [shown(w.value) for w in app.sidebar.warning] == [line]

    kept.rename(aside)  # the kept PDF is gone: re-embedding cannot read the pages again
    app.sidebar.button(key=f"reembed-{result.collection}").click().run()
    assert not app.exception
    notice = shown(app.sidebar.error[0].value)
    assert notice.startswith("**facts.pdf** was not re-embedded.") and "not on this machine" in notice  # ingest's sentence
    assert ingest.list_documents(store)[0]["embedder"] == "half-minilm-test"

    aside.rename(kept)
    app.sidebar.button(key=f"reembed-{result.collection}").click().run()
    assert not app.exception and line not in [shown(w.value) for w in app.sidebar.warning]
    assert ingest.list_documents(store)[0]["embedder"] == embedders.embedder_name(embedder)
    col = ingest.open_collection(store, result.collection, embedder)
    assert len(col.get(include=["embeddings"], limit=1)["embeddings"][0]) == 384  # really embedded again
    hits = Retriever(store, embedder).search(QUESTION)
    assert (hits[0].collection, hits[0].page) == (result.collection, 3)


def test_a_page_added_on_another_machine_of_a_shared_store_says_where_its_pdf_is(tmp_path, embedder, three_page_pdf, small_model, monkeypatch):
    with running_chroma(tmp_path) as port:
        monkeypatch.setattr(config, "CHROMA_HOST", "127.0.0.1")
        monkeypatch.setattr(config, "CHROMA_PORT", port)
        monkeypatch.setattr(config, "CHROMA_PERSIST_DIR", str(tmp_path / "machine-a"))
        ingest.ingest_pdf(three_page_pdf, ingest.get_client(), embedder)  # machine A adds it and keeps its PDF
        monkeypatch.setattr(config, "CHROMA_PERSIST_DIR", str(tmp_path / "machine-b"))  # machine B: same server, no PDFs
        app = AppTest.from_file(APP, default_timeout=300).run()
        app.chat_input[0].set_value(QUESTION).run()
        assert not app.exception
        number = next(n for n, line in enumerate(evidence_lines(app.chat_message[1])) if "railway reached the town in 1889" in line)
        chip = app.chat_message[1].button_group(key=f"evidence-1-{number}")
        chip.set_value(chip.options[0]).run()
    opened = app.chat_message[1]
    assert not app.exception and not opened.get("image")
    assert [shown(i.value) for i in opened.info] == [
        "The PDF of this page is kept on the machine that added it; this machine has no copy, so its page "
        "cannot be shown here (the text above is from the shared store)."
    ]


# -----------------------------------------------------------------------------
# Conversations that last (issue 37): saved beside the store, named in the page's address

import conversations  # noqa: E402
from safe_text import md  # noqa: E402


def conversation_button(app: AppTest, conversation_id: str):
    return app.sidebar.button(key=f"conversation-{conversation_id}")


def test_a_conversation_is_saved_as_it_happens_and_a_new_session_with_its_address_shows_it_again(store, embedder, three_page_pdf, small_model):
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    app = AppTest.from_file(APP, default_timeout=300).run()
    assert "c" not in app.query_params and conversations.list_conversations() == []  # nothing saved before a question
    app.chat_input[0].set_value(QUESTION).run()
    assert not app.exception
    conversation_id = app.query_params["c"]
    saved = conversations.get(conversation_id)
    assert saved.title == QUESTION and [m["role"] for m in saved.messages] == ["user", "assistant"]
    assert saved.messages[1]["answer"] == app.session_state["messages"][1]["answer"]  # the whole Answer, as it was
    assert conversation_button(app, conversation_id).label == md(QUESTION)  # listed, the question its title
    before = app.chat_message[1]
    chips = before.button_group(key="cite-1")

    reloaded = AppTest.from_file(APP, default_timeout=300)  # a reload: a new session, the same address
    reloaded.query_params["c"] = conversation_id
    reloaded.run()
    assert not reloaded.exception and reloaded.query_params["c"] == conversation_id
    assert [shown(m.markdown[0].value) for m in reloaded.chat_message[:1]] == [QUESTION]
    again = reloaded.chat_message[1]
    assert answer_markdown(again) == answer_markdown(before) and evidence_lines(again) == evidence_lines(before)
    assert [c.value for c in again.caption] == [c.value for c in before.caption]  # confidence, model...
    replayed = again.button_group(key="cite-1")
    assert replayed.options == chips.options
    chip = next(o for o in replayed.options if "facts.pdf · p. 3" in shown(o))
    replayed.set_value(chip).run()
    opened = reloaded.chat_message[1]
    assert [shown(c) for c in opened.get("image")[0].captions] == ["facts.pdf, page 3"]  # the page, from the saved offsets
    cited = cited_line(saved.messages[1]["answer"], chip)
    assert "The railway reached the town in 1889" in cited.text and passage_md(cited.text) in [m.value for m in opened.markdown]

    fresh = AppTest.from_file(APP, default_timeout=300).run()  # no address: a new chat, the saved one listed
    assert not fresh.chat_message and "c" not in fresh.query_params
    conversation_button(fresh, conversation_id).click().run()
    assert fresh.query_params["c"] == conversation_id and answer_markdown(fresh.chat_message[1]) == answer_markdown(before)


def test_new_chat_rename_export_and_delete_in_the_sidebar(store, embedder, three_page_pdf, small_model):
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    hostile = conversations.create('![x](http://127.0.0.1:9/leak) <img src="http://127.0.0.1:9/y">')  # e.g. from the API
    app = AppTest.from_file(APP, default_timeout=300).run()
    assert conversation_button(app, hostile.id).label == md(hostile.title)  # a title stays text
    app.chat_input[0].set_value("Hello!").run()  # answered without a model
    first = app.query_params["c"]
    assert [c.id for c in conversations.list_conversations()] == [first, hostile.id]  # the latest first

    app.sidebar.button(key="clear-chat").click().run()  # New chat: empty, unsaved until its first question
    assert not app.chat_message and "c" not in app.query_params and app.session_state["conversation"] is None
    app.chat_input[0].set_value("Hi there").run()
    second = app.query_params["c"]
    assert second != first and len(conversations.list_conversations()) == 3

    app.sidebar.text_input(key=f"title-{second}").set_value("Greetings, renamed").run()
    assert conversations.get(second).title == "Greetings, renamed"
    assert conversation_button(app, second).label == md("Greetings, renamed")
    export = app.sidebar.get("download_button")[0]
    assert export.proto.label == "Export" and export.proto.ignore_rerun  # a download does not rerun the page

    conversation_button(app, first).click().run()  # switch back
    assert app.query_params["c"] == first and shown(app.chat_message[0].markdown[0].value) == "Hello!"
    app.sidebar.button(key="delete-conversation").click().run()
    assert not app.exception and conversations.get(first) is None
    assert not app.chat_message and "c" not in app.query_params
    assert {c.id for c in conversations.list_conversations()} == {second, hostile.id}

    gone = AppTest.from_file(APP, default_timeout=300)  # an old address of the deleted conversation
    gone.query_params["c"] = first
    gone.run()
    assert not gone.exception and not gone.chat_message and "c" not in gone.query_params
    assert "not here any more" in gone.info[0].value


def test_an_answer_whose_document_was_removed_stays_readable_its_chips_marked_removed(store, embedder, three_page_pdf, small_model):
    collection = ingest.ingest_pdf(three_page_pdf, store, embedder).collection
    app = AppTest.from_file(APP, default_timeout=300).run()
    app.chat_input[0].set_value(QUESTION).run()
    conversation_id = app.query_params["c"]
    text, lines = answer_markdown(app.chat_message[1]), evidence_lines(app.chat_message[1])
    ingest.delete_document(store, collection)

    reloaded = AppTest.from_file(APP, default_timeout=300)
    reloaded.query_params["c"] = conversation_id
    reloaded.run()
    assert not reloaded.exception
    answer = reloaded.chat_message[1]
    assert answer_markdown(answer) == text and evidence_lines(answer) == lines  # still readable
    chips = answer.button_group(key="cite-1")
    assert chips.options and all(shown(o).endswith(" · removed") for o in chips.options)
    evidence_chips = [answer.button_group(key=f"evidence-1-{n}") for n in range(len(lines))]
    assert all(shown(c.options[0]).endswith(" · removed") for c in evidence_chips)
    chip = next(o for o in chips.options if "facts.pdf · p. 3" in shown(o))
    chips.set_value(chip).run()
    opened = reloaded.chat_message[1]
    assert not reloaded.exception and not opened.get("image")
    cited = cited_line(conversations.get(conversation_id).messages[1]["answer"], chip)
    assert "1889" in cited.text and passage_md(cited.text) in [m.value for m in opened.markdown]  # the saved line
    assert any("no longer in the library" in i.value for i in opened.info)
    export = conversations.export_markdown(conversations.get(conversation_id), library=set())
    assert "facts.pdf, page 3 (removed from the library since)" in shown(export)


SWEDISH_PAGE = (
    "Järnvägen nådde staden år 1871, och stationen byggdes bredvid torget. Handlare från hela dalen kom "
    "till marknaden varje lördag. Biblioteket har tolvtusen böcker, och eleverna lånar dem utan kostnad. "
    "Vattnet kommer från sjön ovanför byn, som anlades efter torkan 1921 när de gamla brunnarna sinade."
)


def test_a_document_in_a_language_searched_by_its_words_only_says_so_at_upload(store, embedder, tmp_path, small_model):
    app = upload(AppTest.from_file(APP, default_timeout=300).run(), write_text_pdf(tmp_path / "byn.pdf", [SWEDISH_PAGE]))
    warning = shown(app.sidebar.warning[0].value)
    assert "byn.pdf" in warning and "Swedish" in warning and "searched by its words only" in warning
    assert "Swedish" in sidebar_text(app)  # the library card names its language


def test_a_document_in_a_fully_served_language_gets_no_warning(store, embedder, tmp_path, small_model):
    german = "Die Bahnstrecke erreichte die Stadt im Jahr 1871. Der Bahnhof wurde neben dem Marktplatz errichtet. " * 3
    app = upload(AppTest.from_file(APP, default_timeout=300).run(), write_text_pdf(tmp_path / "chronik.pdf", [german]))
    assert not app.sidebar.warning
    assert "German" in sidebar_text(app)


def test_a_question_about_the_sections_lists_each_with_its_pages_and_a_chip_to_open(store, embedder, small_model, tmp_path):
    pdf = write_text_pdf(tmp_path / "plan.pdf", ["Background of the harbour plan.", "Budget of the works.", "More budget.", "Timetable."])
    doc = pymupdf.open(pdf)
    doc.set_toc([[1, "Background", 1], [1, "Budget", 2], [1, "Timetable", 4]])
    doc.saveIncr()
    doc.close()
    app = upload(AppTest.from_file(APP, default_timeout=300).run(), pdf)
    app.chat_input[0].set_value("What are the sections of this document?").run()
    assert not app.exception
    answer = app.chat_message[1]
    text = shown(answer_markdown(answer))
    assert "2. Budget (pp. 2–3) [2]" in text and "3. Timetable (p. 4) [3]" in text
    chips = answer.button_group(key="cite-1")
    budget = next(o for o in chips.options if shown(o).startswith("[2] plan.pdf · p. 2"))
    chips.set_value(budget).run()
    assert [shown(c) for c in app.chat_message[1].get("image")[0].captions] == ["plan.pdf, page 2"]


def test_a_document_too_short_to_tell_its_language_gets_no_language_warning(store, embedder, three_page_pdf, small_model):
    app = upload(AppTest.from_file(APP, default_timeout=300).run(), write_text_pdf(three_page_pdf.with_name("note.pdf"), ["A short note."]))
    assert not app.sidebar.warning and "unknown" not in sidebar_text(app)


def test_a_question_sent_while_an_answer_is_written_waits_its_turn_and_every_answer_is_kept(store, embedder, three_page_pdf, small_model, ollama_server, monkeypatch):
    """Streamlit stops a script run when a question is sent from the page. The first answer is written by the
    conversation's worker (answering.py), not by the run that asked it: here that run is gone (as a rerun stops
    it) and a new session of the same address sends the next question while the model (a stand-in) holds the
    first reply. The new question waits, the first answer is finished and saved, then the new one is answered
    with it in its history; the page and the saved conversation hold every question followed by its answer."""
    import answering

    page = the_page()
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    monkeypatch.setattr(config, "LLM_BACKEND", "ollama")
    monkeypatch.setattr(config, "EMBED_BACKEND", "embedded")
    monkeypatch.setattr(ollama_server, "models", [config.OLLAMA_DEFAULT_LLM])
    monkeypatch.setattr(ollama_server, "replies", ["The railway reached the town in 1889 [1].",
                                                   "How long did the trains to the capital take?",  # the follow-up rewritten
                                                   "Trains to the capital took nine hours [1]."])
    monkeypatch.setattr(ollama_server, "chats", [])
    asked, release = held_chats(ollama_server, monkeypatch, timeout=120)
    st.cache_resource.clear()
    models.forget_chat_models()
    conversation = conversations.create()
    app = AppTest.from_file(APP, default_timeout=300)  # a page of the conversation, open before its first question
    app.query_params["c"] = conversation.id
    app.run()
    work = functools.partial(page.write_answer, retriever=Retriever(store, embedder), scope=None, k=config.TOP_K, choice=None)
    job = answering.ask(conversation.id, [], QUESTION, work, page.save_message)  # asked by a run that is gone since
    assert asked.wait(timeout=120)  # the model is writing the first answer
    seen = {}

    def look_then_release():
        seen["waiting"] = job.state()[2]
        release.set()

    try:
        threading.Timer(3, look_then_release).start()  # while the next question waits
        app.chat_input[0].set_value("And how long did the trains take?").run(timeout=300)
    finally:
        release.set()
    assert not app.exception and seen["waiting"] == ["And how long did the trains take?"]
    said = [(m.name, shown(answer_markdown(m) if m.name == "assistant" else m.markdown[0].value)) for m in app.chat_message]
    assert said == [("user", QUESTION), ("assistant", "The railway reached the town in 1889 [1]."),
                    ("user", "And how long did the trains take?"), ("assistant", "Trains to the capital took nine hours [1].")]
    saved = conversations.get(conversation.id).messages
    assert [(m["role"], m["content"]) for m in saved] == [(role, text) for role, text in said]  # kept, in the order asked
    assert len(ollama_server.chats) == 3 and all("1889" in json.dumps(c["messages"]) for c in ollama_server.chats[1:])  # in its history
    assert not any("(" in c.value and " s)" in c.value for c in app.chat_message[3].caption)  # the status line is gone
