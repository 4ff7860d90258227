"""The finance domain (finance.py): statements named or needed by a question; a financial measure read off a
statement's own lines (which line, which year column, what result); which lines head a statement."""

from __future__ import annotations

from pathlib import Path

import pymupdf

import checker
import finance
import rules
import ingest
import models
import qa
from finance import statements_headed, statements_measured, statements_named
from pages import page_lines
from question import parse_question
from retriever import Retriever

BALANCE_SHEET = "\n".join([
    "ACME, INC.", "CONSOLIDATED BALANCE SHEETS", "MAY 31,", "(In millions)", "2021", "2020", "ASSETS",
    "Current assets:", "Cash and equivalents", "$", "9,889 $", "8,348", "Accounts receivable, net", "4,463", "2,749",
    "Inventories", "6,854", "7,367", "Total current assets", "26,291", "20,556",
    "Current liabilities:", "Accounts payable", "2,836", "2,248", "Total current liabilities", "9,674", "8,284",
])
INCOME_STATEMENT = "\n".join([
    "ACME, INC.", "CONSOLIDATED STATEMENTS OF INCOME", "52 Weeks Ended", "52 Weeks Ended", "August 29,", "2021",
    "August 30,", "2020", "Revenues", "$", "44,538 $", "37,403", "Cost of sales", "24,576", "21,162",
    "Operating income", "(1,200)", "—", "Depreciation and amortization", "300", "250",
])
SUMMARY = "Highlights\nRevenues\n40\nup 19% on the year\nTotal current assets\n1"


def test_a_statement_page_is_read_as_labels_with_one_figure_per_year_column():
    items = dict(finance.line_items(BALANCE_SHEET))
    assert items["Total current assets"] == ["26,291", "20,556"] and items["Cash and equivalents"] == ["9,889", "8,348"]
    assert finance.year_columns(BALANCE_SHEET) == ["2021", "2020"]
    assert finance.year_columns(INCOME_STATEMENT) == ["2021", "2020"]  # a date line between the years
    assert dict(finance.line_items(INCOME_STATEMENT))["Operating income"] == ["(1,200)", "—"]


def test_a_measure_is_worked_out_from_the_year_asked_and_cites_the_pages_it_read():
    pages = [SUMMARY, INCOME_STATEMENT, BALANCE_SHEET]  # a summary page ranked first is not a statement
    text, cited = finance.work_out("What is the FY2021 inventory turnover? Round to two decimal places.", pages)
    assert cited == [1, 2]
    assert text.splitlines() == [
        "Cost of sales, 2021: 24,576 [1]",
        "Inventories, 2020: 7,367 [2]",
        "Inventories, 2021: 6,854 [2]",
        "Worked out: inventory turnover = 24,576 / ((6,854 + 7,367) / 2) = 3.46",
    ]
    current, _ = finance.work_out("What was the current ratio in fiscal 2020?", pages)
    assert current.endswith("current ratio = 20,556 / 8,284 = 2.48")
    loss, _ = finance.work_out("What was EBITDA in 2021?", pages)  # an operating loss is printed in brackets
    assert loss.endswith("EBITDA = (-1,200) + 300 = -900")
    nothing, _ = finance.work_out("What was EBITDA in 2020?", pages)  # "—" is zero
    assert nothing.endswith("EBITDA = 0 + 250 = 250")


def test_a_measure_with_a_line_the_pages_lack_is_left_to_the_model():
    pages = [INCOME_STATEMENT, BALANCE_SHEET]
    assert finance.work_out("What is the quick ratio for 2021?", pages) is None  # no short-term investments line
    assert finance.work_out("What is the current ratio for 2019?", pages) is None  # no 2019 column
    assert finance.work_out("What is the current ratio?", [SUMMARY]) is None
    assert finance.work_out("Who chairs the audit committee?", pages) is None
    assert finance.measure_asked("What is total debt to EBITDA ratio in FY2021?") is None
    assert finance.measure_asked("What is EBITDA to interest expense?") is None



def statement(heading: str, years: list[str], rows: list[tuple[str, ...]]) -> str:
    """A statement page as PyMuPDF's text layer reads it: heading, year columns, then each label and its cells."""
    return "\n".join([heading, "(In millions)", *years, *(part for row in rows for part in row)])


