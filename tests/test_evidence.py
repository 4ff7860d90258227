"""The lines that answer: reading a page into lines (no models), and ranking them on real PDFs in a real store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pymupdf

import evidence
import extract
import finance
import ingest
import rules
from conftest import bench_file, release_pdf, write_text_pdf
from pages import page_lines, row_label, unit_above
from question import parse_question
from retriever import Retriever

ROWS = [
    ("Net sales", (51_877, 48_412, 44_101)),
    ("Cost of sales", (38_901, 36_144, 33_012)),
    ("Gross profit", (12_976, 12_268, 11_089)),
    ("Selling, general and administrative expenses", (7_412, 7_002, 6_553)),
    ("Research and development", (1_207, 1_144, 1_032)),
    ("Operating income", (4_357, 4_122, 3_504)),
    ("Interest expense", (318, 287, 301)),
    ("Income before income taxes", (4_039, 3_835, 3_203)),
    ("Provision for income taxes", (912, 851, 705)),
    ("Net income", (3_127, 2_984, 2_498)),
]


def statement_pdf(path: Path) -> Path:
    """A 10-K-style income statement: each cell placed on its own, so the text layer has one cell per line."""
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((50, 60), "CONSOLIDATED STATEMENTS OF OPERATIONS", fontsize=12)
    page.insert_text((50, 78), "(in millions)", fontsize=9)
    for x, year in zip((330, 410, 490), ("2023", "2022", "2021")):
        page.insert_text((x, 100), year, fontsize=10)
    for row, (label, figures) in enumerate(ROWS):
        y = 122 + row * 18
        page.insert_text((50, y), label, fontsize=10)
        for x, figure in zip((330, 410, 490), figures):
            page.insert_text((x, y), f"{figure:,}", fontsize=10)
    doc.new_page().insert_textbox(pymupdf.Rect(50, 50, 545, 800), "Notes to the financial statements. " * 20, fontsize=11)
    doc.save(path)
    return path


def test_a_statement_row_is_read_with_its_label_and_column_years():
    text = "Cash Flows\n2018\n2017\n \nPurchases of PP&E\n \n(1,577) \n \n(1,373) \nOther — net\n$\n9 \n$\n(6) \n"
    rows = [line for line in page_lines(text) if line.kind == "row"]
    assert [r.text for r in rows] == [
        "Cash Flows · Purchases of PP&E · 2018: (1,577) · 2017: (1,373)",
        "Cash Flows · Other — net · 2018: 9 · 2017: (6)",
    ]
    assert text[rows[0].start : rows[0].end].startswith("Purchases of PP&E") and text[rows[0].start : rows[0].end].endswith("(1,373)")


def test_a_row_is_read_without_its_leader_dots():
    text = "November 27,\n2015\n2014\nTotal current liabilities..........................\n2,213,556\n2,494,435\n"
    [row] = [line for line in page_lines(text) if line.kind == "row"]
    assert row.label == "Total current liabilities"
    assert row.text.endswith("Total current liabilities · 2015: 2,213,556 · 2014: 2,494,435")
    assert row_label("Net sales . . . . . .") == "Net sales" and row_label("U.S. sales") == "U.S. sales"


def test_a_unit_is_read_whole_from_the_bracket_that_opens_it():
    page = "Cash Flows\n(Dollars in millions)\n2022\n2021\nCapital expenditures\n(23,087)\n(20,286)\n"
    assert unit_above(page, page.index("Capital")) == "(Dollars in millions)"  # not "rs in millions)" ("Rs." is a currency)
    assert unit_above("(U.S. dollars\nin thousands)\nA\n1", 30) == "in thousands)"  # a bracket on another line opens another phrase
    assert unit_above("Statement of income (in millions)\nNet sales\n5", 40) == "(in millions)"
    assert unit_above("Revenue: Rs. in lakhs\nSales\n5", 25) == "Rs. in lakhs"
    assert unit_above("We have 5 millions of users\nSales\n5", 30) == ""


def test_wrapped_prose_is_one_sentence_and_bullets_are_items():
    text = ("Share Repurchases\nDuring the fourth quarter of fiscal 2022, the Company repurchased\n722,457 shares of its "
            "common stock at a cost of $328.1 million. The program\ncontinues.\n• Stores opened: 12\n• Stores closed: 3\n")
    lines = page_lines(text)
    assert [(line.kind, line.text) for line in lines] == [
        ("heading", "Share Repurchases"),
        ("sentence", "During the fourth quarter of fiscal 2022, the Company repurchased 722,457 shares of its common stock at a cost of $328.1 million."),
        ("sentence", "The program continues."),
        ("item", "• Stores opened: 12"),
        ("item", "• Stores closed: 3"),
    ]


def test_a_markdown_row_is_read_under_its_header_row():
    text = "Income\n| | 2023 | 2022 |\n| Net income | 296 | 223 |\n"
    assert [line.text for line in page_lines(text) if line.kind == "row"][-1] == "Income · Net income · 2023: 296 · 2022: 223"


def test_the_row_a_question_names_is_the_top_line_with_its_year_heads(store, embedder, tmp_path):
    collection = ingest.ingest_pdf(statement_pdf(tmp_path / "10k.pdf"), store, embedder).collection
    retriever = Retriever(store, embedder)
    question = "What was the operating income in 2022?"
    lines = evidence.best_lines(question, retriever.load_pages(retriever.search(question, scope=[collection])), retriever)
    top = lines[0]
    assert top.page == 1 and top.collection == collection
    assert "Operating income" in top.text and "2022: 4,122" in top.text and "2023: 4,357" in top.text
    assert evidence.span_text(top, retriever).startswith("Operating income")  # the span highlights the row itself
    assert len(lines) == 3


def test_the_sentence_that_answers_is_found_on_a_long_page(store, embedder, tmp_path):
    filler = ("The company operates stores across the region and reports its results every quarter. "
              "Management discussed the outlook and the store openings planned for the year. ") * 5
    answer = "During the fourth quarter of fiscal 2022, the Company repurchased 722,457 shares of its common stock at a cost of $328.1 million."
    pdf = write_text_pdf(tmp_path / "release.pdf", [filler, filler + answer + " " + filler, "Contact: investor relations."])
    collection = ingest.ingest_pdf(pdf, store, embedder).collection
    retriever = Retriever(store, embedder)
    question = "How many shares did the company buy back in the fourth quarter?"
    lines = evidence.best_lines(question, retriever.load_pages(retriever.search(question, scope=[collection])), retriever)
    assert lines[0].text == answer and lines[0].page == 2


def test_each_page_shows_half_the_lines_still_to_show():
    assert evidence.page_quotas(3, 5) == [2, 1]
    assert evidence.page_quotas(10, 5) == [5, 3, 1, 1]
    assert evidence.page_quotas(10, 2) == [5, 3]  # no more pages than were found


def test_a_word_on_most_of_a_documents_pages_is_no_keyword_for_its_lines(store, embedder, tmp_path):
    pages = [f"Acme Corporation annual report, part {n}. Acme sells tools in many countries." for n in range(4)]
    pages[2] += " Research spending was 4.2 million."
    collection = ingest.ingest_pdf(write_text_pdf(tmp_path / "acme.pdf", pages), store, embedder).collection
    retriever = Retriever(store, embedder)
    lines = ["Acme Corporation annual report, part 2.", "Research spending was 4.2 million.",
             "The stores opened in spring.", "Sales rose in every region.", "The board met four times."]
    scores, _ = retriever.line_scores("How much did Acme spend on research?", lines, [collection] * len(lines))
    assert scores[0] == 0 and scores[1] > 0  # "Acme" is on every page: only "research" tells the lines apart


def test_a_measure_shows_the_rows_it_is_computed_from(store, embedder, tmp_path):
    """"Operating margin" shares no word with "Net sales", yet it is operating income over net sales: those two rows
    are its evidence, not "Gross profit" or "Selling, general and administrative expenses"."""
    collection = ingest.ingest_pdf(statement_pdf(tmp_path / "10k.pdf"), store, embedder).collection
    retriever = Retriever(store, embedder)
    question = "Has the company's operating margin improved in 2023?"
    lines = evidence.best_lines(question, retriever.load_pages(retriever.search(question, scope=[collection])), retriever)
    on_the_statement = [line.text.split(" · ")[1] for line in lines if line.page == 1]
    assert sorted(on_the_statement) == ["Net sales", "Operating income"]
    lines = page_lines("Revenues\n2023\n2022\nNet sales\n51,877\n48,412\nGross profit\n12,976\n12,268\nNet sales rose.")
    assert [line.kind for line in lines] == ["heading", "row", "row", "sentence"]
    assert finance.measure_rows(parse_question(question), lines).tolist() == [False, True, False, False]  # a row, not a sentence naming it
    assert not finance.measure_rows(parse_question("Who chairs the board?"), lines).any()


def press_release_pdf(path: Path) -> Path:
    """A 9-page earnings release: a quoted CEO sentence on page 1 repeating the company's name and year, the
    figures on pages 2 and 3, the name and year in every page's running head."""
    ceo = ('"We delivered a record year for Acme in fiscal 2022, and Acme enters fiscal 2023 stronger than ever," said '
           'Jane Doe, Chief Executive Officer of Acme Corporation. "Fiscal 2022 was a year to remember for Acme," she added.')
    pages = [f"Acme Corporation Reports Record Fiscal 2022 Results. SAN JOSE, Calif., December 15, 2022. {ceo} "
             "Acme will host a conference call to discuss its fiscal 2022 results.",
             "Acme Corporation fiscal 2022 results. Revenue for fiscal 2022 was $2.41 billion, up 12 percent. Gross margin was 61 percent.",
             "Acme Corporation fiscal 2022 results. Total assets were $5.8 billion at year end. "
             "Operating cash flow for fiscal 2022 was $412 million. Capital expenditures were $96 million. "
             "The board declared a quarterly dividend of $0.12 per share."]
    pages += [f"Acme Corporation fiscal 2022 results. Forward-looking statements, part {n}: this release speaks of the future, "
              "which involves risks and uncertainties." for n in range(4, 10)]
    return write_text_pdf(path, pages)


