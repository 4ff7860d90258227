"""What of the ranked pages the model reads: real PDFs, real store, real embedder (no LLM)."""

from __future__ import annotations

import config
import context
import ingest
from conftest import write_text_pdf
from retriever import Retriever

FILLER = (
    "The company operates stores across the region and reports its results every quarter. "
    "Management discussed the outlook, the store openings planned for the year and the new loyalty programme. "
)


def _retriever(store, embedder, pdf):
    collection = ingest.ingest_pdf(pdf, store, embedder).collection
    return Retriever(store, embedder), collection


def test_the_model_reads_the_sentence_with_the_answer_even_outside_the_best_chunk(store, embedder, tmp_path):
    long_page = (FILLER * 6 + "Wages and benefits were 11.4% of net sales, down from 11.9% a year earlier. " + FILLER * 6)
    pdf = write_text_pdf(tmp_path / "release.pdf", [long_page, "Contact: investor relations, 12 Harbour Road."])
    retriever, collection = _retriever(store, embedder, pdf)
    hits = retriever.search("What share of net sales were wages and benefits?", scope=[collection])
    chosen = context.choose_context("What share of net sales were wages and benefits?", retriever.load_pages(hits))
    first = chosen[0]
    assert first.page == 1 and "11.4% of net sales" in first.text
    assert len(first.text) < len(long_page)  # a long page is read in parts, not whole
    assert sum(len(h.text) for h in chosen) <= config.CONTEXT_CHARS + len(context.GAP) * 10
    assert long_page.find("Wages") >= first.start - 1 and first.end <= len(long_page) + 1  # offsets still index the page


def test_a_short_page_is_read_whole(store, embedder, tmp_path):
    pdf = write_text_pdf(tmp_path / "memo.pdf", ["Staff notice. The staff door code is 4711. Please keep it private."])
    retriever, collection = _retriever(store, embedder, pdf)
    hits = retriever.search("What is the staff door code?", scope=[collection])
    [chosen] = context.choose_context("What is the staff door code?", retriever.load_pages(hits))
    assert chosen.text == "Staff notice. The staff door code is 4711. Please keep it private."


def test_a_table_row_comes_with_its_header_row(store, embedder, tmp_path):
    rows = "\n".join(f"| {name} | {a:,}.0 | {b:,}.0 |" for name, a, b in [
        ("Net sales", 3226, 2729), ("Cost of sales", 2011, 1702), ("Gross profit", 1215, 1027),
        ("Selling expenses", 610, 540), ("Operating income", 412, 318), ("Interest expense", 19, 23),
        ("Income taxes", 97, 72), ("Net income", 296, 223)])
    table = "| | 2023 | 2022 |\n" + rows
    page = FILLER * 8 + "\nConsolidated statement of income (in millions)\n" + table + "\n" + FILLER * 4
    pdf = write_text_pdf(tmp_path / "income.pdf", [page])
    retriever, collection = _retriever(store, embedder, pdf)
    question = "What was operating income in 2023?"
    [chosen] = context.choose_context(question, retriever.load_pages(retriever.search(question, scope=[collection])))
    assert "| Operating income | 412.0 | 318.0 |" in chosen.text
    assert "| | 2023 | 2022 |" in chosen.text
