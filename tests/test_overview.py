"""Questions about a whole document (overview.py): recognised without a model, answered section by
section from the document's outline, every section with its pages."""

from __future__ import annotations

import re

import pymupdf
import pytest

import qa
from conftest import write_text_pdf
from overview import whole_document_request
from retriever import Retriever

SECTIONS = [  # (title, pages of text): a four-section report with a PDF outline
    ("Introduction", ["Introduction\nThis report describes the water supply of the town of Elmsbridge and why it was rebuilt."]),
    ("Reservoir Survey", ["Reservoir Survey\nThe survey measured the reservoir at 4.2 million cubic metres in 2023.",
                          "The survey divers found silt covering a third of the reservoir floor."]),
    ("Pipe Replacement", ["Pipe Replacement\nCrews replaced 18 kilometres of cast iron pipe with polyethylene pipe.",
                          "Leaks fell from 31 to 6 per month after the pipe replacement.",
                          "The pipe work cost 2.4 million euros, paid by a regional grant."]),
    ("Conclusions", ["Conclusions\nThe town council will repeat the reservoir survey every five years."]),
]


def test_rule_a_request_for_a_summary_is_a_whole_document_question():
    for question in ("Summarise this document.", "Can you give me a summary?", "What is this report about?",
                     "What are the key takeaways?", "Fasse das Dokument zusammen.", "Résume ce document."):
        assert whole_document_request(question) == "summary", question


def test_rule_a_request_for_the_sections_is_an_outline_question():
    for question in ("List the sections of the report.", "What are its chapters?", "Show the table of contents.",
                     "Wie ist das Inhaltsverzeichnis?"):
        assert whole_document_request(question) == "outline", question


def test_rule_a_comparison_of_two_documents_is_recognised():
    assert whole_document_request("Compare the 2022 and 2023 reports.") == "compare"
    assert whole_document_request("What changed between the two filings?") == "compare"


def test_a_question_about_one_fact_is_not_a_whole_document_question():
    for question in ("What was the revenue in 2022?", "How long is the pipe?", "Who wrote the section on leaks?"):
        assert whole_document_request(question) is None, question


@pytest.fixture
def report_pdf(tmp_path):
    path = write_text_pdf(tmp_path / "elmsbridge.pdf", [text for _, pages in SECTIONS for text in pages])
    doc = pymupdf.open(path)
    toc, page = [], 1
    for title, pages in SECTIONS:
        toc.append([1, title, page])
        page += len(pages)
    doc.set_toc(toc)
    doc.saveIncr()
    doc.close()
    return path


@pytest.fixture
def report_retriever(store, embedder, report_pdf):
    import ingest

    ingest.ingest_pdf(report_pdf, store, embedder)
    return Retriever(store, embedder)


def test_a_summary_lists_every_section_with_its_pages(report_retriever, llm):
    answer = qa.answer_question("Summarise this document.", report_retriever, llm=llm)
    for title, pages in [("Introduction", "p. 1"), ("Reservoir Survey", "pp. 2–3"), ("Pipe Replacement", "pp. 4–6"), ("Conclusions", "p. 7")]:
        assert re.search(rf"{title} \({pages}\)", answer.text), (title, answer.text)
    assert [h.page for h in answer.sources] == [1, 2, 4, 7]  # each line's marker opens its section's first page
    assert {c.page for c in answer.citations} == {1, 2, 4, 7}
    assert "4 sections (from its table of contents)" in answer.text
    assert "still being labelled (0 of 7 done)" in answer.text  # no labels yet: said, and the outline still used
    assert answer.model  # the model wrote what each section covers


def test_an_outline_question_needs_no_model_and_cites_each_section(report_retriever):
    answer = qa.answer_question("What are the sections of this report?", report_retriever, llm=object())  # never called
    lines = [line for line in answer.text.splitlines() if re.match(r"\d+\. ", line)]
    assert lines == ["1. Introduction (p. 1) [1]", "2. Reservoir Survey (pp. 2–3) [2]",
                     "3. Pipe Replacement (pp. 4–6) [3]", "4. Conclusions (p. 7) [4]"]
    assert answer.model is None


def test_with_several_documents_in_scope_the_person_is_asked_which(report_retriever, store, embedder, tmp_path):
    import ingest

    ingest.ingest_pdf(write_text_pdf(tmp_path / "other.pdf", ["A note on bus timetables in Elmsbridge."]), store, embedder)
    report_retriever.refresh()
    answer = qa.answer_question("Summarise the document.", report_retriever, llm=object())
    assert answer.text.startswith("Which document should I summarise?")
    assert "elmsbridge.pdf (7 pages)" in answer.text and "other.pdf (1 page)" in answer.text