def test_a_line_repeating_the_documents_subject_does_not_crowd_out_the_line_that_answers(store, embedder, tmp_path):
    """The CEO's sentences name the company and the year the question names: that tells which document, not
    what it asks. Even when the search puts page 1 first (as on a real release), the figure on page 3 leads."""
    collection = ingest.ingest_pdf(press_release_pdf(tmp_path / "release.pdf"), store, embedder).collection
    retriever = Retriever(store, embedder)
    question = "What was Acme's operating cash flow in fiscal 2022?"
    pages = retriever.load_pages(retriever.search(question, scope=[collection]))
    pages.sort(key=lambda page: page.hit.page != 1)  # the first page first, the others in search order
    lines = evidence.best_lines(question, pages, retriever)
    assert lines[0].text == "Operating cash flow for fiscal 2022 was $412 million." and lines[0].page == 3
    assert sum(line.page == 1 for line in lines) <= 1  # before: the two quoted sentences, above the figure


def test_a_page_of_table_rows_keeps_its_place_though_no_line_holds_a_word_asked():
    """A statement's rows often share no word with the question ("capital expenditure" against "Purchases of
    property"): only a prose page that holds no word asked shows after the others."""
    line_pages, asked_on = [1, 1, 2, 2, 3], np.array([False, False, False, False, True])
    assert evidence.page_order(line_pages, asked_on, tabled={1}) == [1, 3, 2]
    assert evidence.page_order(line_pages, asked_on, tabled=set()) == [3, 1, 2]


