"""outline.py: a document's sections with page ranges, from its outline, its headings or its page labels.

Every PDF here is made by the test with PyMuPDF; one test reads a real manual from the shared bench."""

from __future__ import annotations

from pathlib import Path

import pymupdf

import outline
from conftest import bench_file, write_text_pdf
from outline import Section, document_outline, heading_outline, label_outline, page_range, pdf_outline

BODY = ("The committee met in the spring and read every report that had been sent in during the year. "
        "It kept the ones that answered the questions it had asked and set the others aside for later. ") * 6


def blank_pdf(path: Path, pages: int, toc: list[list] | None = None) -> Path:
    doc = pymupdf.open()
    for number in range(1, pages + 1):
        page = doc.new_page()
        page.insert_textbox(pymupdf.Rect(72, 100, 520, 700), f"Page {number}. " + BODY, fontsize=11)
    if toc:
        doc.set_toc(toc)
    doc.save(path)
    doc.close()
    return path


def headings_pdf(path: Path, headings: dict[int, str], pages: int = 8, title: str | None = None,
                 low: dict[int, str] | None = None) -> Path:
    """Pages of 11-pt body text; ``headings`` {page: text} in 18 pt at the top of those pages, ``title``
    in 26 pt above the first page's heading, ``low`` {page: text} 18-pt lines in the page's bottom half."""
    doc = pymupdf.open()
    for number in range(1, pages + 1):
        page = doc.new_page()  # A4-ish 595 x 842
        y = 72
        if title and number == 1:
            page.insert_text((72, y), title, fontsize=26)
            y += 50
        if number in headings:
            page.insert_text((72, y), headings[number], fontsize=18)
            y += 30
        page.insert_textbox(pymupdf.Rect(72, y, 520, 560), BODY, fontsize=11)
        if low and number in low:
            page.insert_text((72, 650), low[number], fontsize=18)
            page.insert_textbox(pymupdf.Rect(72, 665, 520, 800), BODY[:300], fontsize=11)
    doc.save(path)
    doc.close()
    return path


def spans(sections: list[Section]) -> list[tuple[str, int, int]]:
    return [(s.title, s.start, s.end) for s in sections]


# -----------------------------------------------------------------------------
# The PDF's own outline


def test_pdf_outline_gives_top_level_sections_with_page_ranges(tmp_path):
    path = blank_pdf(tmp_path / "toc.pdf", 10, [[1, "Intro", 1], [1, "  Methods \n and   data ", 3], [2, "Sampling", 4],
                                                 [1, "Results", 6], [1, "Discussion", 6], [1, "Appendix", 9]])
    with pymupdf.open(path) as pdf:
        sections = pdf_outline(pdf)
    # Sub-entries are not sections; a section whose successor starts on its own page is that page alone.
    assert spans(sections) == [("Intro", 1, 2), ("Methods and data", 3, 5), ("Results", 6, 6),
                               ("Discussion", 6, 8), ("Appendix", 9, 10)]
    assert {(s.level, s.source) for s in sections} == {(1, "toc")}
    assert [page_range(s) for s in sections] == ["pp. 1\u20132", "pp. 3\u20135", "p. 6", "pp. 6\u20138", "pp. 9\u201310"]


def test_pdf_outline_skips_entries_without_a_page_and_duplicates_and_sorts(tmp_path):
    path = blank_pdf(tmp_path / "toc.pdf", 6)
    with pymupdf.open(path) as pdf:
        # set_toc keeps page order honest, so the rows a messy PDF can hold are given as get_toc would return them
        pdf.get_toc = lambda simple=True: [[1, "Later", 5], [1, "Nowhere", -1], [1, "Start", 1], [1, "Start", 1],
                                           [1, "Zero", 0], [1, "Past the end", 40]]
        assert spans(pdf_outline(pdf)) == [("Start", 1, 4), ("Later", 5, 6)]


def test_a_single_level_one_entry_is_the_title_and_its_level_two_entries_are_the_sections(tmp_path):
    path = blank_pdf(tmp_path / "book.pdf", 9, [[1, "The Whole Book", 1], [2, "Chapter one", 2], [3, "A part", 3],
                                                [2, "Chapter two", 5], [2, "Chapter three", 8]])
    with pymupdf.open(path) as pdf:
        sections = pdf_outline(pdf)
    assert spans(sections) == [("Chapter one", 2, 4), ("Chapter two", 5, 7), ("Chapter three", 8, 9)]
    assert {s.level for s in sections} == {2}


def test_no_outline_is_no_sections(tmp_path):
    with pymupdf.open(blank_pdf(tmp_path / "plain.pdf", 3)) as pdf:
        assert pdf_outline(pdf) == []


# -----------------------------------------------------------------------------
# Headings from the layout


def test_large_font_headings_make_the_sections_and_the_title_page_line_does_not(tmp_path):
    path = headings_pdf(tmp_path / "report.pdf", {1: "Introduction", 3: "Methods", 6: "Results"},
                        title="A Study of Harbour Towns", low={7: "A heading low on the page"})
    with pymupdf.open(path) as pdf:
        sections = heading_outline(pdf)
    # 26 pt appears only on page 1 (the title); 18 pt on pages 1, 3, 6 (and low on 7, which does not count).
    assert spans(sections) == [("Introduction", 1, 2), ("Methods", 3, 5), ("Results", 6, 8)]
    assert {s.source for s in sections} == {"headings"}


