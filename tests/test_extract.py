"""Page text that keeps the layout: tables as Markdown rows, two columns in reading order,
running headers kept out of what is embedded, and highlights that still land on the words.

One real PDF (made here with PyMuPDF) is ingested once into a real store with the real embedder.
"""

from __future__ import annotations

import json

import pymupdf
import pytest

import config
import extract
import ingest
import preview

HEADER = "Harbour Freight Ltd - Annual Report 2023"
YEARS = ("2023", "2022", "2021")
ROWS = [("Net sales", "3,226.8", "2,729.4", "2,415.0"), ("Operating income", "412.5", "377.9", "301.2"),
        ("Gross margin", "15.6%", "21.4%", "19.8%"), ("Employees", "1,204", "1,150", "1,032")]
LEFT = [f"Left column sentence {n} tells of the quay built in {1880 + n}." for n in range(1, 15)]
RIGHT = [f"Right column sentence {n} tells of the ferry run in {1920 + n}." for n in range(1, 15)]
X = (60, 260, 360, 460)  # left edges of the table's columns


def _table(page: pymupdf.Page, top: float, ruled: bool) -> None:
    """Years over three value columns, one labelled row per line; ``ruled`` draws the grid."""
    for i, year in enumerate(YEARS):
        page.insert_text((X[i + 1], top), year, fontsize=10)
    for r, row in enumerate(ROWS, 1):
        for x, cell in zip(X, row):
            page.insert_text((x, top + 20 * r), cell, fontsize=10)
    if ruled:
        for r in range(len(ROWS) + 2):
            page.draw_line((55, top - 14 + 20 * r), (540, top - 14 + 20 * r))
        for x in (55, *[x - 5 for x in X[1:]], 540):
            page.draw_line((x, top - 14), (x, top - 14 + 20 * (len(ROWS) + 1)))


def _write_report(path) -> None:
    doc = pymupdf.open()
    for number in range(1, 5):
        page = doc.new_page()  # A4: 595 x 842
        page.insert_text((60, 40), HEADER, fontsize=9)
        page.insert_text((290, 815), str(number), fontsize=9)
        if number == 1:
            page.insert_textbox(pymupdf.Rect(60, 80, 540, 140), "Results with a ruled table.", fontsize=11)
            _table(page, 170, ruled=True)
        elif number == 2:
            page.insert_textbox(pymupdf.Rect(60, 80, 540, 140), "Results with a table aligned by spaces only.", fontsize=11)
            _table(page, 170, ruled=False)
        elif number == 3:
            page.insert_textbox(pymupdf.Rect(60, 80, 285, 760), " ".join(LEFT), fontsize=11)
            page.insert_textbox(pymupdf.Rect(310, 80, 540, 760), " ".join(RIGHT), fontsize=11)
        else:
            page.insert_textbox(pymupdf.Rect(60, 80, 540, 760), "The harbour closed for winter on 3 December.", fontsize=11)
    doc.save(path)