def test_rule_a_line_that_can_give_the_kind_of_answer_asked_ranks_above_one_that_cannot(store, embedder, tmp_path):
    """A sentence restating what is asked (its words, no figure) leads both rankings; the line with the count asked
    for leads once the kind of answer counts."""
    pdf = write_text_pdf(tmp_path / "buyback.pdf", [
        "Acme will repurchase shares in the fourth quarter under the program the board approved. "
        "Buybacks came to 722,457 shares. The board met in Denver. Dividends are paid each quarter.",
        "Acme makes garden tools in two plants.", "Acme sells through hardware stores."])
    collection = ingest.ingest_pdf(pdf, store, embedder).collection
    retriever = Retriever(store, embedder)
    question = "How many shares did Acme repurchase in the fourth quarter?"
    first = lambda: evidence.best_lines(question, retriever.load_pages(retriever.search(question, scope=[collection])), retriever)[0].text  # noqa: E731
    assert first() == "Buybacks came to 722,457 shares."
    with rules.off(["kind_asked_first"]):
        assert first().startswith("Acme will repurchase shares")
    assert evidence.gives_kind_asked("quantity", "Revenue was $2.41 billion in 2022.")
    assert not evidence.gives_kind_asked("quantity", "Acme had a record fiscal 2022.")
    assert evidence.gives_kind_asked("date", "The plant opened in March.") and not evidence.gives_kind_asked("", "It rose 5%.")