def test_a_heading_set_on_two_lines_is_one_title_and_one_section_per_page(tmp_path):
    doc = pymupdf.open()
    for number in range(1, 6):
        page = doc.new_page()
        if number in (1, 4):
            page.insert_text((72, 72), "Chapter", fontsize=18)
            page.insert_text((72, 94), "One" if number == 1 else "Two", fontsize=18)
            page.insert_text((72, 200), "Another heading", fontsize=18)  # a second one on the page: no new section
        page.insert_textbox(pymupdf.Rect(72, 220, 520, 700), BODY, fontsize=11)
    doc.save(tmp_path / "two-lines.pdf")
    with pymupdf.open(tmp_path / "two-lines.pdf") as pdf:
        assert spans(heading_outline(pdf)) == [("Chapter One", 1, 3), ("Chapter Two", 4, 5)]


def test_headings_are_no_map_when_too_few_or_only_numbers(tmp_path):
    one = headings_pdf(tmp_path / "one.pdf", {2: "Only heading"})
    numbers = headings_pdf(tmp_path / "numbers.pdf", {1: "12", 3: "3.1", 5: "IV."})
    with pymupdf.open(one) as a, pymupdf.open(numbers) as b:
        assert heading_outline(a) == []
        assert heading_outline(b) == []


# -----------------------------------------------------------------------------
# The app's page labels


def test_label_outline_groups_pages_and_titles_them_by_their_first_label():
    titles = {page: f"Label {page}" for page in range(1, 31) if page not in (1, 2, 3, 4, 5, 6, 7)}
    sections = label_outline(titles, 30)
    assert len(sections) == 12
    assert sections[0].start == 1 and sections[-1].end == 30
    assert all(b.start == a.end + 1 for a, b in zip(sections, sections[1:]))  # no gap, no overlap
    assert {s.end - s.start + 1 for s in sections} == {2, 3}  # about equal lengths
    assert [s.title for s in sections[:4]] == ["Pages 1\u20132", "Pages 3\u20135", "Pages 6\u20137", "Label 8"]
    assert {s.source for s in sections} == {"labels"}


def test_label_outline_without_labels_is_page_groups_and_a_short_document_one_page_each():
    sections = label_outline({}, 24)
    assert [s.title for s in sections[:2]] == ["Pages 1\u20132", "Pages 3\u20134"]
    assert len(sections) == 12 and {s.source for s in sections} == {"pages"}
    short = label_outline({2: "  The   budget "}, 3)
    assert spans(short) == [("Page 1", 1, 1), ("The budget", 2, 2), ("Page 3", 3, 3)]
    assert label_outline({}, 0) == []


def test_page_range():
    assert page_range(Section("A", 4, 4)) == "p. 4"
    assert page_range(Section("A", 4, 9)) == "pp. 4\u20139"


# -----------------------------------------------------------------------------
# The map, from the best source there is


def test_document_outline_falls_back_from_outline_to_headings_to_labels(tmp_path):
    labels = {1: "The first page", 2: "The second page"}
    toc = blank_pdf(tmp_path / "toc.pdf", 6, [[1, "Intro", 1], [1, "Body", 3]])
    assert [(s.title, s.source) for s in document_outline(toc, labels, 6)] == [("Intro", "toc"), ("Body", "toc")]

    # One outline entry is no map: the headings are used
    headed = headings_pdf(tmp_path / "headed.pdf", {1: "Introduction", 3: "Methods", 6: "Results"})
    with pymupdf.open(headed) as pdf:
        pdf.set_toc([[1, "Everything", 1]])
        pdf.save(tmp_path / "headed-one-entry.pdf")
    sections = document_outline(tmp_path / "headed-one-entry.pdf", labels, 8)
    assert [(s.title, s.source) for s in sections] == [("Introduction", "headings"), ("Methods", "headings"),
                                                        ("Results", "headings")]

    plain = write_text_pdf(tmp_path / "plain.pdf", ["Some text.", "More text."])
    not_pdf = tmp_path / "notes.pdf"
    not_pdf.write_text("not a PDF at all")
    for path in (plain, None, tmp_path / "missing.pdf", not_pdf):
        assert spans(document_outline(path, labels, 2)) == [("The first page", 1, 1), ("The second page", 2, 2)], path
        assert {s.source for s in document_outline(path, labels, 2)} == {"labels"}


def test_outline_module_loads_no_heavy_library():
    import subprocess
    import sys

    code = "import sys, outline; print([m for m in ('chromadb', 'torch', 'langchain_core', 'llama_cpp') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(outline.__file__).parent, capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr


def test_r_intro_outline_has_its_chapters():
    path = bench_file("misc", "en_R-intro.pdf")
    sections = document_outline(path, {}, 0)
    titles = [s.title for s in sections]
    assert any("Introduction and preliminaries" in t for t in titles)
    assert any("Writing your own functions" in t for t in titles)
    assert {s.source for s in sections} == {"toc"}
    assert all(s.start <= s.end for s in sections)
    assert [s.start for s in sections] == sorted(s.start for s in sections)