def test_a_ratio_the_question_spells_out_between_two_line_items_is_worked_out_in_percent_costs_by_their_size():
    income = statement("CONSOLIDATED STATEMENTS OF OPERATIONS", ["2022", "2021"], [
        ("Total revenues", "66,608", "62,286"), ("Cost of products", "(63,078)", "(59,237)"),
        ("Research and development expense, net", "(2,852)", "(2,249)"), ("Loss from operations", "(3,547)", "(2,902)")])
    text, cited = finance.work_out("What was R&D expense as a percentage of total revenue in FY2022? Round to two decimal places.", [income])
    assert cited == [0]
    assert text.splitlines() == [
        "Research and development expense, net, 2022: (2,852) [1]",
        "Total revenues, 2022: 66,608 [1]",
        "Worked out: R&D expense as a percentage of total revenue = 2,852 / 66,608 = 4.28%",
    ]
    # a cost is bracketed to show its direction: gross margin subtracts its size
    sales = statement("CONSOLIDATED INCOME STATEMENTS", ["2023", "2022"], [("Net sales", "14,694", "14,544"),
                                                                            ("Cost of sales", "(11,969)", "(11,724)")])
    assert finance.work_out("What was the FY2023 gross margin?", [sales])[0].endswith("= (14,694 - 11,969) / 14,694 = 18.54%")
    assert finance.measure_asked("What is the ratio of net income to total assets?")[1] == "net_income / total_assets"
    assert finance.measure_asked("What is net income to total assets?") is None  # "to" spells a ratio only after "ratio of"



def test_a_growth_rate_reads_the_column_of_the_year_before_whichever_way_the_columns_run():
    ascending = statement("CONSOLIDATED STATEMENTS OF OPERATIONS", ["2015", "2016", "2017"], [
        ("Total net sales", "107,006", "135,987", "177,866"), ("Operating income", "2,233", "4,186", "4,106")])
    text, _ = finance.work_out("What is the year-over-year change in revenue from FY2016 to FY2017, in percent?", [ascending])
    assert text.endswith("= (177,866 - 135,987) / 135,987 = 30.8%")
    assert finance.measure_asked("How did revenue change in FY2017?") is None  # neither a percent nor the year before asked


def test_columns_headed_by_dates_and_a_page_number_above_the_heading_are_read_as_the_text_layer_prints_them():
    dated = "\n".join(["Table of Contents", "Consolidated Statements of Earnings", "$ in millions", "Fiscal Years Ended",
                       "February 2, 2019", "February 3, 2018", "Revenue", "$", "42,879", "$", "42,151",
                       "Earnings\xa0before\xa0income\xa0tax\xa0expense", "1,888", "1,817", "Income\xa0tax\xa0expense", "424", "818"])
    assert finance.year_columns(dated) == ["2019", "2018"]
    assert finance.work_out("What was the FY2019 effective tax rate?", [dated])[0].endswith("= 424 / 1,888 = 22.46%")
    numbered = "\n".join(["48", "Consolidated Statements of Earnings", "(In Millions)", "Fiscal Year", "2020", "2019",
                          "Net sales", "$", "17,626.6", "$", "16,865.2", "Operating profit", "2,953.9", "2,515.9"])
    assert finance.year_columns(numbered) == ["2020", "2019"]  # "48" is the page's number, not a cell
    assert finance.work_out("What is the FY2020 operating margin?", [numbered])[0].endswith("= 2,953.9 / 17,626.6 = 16.76%")

def test_a_measure_asked_over_several_years_or_asked_whether_it_moved_is_left_to_the_model():
    income = statement("CONSOLIDATED STATEMENTS OF INCOME", ["2019", "2018", "2017"], [
        ("Net revenues", "6,489", "7,500", "7,017"), ("Cost of revenues", "(2,000)", "(2,500)", "(2,400)")])
    assert finance.work_out("What was the gross margin in FY2019?", [income]) is not None
    assert finance.work_out("Has the gross margin improved in FY2019?", [income]) is None
    assert finance.work_out("What is the FY2017 - FY2019 3 year average of gross margin?", [income]) is None
    assert finance.measure_asked("What is the FY2019 fixed asset turnover ratio?") is None  # not the asset turnover

def test_a_page_prints_a_statement_only_with_its_rows_of_figures_not_by_naming_it():
    contents = "Index to Financial Statements\nConsolidated Balance Sheets\n44\nConsolidated Statement of Cash Flows\n60"
    rows = "\n".join(f"{label}\n{a}\n{b}" for label, a, b in [
        ("Cash", "1,980", "1,101"), ("Receivables, net", "1,015", "1,049"), ("Merchandise inventories", "5,409", "5,209"),
        ("Other current assets", "466", "438"), ("Total current assets", "8,870", "9,829")])
    assert finance.statement_page(contents) == []
    assert finance.statement_page("Consolidated Balance Sheets\n$ in millions\nFebruary 2, 2019\nFebruary 3, 2018\n" + rows) == ["balance sheet"]


def test_a_statement_heading_is_a_line_of_its_own_not_a_sentence_that_names_it():
    assert statements_headed("Profit and loss account for the year ended March 31, 2003\nSales 1,200") == ["income statement"]
    assert statements_headed("CONSOLIDATED BALANCE SHEETS\n(in millions)") == ["balance sheet"]
    assert statements_headed("Deferred taxes are included in the\nConsolidated Balance Sheets.") == []
    assert statements_headed("CONSOLIDATED STATEMENTS OF COMPREHENSIVE INCOME") == ["statement of comprehensive income"]