def test_rule_a_line_that_only_names_the_company_takes_no_place_from_the_line_that_answers(store, embedder, tmp_path):
    """The release names its company on its first page (not on most pages): the question's "Harbor Lane Outfitters'"
    says whose figure, and the lines that only repeat the name ("Harbor Lane Outfitters, Inc.") answer nothing."""
    collection = ingest.ingest_pdf(release_pdf(tmp_path / "q4_release.pdf"), store, embedder).collection
    retriever = Retriever(store, embedder)
    question = "What were Harbor Lane Outfitters' total current assets at the end of 2019?"
    lines = lambda: [line.text for line in  # noqa: E731
                     evidence.best_lines(question, retriever.load_pages(retriever.search(question, scope=[collection])), retriever)]
    assert " · Total current assets · 2019: 16,525" in lines()[0]
    assert "Harbor Lane Outfitters, Inc." not in lines()
    assert retriever.own_names_asked(collection, question) == {"harbor", "lane", "outfitters", "^hlo"}
    with rules.off(["own_name_tells_no_line"]):
        assert "Harbor Lane Outfitters, Inc." in lines()  # the name takes a place from a line of the balance sheet


def test_rule_a_short_line_carried_on_in_lower_case_is_prose_not_a_heading():
    """A page printed in narrow columns wraps every sentence into short lines; read as headings, the sentence that
    answers ("covers approximately 538 square miles") never became an evidence line."""
    column = ("Geography\nThe county lies on the plains. Hamilton County\ncovers approximately 538 square miles and\n"
              "elevations range from 1,660 feet above sea\nlevel in the east.\nCounty Seat\nAurora is the seat.")
    lines = page_lines(column)
    assert [(line.kind, line.text) for line in lines] == [
        ("heading", "Geography"),
        ("sentence", "The county lies on the plains."),
        ("sentence", "Hamilton County covers approximately 538 square miles and elevations range from 1,660 feet above sea "
                     "level in the east."),
        ("heading", "County Seat"),
        ("sentence", "Aurora is the seat.")]
    with rules.off({"wrapped_line_carries_on"}):
        assert "covers approximately 538 square miles and" in [line.text for line in page_lines(column) if line.kind == "heading"]


def test_rule_a_sentence_ended_above_a_page_number_is_prose_not_a_row():
    """The last line of a paragraph stands above a section's number ("6") or the page's: read as a label and its
    figure, the sentence lost its first half and became a row. A label above its figures stays a row."""
    text = ("Users can select between the three QA models. Our demo system will be open-\nsourced under the Apache-2.0 license.\n6\n"
            "Conclusion\nThe system works.\nTotal current assets\n16,525\n15,134")
    assert [(line.kind, line.text) for line in page_lines(text)] == [
        ("sentence", "Users can select between the three QA models."),
        ("sentence", "Our demo system will be open- sourced under the Apache-2.0 license."),
        ("heading", "Conclusion"),
        ("sentence", "The system works."),
        ("row", "Conclusion · Total current assets · 16,525 · 15,134")]  # the heading above a row names its table
    assert page_lines("cash flows from operations.\n25")[0].kind == "sentence"  # carried on from the page before, in lower case
    with rules.off({"sentence_end_no_row"}):
        assert ("row", "sourced under the Apache-2.0 license. · 6") in [(line.kind, line.text) for line in page_lines(text)]
    paper = extract.open_pdf(bench_file("mmlongbench", "pdfs", "2310.07609v1.pdf"))  # the QACheck paper, page 6
    read = [line for line in page_lines(extract.read_page(paper[5]).text) if "Apache-2.0" in line.text]
    assert [(line.kind, line.text) for line in read] == [("sentence", "Our demo system will be open- sourced under the Apache-2.0 license.")]


