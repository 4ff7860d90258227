"""Reading a table's cell in code (cells.py): the row and the column a question names, any table."""

from __future__ import annotations

from pathlib import Path

import pymupdf

import cells
import evidence
import ingest
import models
import qa
from question import parse_question
from records import Hit
from conftest import release_pdf
from retriever import Retriever

CURRENT = Hit("1", "c", "ACME_2019_10K.pdf", 5, 0, 9, "Balance Sheets · Total current assets · 2019: 16,525 · 2018: 15,134 · (In millions)",
              trace={"kind": "row", "label": "Total current assets"})
TOTAL = Hit("2", "c", "ACME_2019_10K.pdf", 5, 0, 9, "Balance Sheets · Total assets · 2019: 45,400 · 2018: 40,830 · (In millions)",
            trace={"kind": "row", "label": "Total assets"})


def test_a_row_line_reads_as_its_label_cells_and_unit():
    assert cells.row_parts(CURRENT) == ("Balance Sheets", "Total current assets", [("2019", "16,525"), ("2018", "15,134")], "(In millions)")


def test_the_cell_named_by_row_and_column_is_read_with_its_row_cited():
    cell = cells.named_cell("What were ACME's total current assets in FY2018?", [TOTAL, CURRENT])
    assert cell is not None
    assert (cell.label, cell.column, cell.value, cell.number) == ("Total current assets", "2018", "15,134", 2)
    assert cells.cell_answer(cell) == "Total current assets, 2018: 15,134 (In millions) [L2]."
    # the row naming more of the question wins over one whose label it also holds
    assert cells.named_cell("What were total assets in 2019?", [TOTAL, CURRENT]).value == "45,400"


def test_rule_a_question_naming_no_column_two_columns_or_more_than_a_lookup_gets_no_cell():
    for question in ("What were total current assets?",  # no column
                     "How did total current assets change from 2018 to 2019?",  # two columns, and a change
                     "Did total current assets exceed 16,000 in 2019?",  # a yes or no
                     "What were total current assets of the Asia segment in 2019?"):  # a word no cell accounts for
        assert cells.named_cell(question, [TOTAL, CURRENT]) is None, question


def test_rule_words_that_ask_for_a_value_name_no_other_thing():
    cell = cells.named_cell("What was the amount of total current assets reported at the end of 2019?", [TOTAL, CURRENT])
    assert cell is not None and cell.value == "16,525"  # "amount", "reported", "end" ask for the value: no other thing


def test_rule_a_word_no_cell_accounts_for_asks_something_else():
    assert cells.named_cell("What were ACME's total current assets in 2019?", [TOTAL, CURRENT]) is not None  # "ACME": its document
    assert cells.named_cell("What were total current assets of the Asia segment in 2019?", [TOTAL, CURRENT]) is None


def test_a_column_is_named_by_its_year_or_by_all_its_words():
    assert cells.names_column("December 31, 2019", set(), {"2019"})
    assert not cells.names_column("2018", {"europe"}, {"2019"})
    assert cells.names_column("Europe", {"europe", "sales"}, set())


RELEASE = "q4_2019_release.pdf"  # a file name that does not name the company: its first pages do
HARBOR = {"c": {"harbor", "lane", "outfitters"}}  # the names the release gives itself (routing's profile)
RELEASE_ROWS = [Hit(str(i), "c", RELEASE, 5, 0, 9, f"Condensed Consolidated Balance Sheets · {label} · 2019: {a} · 2018: {b} · (In thousands)",
                    trace={"kind": "row", "label": label})
                for i, (label, a, b) in enumerate([("Total current assets", "16,525", "15,134"), ("Total assets", "45,400", "40,830"),
                                                   ("Cash and cash equivalents", "3,138", "2,249")])]