def test_a_statement_heading_is_at_the_top_of_its_page_not_a_column_head_below_its_prose_or_figures():
    # the heading after a page number and the company's name heads the page
    assert statements_headed("Table of Contents\n62\nACME INC.\nCONSOLIDATED STATEMENTS OF INCOME\n2016\n2015") == ["income statement"]
    # a note's sentence, then a table whose column head names a statement: the page is a note, not the statement
    note = ("NOTES TO CONSOLIDATED FINANCIAL STATEMENTS (Continued)\n"
            "Stock-based compensation costs included in our statements for fiscal 2016 were as follows:\n"
            "Income Statement Classifications\nCost of revenue\n1,474\n1,449")
    assert statements_headed(note) == []
    # a table of leases: rows of figures come first, the column head "Balance Sheet Location" later
    leases = "Leases\nOperating lease assets\n2,500\n2,600\nFinance lease assets\n90\n80\nBalance Sheet Location\nOther assets"
    assert statements_headed(leases) == []
    assert finance.statement_page(leases + "\n" + "\n".join(f"Row {i}\n{i},000\n{i},100" for i in range(6))) == []


def test_statement_names_are_read_however_they_are_written():
    assert statements_named("the Consolidated Statements of Cash Flows and the balance sheet") == ["cash flow statement", "balance sheet"]
    assert statements_named("statement of operations") == ["income statement"]


def test_rule_a_financial_measure_is_computed_not_read():
    assert finance.asks_calculation("What is Nike's inventory turnover?")
    assert finance.asks_calculation("What was the FY2021 current ratio?")  # a textbook formula's measure
    assert finance.asks_calculation("What is total debt to total assets?")  # one line item over another
    assert not finance.asks_calculation("What is total debt?")  # a line item: printed, read off its row


def test_rule_a_measures_evidence_is_the_rows_it_is_computed_from():
    lines = page_lines("Revenues\n2023\n2022\nNet sales\n51,877\n48,412\nGross profit\n12,976\n12,268\n"
                       "Operating income\n4,357\n4,122\nOperating income rose.")
    # operating margin is operating income over net sales: those rows, though the question names no "sales"
    assert finance.measure_rows(parse_question("What was the operating margin in 2023?"), lines).tolist() == [False, True, False, True, False]
    assert not finance.measure_rows(parse_question("Who chairs the board?"), lines).any()


def test_a_financial_measure_names_the_statements_it_is_computed_from():
    assert statements_measured("What is Nike's current ratio?") == ["balance sheet"]
    assert statements_measured("What is  cash_ratio in FY2021?") == ["balance sheet"]  # spacing and underscores aside
    assert statements_measured("what is the FY2021 inventory turnover ratio?") == ["income statement", "balance sheet"]
    assert statements_measured("What was EBITDA?") == ["income statement", "cash flow statement"]
    assert statements_measured("How many stores opened?") == []
    parsed = parse_question("What was free cash flow in 2021? Please state answer in USD millions.")
    assert parsed.hints == ["cash flow statement"]
    # other comprehensive income is a statement of its own, not the income statement ratios use
    assert statements_named("Consolidated Statements of Comprehensive Income") == ["statement of comprehensive income"]


def test_a_question_s_years_are_written_as_the_document_writes_its_fiscal_years():
    assert finance.year_wordings("capex in FY2019 and 2020", "fiscal") == "capex in fiscal 2019 and fiscal 2020"
    assert finance.year_wordings("capex in fiscal 2019", "plain") == "capex in 2019"


def test_how_a_document_writes_its_years_needs_three_uses():
    assert finance.year_style("In FY2021, FY2020 and FY2019 sales rose") == "fy" and finance.year_style("In 2021 sales rose") == "plain"


def test_one_line_item_asked_alone_is_read_off_its_statement_row_with_the_unit():
    pages = [SUMMARY, INCOME_STATEMENT, BALANCE_SHEET]
    text, cited = finance.item_from_statements("What is the FY2020 total amount of inventories for ACME?", pages, "ACME_2021_10K.pdf")
    assert (text, cited) == ("Inventories, 2020: 7,367 (In millions) [1].", [2])
    latest, _ = finance.item_from_statements("What were ACME's total current assets?", pages, "ACME_2021_10K.pdf")
    assert latest.startswith("Total current assets, 2021: 26,291")  # no year named: the latest column