def test_a_real_paper_asked_as_a_person_asks_shows_the_whole_sentence_not_half_of_it(store, embedder, tmp_path):
    """The QACheck paper's page 6 (a real two-column PDF), asked as a person asks: the licence sentence is shown whole
    among the lines; read as a row above the section number "6", it was cut in two and no line shown named the licence."""
    real, chosen = pymupdf.open(bench_file("mmlongbench", "pdfs", "2310.07609v1.pdf")), pymupdf.open()
    chosen.insert_pdf(real, from_page=5, to_page=5)
    chosen.save(tmp_path / "2310.07609v1.pdf")
    collection = ingest.ingest_pdf(tmp_path / "2310.07609v1.pdf", store, embedder).collection
    retriever = Retriever(store, embedder)
    question = parse_question("Under which license will the QACheck demo system be open-sourced?")
    lines = lambda: [line.text for line in  # noqa: E731
                     evidence.best_lines(question, retriever.load_pages(retriever.search(question, scope=[collection])), retriever)]
    assert "Our demo system will be open- sourced under the Apache-2.0 license." in lines()
    with rules.off({"sentence_end_no_row"}):
        assert not any("Apache-2.0" in line for line in lines())  # half a sentence, and a row no line shows


def test_rule_a_run_of_short_lines_is_read_as_one_line():
    """A cover page prints a name on one line and its role on the next: each alone is a heading, which states
    nothing; read together they say who the governor is. A table's title above its rows stays the rows' heading."""
    cover = page_lines("Strategic Plan\n2016-2018\nRick Scott\nGOVERNOR\n\nProduced by:\nDepartment of Health\n"
                       "The plan is reviewed every year.\nCash Flows\n(In millions)\n2018\n2017\nCapex\n(1,577)\n(1,373)")
    read = evidence.readable_lines(cover)
    assert [(line.kind, line.text) for line in read] == [
        ("block", "Strategic Plan · 2016-2018 · Rick Scott · GOVERNOR · Produced by: · Department of Health"),
        ("sentence", "The plan is reviewed every year."),
        ("row", "Cash Flows (In millions) · Capex · 2018: (1,577) · 2017: (1,373)")]
    assert all(line.kind != "heading" for line in evidence.readable_lines(cover))
    with rules.off({"short_lines_read_as_one"}):
        assert [line.kind for line in evidence.readable_lines(cover)] == ["sentence", "sentence", "row"]  # "Produced by:" alone
    contents = page_lines("\n".join(f"Chapter {i} of the guide" for i in range(1, 41)))  # 40 short lines, 880 characters
    blocks = evidence.readable_lines(contents)
    assert len(blocks) == 3 and all(line.kind == "block" and len(line.text) <= 400 for line in blocks)
    assert blocks[0].text.startswith("Chapter 1 of the guide · Chapter 2") and blocks[-1].text.endswith("Chapter 40 of the guide")


def test_real_report_pages_in_columns_and_a_real_cover_page_give_the_lines_that_answer():
    """On real bench PDFs (a two-column county survey, a health department's cover page) read by the real
    extractor: the county's size is a sentence, not three headings, and the governor's name is a line with its role."""
    survey = extract.open_pdf(bench_file("mmlongbench", "pdfs", "698bba535087fa9a7f9009e172a7f763.pdf"))
    size = [line for line in evidence.readable_lines(page_lines(extract.read_page(survey[10]).text)) if "538 square miles" in line.text]
    assert [line.kind for line in size] == ["sentence"] and "Hamilton County covers approximately 538 square miles" in size[0].text
    with rules.off({"wrapped_line_carries_on"}):
        assert not any("538 square miles" in line.text for line in evidence.readable_lines(page_lines(extract.read_page(survey[10]).text)))
    plan = extract.open_pdf(bench_file("mmlongbench", "pdfs", "e79deb02a0c0e87511080836c5d4347b.pdf"))
    cover = evidence.readable_lines(page_lines(extract.read_page(plan[0]).text))
    assert any("Rick Scott · GOVERNOR" in line.text for line in cover if line.kind == "block")
    with rules.off({"short_lines_read_as_one"}):
        assert not any("Rick Scott" in line.text for line in evidence.readable_lines(page_lines(extract.read_page(plan[0]).text)))