PHRASINGS = [  # (question, the cell's value): names, dates, units, word order
    ("What were total current assets in 2019?", "16,525"),
    ("What were Harbor Lane Outfitters' total current assets in 2019?", "16,525"),
    ("What were Harbor Lane's total current assets at the end of 2019?", "16,525"),
    ("How much cash and cash equivalents did Harbor Lane have at the end of 2018?", "2,249"),
    ("Total current assets as of 2019?", "16,525"),
    ("What was the total current assets figure for fiscal 2019?", "16,525"),
    ("Harbor Lane Outfitters total current assets FY19", "16,525"),
    ("What were total current assets for the year ended 2019?", "16,525"),
    ("What were total current assets in the 2019 fiscal year, in thousands?", "16,525"),
    ("How much were total current assets in 2019 in millions of dollars?", "16,525"),
    ("In 2019, what were the total current assets?", "16,525"),
    ("What did Harbor Lane report as total current assets for 2019?", "16,525"),
    ("What was cash at the end of 2018?", "2,249"),
    ("How much cash did Harbor Lane Outfitters hold as of 2018?", "2,249"),
    ("What were total assets at year-end 2019?", "45,400"),
    ("Give me the total current assets of Harbor Lane Outfitters for FY2019.", "16,525"),
    ("What is the value of Harbor Lane's total current assets for 2019 (in thousands of dollars)?", "16,525"),
    ("What were the company's total current assets at December 31, 2019?", "16,525"),
    ("Total current assets, 2018?", "15,134"),
    ("What amount of cash and cash equivalents was reported in 2019?", "3,138"),
    ("USD thousands: Harbor Lane Outfitters' cash and cash equivalents, December 2018?", "2,249"),
]
NOT_A_CELL = [
    "How did total current assets change from 2018 to 2019?",  # a change
    "What were total current assets in 2019 and 2018?",  # two columns
    "What was inventory in 2019?",  # a row not printed
    "What were Acme Corp's total current assets in 2019?",  # another company's name
    "What were Harbor Lane's total current assets in 2019 for the Asia segment?",  # a word no cell accounts for
]


def test_a_cell_is_read_however_the_question_puts_it_and_not_when_it_asks_another():
    for question, value in PHRASINGS:
        cell = cells.named_cell(question, RELEASE_ROWS, HARBOR)
        assert cell is not None and cell.value == value, question
    for question in NOT_A_CELL:
        assert cells.named_cell(question, RELEASE_ROWS, HARBOR) is None, question


def test_rule_a_unit_or_a_kind_of_period_says_the_answers_form_not_which_cell():
    assert cells.named_cell("What were total current assets in fiscal 2019, in millions of dollars?", RELEASE_ROWS).value == "16,525"
    assert cells.named_cell("What were total current assets of the fiscal plan in 2019?", RELEASE_ROWS) is None  # "plan": not a form


def test_rule_a_name_the_document_gives_itself_says_whose_figure_not_which_cell():
    assert cells.named_cell("What were Harbor Lane Outfitters' total current assets in 2019?", RELEASE_ROWS, HARBOR).value == "16,525"
    # the same name, not given by this document: another company's figure is asked
    assert cells.named_cell("What were Harbor Lane Outfitters' total current assets in 2019?", RELEASE_ROWS) is None
    assert cells.document_names({"outfitters", "lane"}) == {"outfitter", "lane"}


def test_rule_a_date_names_the_column_of_its_year_and_month():
    dated = [Hit("d", "c", RELEASE, 5, 0, 9, "Balance Sheets · Cash · December 31, 2019: 7 · June 30, 2019: 5", trace={"kind": "row", "label": "Cash"})]
    assert cells.named_cell("What was cash at December 31, 2019?", dated).value == "7"
    assert cells.named_cell("What was cash as of June 30, 2019?", dated).value == "5"
    assert cells.named_cell("What was cash in 2019?", dated) is None  # two columns of that year
    asked = cells.read_asked(parse_question("What was cash at Dec. 31, 2019?"))
    assert asked.months == {"dec"} and asked.words == {"cash", "2019"} and asked.years == {"2019"}  # the day and month name no cell