def test_a_question_about_a_line_item_that_asks_more_than_its_value_is_left_to_the_model():
    asked = lambda question: finance.item_asked(question, "ACME_2021_10K.pdf")  # noqa: E731
    assert asked("What is the FY2018 capital expenditure amount for ACME?") == "capex"
    assert asked("What was ACME's revenue in the Asia segment in 2021?") is None  # "Asia", "segment": not the total
    assert asked("Which of ACME's segments had the highest net income in 2021?") is None
    assert asked("How did ACME's revenue change from 2020 to 2021?") is None  # a change, two years
    assert asked("Why did ACME's net income fall in 2021?") is None
    assert asked("What is ACME's revenue as a % of total assets?") is None  # a ratio: measure_asked's
    assert asked("Is ACME's inventory too high?") is None


def test_a_note_in_brackets_after_a_label_names_the_same_line_item():
    page = BALANCE_SHEET.replace("Inventories", "Inventories (Note 4)")
    assert finance.find_figure("inventories", False, [page], "2021").printed == "6,854"
    cash_flows = "\n".join(["CONSOLIDATED STATEMENTS OF CASH FLOWS", "(Millions)", "2018", "2017",
                            "Purchases of property, plant and equipment (PP&E)", "(1,577)", "(1,373)"])
    assert finance.find_figure("capex", False, [cash_flows], "2018").printed == "(1,577)"


def test_a_statement_label_is_read_without_its_leader_dots():
    page = BALANCE_SHEET.replace("Total current liabilities", "Total current liabilities......................")
    assert dict(finance.line_items(page))["Total current liabilities"] == ["9,674", "8,284"]


def statements_pdf(path: Path) -> Path:
    """A 10-K's income statement and cash flow statement, one cell per text line, leader dots after the labels."""
    doc = pymupdf.open()
    for title, rows in (("CONSOLIDATED STATEMENTS OF OPERATIONS", [("Net sales", "51,877", "48,412"),
                                                                    ("Operating income", "4,357", "4,122")]),
                        ("CONSOLIDATED STATEMENTS OF CASH FLOWS", [("Net cash provided by operating activities", "6,439", "5,878"),
                                                                   ("Purchases of property, plant and equipment (PP&E)", "(1,577)", "(1,373)")])):
        page = doc.new_page()
        page.insert_text((50, 60), title, fontsize=12)
        page.insert_text((50, 78), "(in millions)", fontsize=9)
        for x, year in zip((380, 460), ("2023", "2022")):
            page.insert_text((x, 100), year, fontsize=10)
        for row, (label, *figures) in enumerate(rows):
            page.insert_text((50, 122 + row * 18), label + " " + "." * 12, fontsize=10)
            for x, figure in zip((380, 460), figures):
                page.insert_text((x, 122 + row * 18), figure, fontsize=10)
    doc.save(path)
    return path


def test_a_line_item_asked_alone_is_answered_from_its_row_without_the_model_and_a_shown_cell_by_its_line(
        store, embedder, ollama_chat, tmp_path):
    collection = ingest.ingest_pdf(statements_pdf(tmp_path / "ACME_2023_10K.pdf"), store, embedder).collection
    retriever = Retriever(store, embedder)
    llm = models.get_chat_model()

    capex = qa.answer_question("What is the FY2023 capital expenditure amount for ACME?", retriever, llm=llm, scope=[collection])
    assert capex.text == "Purchases of property, plant and equipment (PP&E), 2023: (1,577) (in millions) [1]."
    assert ollama_chat.chats == [] and capex.model is None  # read off the cash flow statement, no model call
    assert [c.verified for c in capex.citations] == [True]
    # the cited page, as the PDF's text layer prints its table (one cell per line): the other year's figure backs nothing
    question = "What is the FY2023 capital expenditure amount for ACME?"
    [other_year] = checker.verify_answer("Purchases of property, plant and equipment were (1,373) in 2023 [1].", capex.sources, question)
    assert other_year.supported is False

    # the row the question names is among the lines shown: the cell is read and cited by its line, not the page
    sales = qa.answer_question("What were ACME's net sales in 2022?", retriever, llm=llm, scope=[collection])
    assert sales.text.startswith("Net sales, 2022: 48,412") and sales.text.endswith("[L1].")
    assert ollama_chat.chats == []


def test_rule_a_measure_joined_to_another_quantity_is_only_a_part_of_what_is_asked():
    assert finance.measure_asked("What was 3M's EBITDA in FY2022?")[0] == "EBITDA"
    assert finance.measure_asked("What is the gross margin percentage in FY2020?")[0] == "gross margin"  # its own name
    for question in ("What is EBITDA less capex for FY2022?", "What is the FY2015 unadjusted EBITDA % margin for Netflix?",
                     "What was the EBITDA margin in 2022?", "What is free cash flow per share in 2021?", "What is total debt to EBITDA?"):
        assert finance.measure_asked(question) is None, question
    with rules.off(["measure_only_a_part"]):
        assert finance.measure_asked("What is EBITDA less capex for FY2022?")[0] == "EBITDA"