def test_the_real_general_mills_filing_asked_by_its_name_shows_the_line_that_answers_first(store, embedder, tmp_path):
    """Four real pages of GENERALMILLS_2020_10K.pdf (cover, employees, a page writing "general and administrative",
    the auditor's consent that repeats "General Mills, Inc."), asked as a person asks. The file name makes "General
    Mills" the document's own name, though "general" is printed in lower case inside it (file_name_no_keyword)."""
    filing = pymupdf.open(bench_file("financebench", "pdfs", "GENERALMILLS_2020_10K.pdf"))
    pages = pymupdf.open()
    for page in (1, 6, 56, 123):
        pages.insert_pdf(filing, from_page=page - 1, to_page=page - 1)
    pages.save(tmp_path / "GENERALMILLS_2020_10K.pdf")
    collection = ingest.ingest_pdf(tmp_path / "GENERALMILLS_2020_10K.pdf", store, embedder).collection
    question = "Approximately how many employees did General Mills have at the end of fiscal 2020?"

    def first_line() -> str:
        retriever = Retriever(store, embedder)
        return evidence.best_lines(question, retriever.load_pages(retriever.search(question, scope=[collection])), retriever)[0].text

    assert first_line().startswith("EMPLOYEES As of May 31, 2020, we had approximately 35,000 full- and part-time employees.")
    with rules.off({"file_name_no_keyword", "best_line_leads"}):
        assert "35,000" not in first_line()  # the cover page, which names the company, leads
    with rules.off({"file_name_no_keyword"}):
        assert "35,000" in first_line()  # the best line leads wherever its page stands


def test_rule_the_best_line_leads_unless_a_hint_led_to_the_page(store, embedder, tmp_path):
    """Two real pages of CVSHEALTH_2018_10K.pdf (the business overview, the store counts), asked as a person asks:
    the search ranks the overview first by its words, and its lines took two of the three places and the first;
    the sentence that answers, on the second page, now leads. A page a domain's hint led the search to (a
    statement the question names) keeps its lead: there the page is surer than any line's words."""
    real, chosen = pymupdf.open(bench_file("financebench", "pdfs", "CVSHEALTH_2018_10K.pdf")), pymupdf.open()
    for page in (3, 8):
        chosen.insert_pdf(real, from_page=page - 1, to_page=page - 1)
    chosen.save(tmp_path / "CVSHEALTH_2018_10K.pdf")
    collection = ingest.ingest_pdf(tmp_path / "CVSHEALTH_2018_10K.pdf", store, embedder).collection
    retriever = Retriever(store, embedder)
    question = parse_question("How many new retail locations did CVS Health open in 2018?")
    pages = retriever.load_pages(retriever.search(question, scope=[collection]))
    assert pages[0].hit.page == 1 and not evidence.led_by_more_than_words(pages[0])  # found by its words alone
    lines = lambda: [line.text for line in evidence.best_lines(question, pages, retriever)]  # noqa: E731
    assert lines()[0].startswith("During 2018 , the Company opened 145 new retail locations")
    with rules.off({"best_line_leads"}):
        assert not lines()[0].startswith("During 2018")
    hinted = replace(pages[0], hit=replace(pages[0].hit, trace={**pages[0].hit.trace, "hint_rank": 1}))
    assert evidence.led_by_more_than_words(hinted)
    assert [line.page for line in evidence.best_lines(question, [hinted, *pages[1:]], retriever)][0] == 1
    assert evidence.best_line_leading([4, 7, 2], [2, 9, 4, 7], 3) == [2, 4, 7]
    assert evidence.best_line_leading([4, 7, 2], [9, 2, 4, 7], 3) == [9, 4, 7]