@pytest.fixture(scope="module")
def report(tmp_path_factory, embedder):
    """(pdf path, chunks {page: [(text, metadata)]}) of the report ingested into a real store."""
    root = tmp_path_factory.mktemp("layout")
    path = root / "report.pdf"
    _write_report(path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(config, "CHROMA_PERSIST_DIR", str(root / "store"))
        mp.setattr(config, "EXTRACTOR", "layout")
        client = ingest.get_client(str(root / "store"))
        result = ingest.ingest_pdf(path, client, embedder)
        got = client.get_collection(result.collection).get(include=["documents", "metadatas"])
    chunks: dict[int, list] = {}
    for text, meta in zip(got["documents"], got["metadatas"]):
        chunks.setdefault(meta["page"], []).append((text, meta))
    return path, chunks


def _page_text(chunks) -> str:
    return "\n".join(text for text, _ in sorted(chunks, key=lambda c: c[1]["start"]))


def _lit_boxes(pdf, meta) -> list[pymupdf.Rect]:
    with pymupdf.open(pdf) as doc:
        return preview.passage_boxes(doc[meta["page"] - 1], meta["start"], meta["end"], meta.get("ocr_boxes"))


def _word_box(pdf, page_number: int, words: str) -> pymupdf.Rect:
    with pymupdf.open(pdf) as doc:
        return doc[page_number - 1].search_for(words)[0]


@pytest.mark.parametrize("page_number", [1, 2], ids=["ruled", "unruled"])
def test_a_table_becomes_markdown_rows_with_each_label_beside_its_values(report, page_number):
    pdf, chunks = report
    text = _page_text(chunks[page_number])
    lines = text.splitlines()
    assert "|  | 2023 | 2022 | 2021 |" in lines
    assert lines[lines.index("|  | 2023 | 2022 | 2021 |") + 1] == "|---|---|---|---|"
    for row in ROWS:
        assert "| " + " | ".join(row) + " |" in lines


@pytest.mark.parametrize("page_number", [1, 2], ids=["ruled", "unruled"])
def test_a_table_row_is_highlighted_where_it_is_on_the_page(report, page_number):
    pdf, chunks = report
    text, meta = next((t, m) for t, m in chunks[page_number] if "| Net sales |" in t)
    boxes = _lit_boxes(pdf, meta)
    for words in ("Net sales", "3,226.8", "2,415.0"):
        assert any(b.intersects(_word_box(pdf, page_number, words)) for b in boxes)
    assert not any(b.intersects(_word_box(pdf, page_number, HEADER)) for b in boxes)  # not embedded, not lit


def test_two_columns_are_read_column_by_column(report):
    pdf, chunks = report
    text = " ".join(_page_text(chunks[3]).split())
    positions = [text.index(s) for s in LEFT + RIGHT]
    assert positions == sorted(positions)


def test_a_passage_from_the_right_column_is_highlighted_in_the_right_column(report):
    pdf, chunks = report
    text, meta = next((t, m) for t, m in chunks[3] if "Left column" not in t)
    boxes = _lit_boxes(pdf, meta)
    assert boxes and all(b.x0 >= 300 for b in boxes)
    last = " ".join(text.split()).rstrip(".").split()[-1]  # a year: the last sentence in the chunk
    assert any(b.intersects(_word_box(pdf, 3, f"ferry run in {last}")) for b in boxes)


def test_running_header_and_page_numbers_stay_in_the_page_text_but_are_not_embedded(report):
    pdf, chunks = report
    embedded = " ".join(text for page in chunks.values() for text, _ in page)
    assert HEADER not in embedded
    assert "closed for winter" in embedded
    assert all(text.strip() != "4" for text, _ in chunks[4])
    with pymupdf.open(pdf) as doc:
        running = extract.running_lines(doc)
        page = extract.laid_out_page(doc[3], running)
    assert extract.running_key(HEADER) in running and "#" in running
    assert page.text.startswith(HEADER)  # kept for display, at its own offsets
    assert [page.text[s:e] for s, e in page.running] == [HEADER, "4"]


# -----------------------------------------------------------------------------
# Chunking (no PDF needed)


def test_chunk_page_worked_example():
    assert extract.chunk_page("A a. B b. C c.", size=9, overlap=4) == [(0, 9), (5, 14)]


def test_chunks_respect_size_keep_sentences_whole_and_overlap():
    text = " ".join(f"Sentence number {i} says something about topic {i}." for i in range(60))
    spans = extract.chunk_page(text, size=300, overlap=80)
    assert len(spans) > 5
    for start, end in spans:
        assert end - start <= 300
        assert text[end - 1] == "."  # ends on a sentence boundary
    for (_, prev_end), (next_start, _) in zip(spans, spans[1:]):
        assert next_start < prev_end  # consecutive chunks overlap
    assert spans[0][0] == 0 and spans[-1][1] == len(text)


def test_an_overlong_sentence_is_cut_at_spaces():
    text = "word " * 500
    spans = extract.chunk_page(text.strip(), size=200, overlap=0)
    assert all(e - s <= 200 for s, e in spans)
    assert "".join(text.strip()[s:e] + " " for s, e in spans).split() == text.split()


def test_a_full_stop_inside_a_row_does_not_end_a_chunk_unit():
    assert extract.chunk_units("Total. Up.\n| Inc. | 3.5 |") == [(0, 6), (7, 10), (11, 25)]
    assert extract.chunk_page("Intro.\n| Acme Inc. | 3.5 |", size=30, overlap=0) == [(0, 26)]


def test_a_chunk_starting_inside_a_table_gets_its_header_and_one_at_the_header_does_not():
    text = "| a | b |\n|---|---|\n| x | 1 |"
    assert extract.table_header_for(text, text.index("| x")) == "| a | b |\n|---|---|\n"
    assert extract.table_header_for(text, 0) == ""
    assert extract.table_header_for("Prose line.\n" + text, 0) == ""


def test_line_boxes_of_a_laid_out_page_cover_its_words(tmp_path):
    doc = pymupdf.open()
    page = doc.new_page()
    _table(page, 170, ruled=False)
    laid = extract.laid_out_page(page)
    assert len(laid.line_boxes) == 3 + 4 * len(ROWS)  # every cell
    for start, end, box in laid.line_boxes:
        assert any(pymupdf.Rect(box).intersects(r) for r in page.search_for(laid.text[start:end]))
    assert json.loads(json.dumps(laid.line_boxes))  # storable as chunk metadata


# -----------------------------------------------------------------------------
# Rendering for OCR


def test_huge_pages_are_rendered_small_enough_for_ocr():
    doc = pymupdf.open()
    assert extract.ocr_dpi(doc.new_page(width=400, height=300)) == config.OCR_MAX_DPI  # small: full resolution
    for width, height in ((595, 842), (2160, 2160)):  # A4, and a 30-inch square poster
        dpi = extract.ocr_dpi(doc.new_page(width=width, height=height))
        assert dpi < config.OCR_MAX_DPI and max(width, height) * dpi / 72 <= config.OCR_MAX_PIXELS
