"""What the model reads: the lines for a model the app ships, marked passages within a budget for a brought one."""

from __future__ import annotations

import pytest

import config
import context
import ingest
import models
import prompts
import qa
import reading
from conftest import FACT_PAGES, write_text_pdf
from pages import Page
from records import Hit
from retriever import Retriever

QUESTION = "How many tonnes of fish were landed in 1911?"


def hit(text: str, page: int = 1, **trace) -> Hit:
    return Hit(id=f"c:{page}", collection="c", doc_name="harbour.pdf", page=page, start=0, end=len(text), text=text, trace=trace)


def test_a_marked_line_is_shown_between_the_marks_and_a_page_cannot_print_its_own():
    passage = hit("Cash 5. Debt 7. ⟦Equity 9.⟧", marked=[(8, 15)])
    assert reading.marked_text(passage) == "Cash 5. ⟦Debt 7.⟧ [Equity 9.]"


def test_the_evidence_lines_are_found_inside_a_passage_of_several_windows():
    text = "Alpha one. Beta two. Gamma three. Delta four."
    page = Page(hit(text), text, [])
    line = Hit(id="l", collection="c", doc_name="harbour.pdf", page=1, start=34, end=45, text="Delta four.")
    other_page = Hit(id="m", collection="c", doc_name="harbour.pdf", page=2, start=0, end=10, text="Alpha one.")
    spans = [(0, 10), (34, 45)]  # "Alpha one." … "Delta four."
    marks = context.marks_in(page, spans, [line, other_page])
    joined = context.GAP.join(text[s:e] for s, e in spans)
    assert [joined[s:e] for s, e in marks] == ["Delta four."]


def test_the_setting_overrides_what_each_model_reads(llm, monkeypatch):
    assert reading.what_model_reads(llm) == "lines"
    assert reading.what_model_reads(llm, "passages") == "passages"
    monkeypatch.setattr(config, "ANSWER_CONTEXT", "passages")
    assert reading.what_model_reads(llm) == "passages"


def test_a_brought_models_passages_take_half_its_context_up_to_the_cap_unless_set(ollama_chat, monkeypatch):
    brought = models.get_chat_model()
    assert reading.passage_chars(brought) == min(models.context_length(brought) // 2, config.PASSAGE_TOKENS_MAX) * reading.CHARS_PER_TOKEN
    monkeypatch.setattr(config, "PASSAGE_TOKENS", 300)
    assert reading.passage_chars(brought) == 300 * reading.CHARS_PER_TOKEN


@pytest.fixture
def facts(store, embedder, tmp_path):
    pages = FACT_PAGES + [" ".join(f"Harbour note {i}: the quay was repaired in spring and the nets were mended." for i in range(40))]
    ingest.ingest_pdf(write_text_pdf(tmp_path / "facts.pdf", pages), store, embedder)
    return Retriever(store, embedder)


def test_the_shipped_model_reads_lines_and_a_brought_model_reads_marked_passages(facts, llm, ollama_chat, monkeypatch):
    shipped = qa.answer_question(QUESTION, facts, llm=llm)
    assert shipped.reads_lines and shipped.evidence[0].text in [s.text for s in shipped.sources]

    monkeypatch.setattr(config, "PASSAGE_TOKENS", 120)  # a small budget: the long page cannot come whole
    monkeypatch.setattr(ollama_chat, "replies", ["In 1911 the catch reached 3,200 tonnes [1]."])
    brought = qa.answer_question(QUESTION, facts)
    assert not brought.reads_lines and brought.model.startswith("Ollama")
    prompt = " ".join(ollama_chat.chats[0]["messages"][-1]["content"].split())  # the page's line breaks as spaces
    line = brought.evidence[0]
    assert "3,200 tonnes" in line.text and f"{prompts.MARK_OPEN}{line.text}{prompts.MARK_CLOSE}" in prompt
    assert prompts.MARKED_RULE.strip() in ollama_chat.chats[0]["messages"][0]["content"]
    assert sum(len(s.text) for s in brought.sources) <= 120 * reading.CHARS_PER_TOKEN
    assert brought.citations and brought.citations[0].verified  # the marks stay out of the text the checker reads


def test_a_served_model_reads_passages_and_the_same_model_reads_lines_when_set(facts, server_backend, monkeypatch):
    """The llama.cpp server holds the suite's small model: brought, it reads passages; told to read lines
    (ANSWER_CONTEXT=lines) it reads the same lines the embedded model reads."""
    served = qa.answer_question(QUESTION, facts)
    assert not served.reads_lines and any("3,200 tonnes" in s.text for s in served.sources)
    monkeypatch.setattr(config, "ANSWER_CONTEXT", "lines")
    as_lines = qa.answer_question(QUESTION, facts)
    assert as_lines.reads_lines and [s.text for s in as_lines.sources] == [h.text for h in as_lines.evidence[: config.ANSWER_LINES]]