def test_rule_a_row_named_by_some_of_its_words_only_when_no_other_row_holds_them():
    assert cells.named_cell("What was cash at the end of 2018?", RELEASE_ROWS).value == "2,249"
    # another row of the pages read holds "cash" too: which one is meant is not ours to guess
    assert cells.named_cell("What was cash at the end of 2018?", RELEASE_ROWS, row_labels=["Cash and cash equivalents", "Restricted cash"]) is None
    assert cells.named_cell("What were assets in 2019?", RELEASE_ROWS) is None  # two labels hold "assets"


def trail_table_pdf(path: Path) -> Path:
    """A table that is no company statement, one cell per line in the text layer, and a page of prose."""
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((50, 60), "Visitors by trail", fontsize=12)
    page.insert_text((50, 78), "(in thousands)", fontsize=9)
    for x, year in zip((330, 410), ("2023", "2022")):
        page.insert_text((x, 100), year, fontsize=10)
    for row, (label, figures) in enumerate([("Summit trail", ("14.1", "12.5")), ("Lake loop", ("28.7", "30.2")),
                                            ("Forest walk", ("9.8", "9.1"))]):
        for x, text in zip((50, 330, 410), (label, *figures)):
            page.insert_text((x, 122 + row * 18), text, fontsize=10)
    doc.new_page().insert_textbox(pymupdf.Rect(50, 50, 545, 800), "The park opened two new car parks. " * 20, fontsize=11)
    doc.save(path)
    return path


def test_a_named_cell_is_answered_in_code_and_a_question_naming_no_column_goes_to_the_model(
        store, embedder, ollama_chat, monkeypatch, tmp_path):
    collection = ingest.ingest_pdf(trail_table_pdf(tmp_path / "park.pdf"), store, embedder).collection
    retriever = Retriever(store, embedder)
    monkeypatch.setattr(ollama_chat, "replies", ["The Lake loop had 28.7 thousand visitors in 2023 [L1]."])

    answer = qa.answer_question("How many visitors did the Lake loop have in 2022?", retriever, llm=models.get_chat_model(), scope=[collection])
    assert answer.text == "Lake loop, 2022: 30.2 (in thousands) [L1]."
    assert ollama_chat.chats == [] and answer.model is None  # read in code: no model call
    [citation] = answer.citations
    assert citation.verified and answer.cited(citation).text.startswith("Visitors by trail (in thousands) · Lake loop")

    question = "How many visitors did the Lake loop have?"  # names the row, not the column
    lines = evidence.best_lines(question, retriever.load_pages(retriever.search(question, scope=[collection])), retriever)
    assert any("Lake loop" in line.text for line in lines) and cells.named_cell(question, lines) is None
    qa.answer_question(question, retriever, llm=models.get_chat_model(), scope=[collection])
    assert len(ollama_chat.chats) == 1  # the model phrases what the lines say


def test_a_cell_asked_with_the_companys_name_and_a_date_is_read_in_code_from_a_real_store(store, embedder, ollama_chat, monkeypatch, tmp_path):
    """The release's name is on its first page, not in its file name: the routing profile's names account for it."""
    collection = ingest.ingest_pdf(release_pdf(tmp_path / "q4_release.pdf"), store, embedder).collection
    retriever = Retriever(store, embedder)
    monkeypatch.setattr(ollama_chat, "replies", ["The documents do not say."] * 3)
    for question, value in (("What were Harbor Lane Outfitters' total current assets at the end of 2019?", "16,525"),
                            ("How much cash and cash equivalents did Harbor Lane have at December 31, 2018?", "2,249")):
        answer = qa.answer_question(question, retriever, llm=models.get_chat_model(), scope=[collection])
        assert value in answer.text and answer.model is None, (question, answer.text)  # read in code, no model call
        assert [c.verified for c in answer.citations] == [True]
    assert ollama_chat.chats == []
