"""The finance domain: everything the app knows about financial statements, in one place.

A 10-K or an annual report prints its figures on a few statement pages (balance sheet, income
statement, cash flow statement), each a list of line items with one figure per year column, and
analysts ask for textbook measures computed from them ("Nike's FY2021 inventory turnover"). The
generic answer path knows none of this: it reaches this module only through the hooks of
``domains.py``, and ``DOMAINS=`` (empty) switches all of it off.

    hook (domains.py)      here                       what it does
    page_marks             statement_page()           which statements a page prints (index time)
    pages_named            statements_named()         the statements a question or its instructions name
    pages_needed           statements_measured()      the statements a measure asked for is computed from
    line_ranking           measure_rows()             a measure's rows among the evidence lines
    answer_in_code         measure_from_statements()  a measure worked out from the statement lines, or one line
                                                      item asked alone read off its row (item_asked), no model
    prompt_notes           formulas_for()             a measure's textbook formula, told to the model
    asks_calculation       asks_calculation()         measure words that ask for arithmetic
    names_a_figure         names_a_figure()           a line item named: the question asks a figure
    document_types         DOC_TYPES                  10-K, 10-Q, financial statements (routing's profile)
    report_period          report_period()            the year a report's cover says it covers
    wordings, wording_of,  year_style(),              how a document writes its fiscal years ("FY2019",
    in_wording             year_wordings()            "fiscal 2019", "2019")

Reading a statement:

    page text  -> statement_page()  which statements the page prints: headed by one, with rows of figures
               -> line_items()      "Total current assets" -> [26291, 20556], one figure per year column
               -> year_columns()    the years the page's columns are headed with ("2021", "2020")
    question   -> measure_asked()   which measure and its expression over line items: a textbook one by
                                    its name ("current ratio"), else a ratio the question spells out
                                    between two items ("R&D as a % of revenue": ratio_spelled_out) or an
                                    item's growth in percent ("revenue growth year over year": growth_asked)
               -> measure_items()   the labels of those line items (the evidence lines show their rows)
               -> work_out()        each item found on a retrieved page, in the column of the year the
                                    question names (else the latest) and, for averages and growth, the
                                    year before; a cost by its size; a rate in percent. The answer lists
                                    every figure with its source, then the result. A question that asks
                                    more than one period's value (whether it improved, a 3-year average)
                                    is left to the model.

The 1.5B model finds the right statement pages and still picks the wrong lines to compute with (gross
profit for cost of sales, long-term debt for total debt), so for the textbook measures the app reads
the lines itself. Only what the page prints is used: a measure with a missing line, or pages without
year columns, returns None and the question goes to the model as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

import calc
import cells
import rules
from pages import row_label, unit_above
from question import ParsedQuestion, as_read
from text_utils import FIGURE_CELL, FY, MONTHS, YEAR, YEAR_TOKEN, YEAR_WORDED, is_period_cell, year_of_line, years_named

if TYPE_CHECKING:
    from pages import Page
    from records import Hit, Line

# -----------------------------------------------------------------------------
# Questions: the statements they name or need, the measures they ask for

# Canonical statement -> how filings head it (also matched in page text by the retriever).
STATEMENT_NAMES = {
    "cash flow statement": r"cash[\s-]+flows?\s+statements?|statements?\s+of\s+(?:consolidated\s+)?cash\s+flows?",
    "income statement": r"income\s+statements?|statements?\s+of\s+(?:consolidated\s+)?(?:operations|income|earnings)|profit\s+(?:and|or)\s+loss(?:\s+account)?",
    # Other comprehensive income is not what margins and turnovers are computed from: a statement of its own.
    "statement of comprehensive income": r"statements?\s+of\s+(?:consolidated\s+)?comprehensive\s+income",
    "balance sheet": r"balance\s+sheets?|statements?\s+of\s+(?:consolidated\s+)?financial\s+position",
    "statement of equity": r"statements?\s+of\s+(?:consolidated\s+)?(?:stockholders|shareholders)['’]?\s+equity",
}
_STATEMENTS = {name: re.compile(pattern, re.IGNORECASE) for name, pattern in STATEMENT_NAMES.items()}

# Financial measures -> the statements they are computed from (textbook definitions), so "Nike's
# current ratio in FY2021?" looks for the balance sheet although it never names one.
_BALANCE, _INCOME, _CASH = "balance sheet", "income statement", "cash flow statement"
MEASURE_STATEMENTS = {
    r"current ratio|quick ratio|acid[- ]test|cash ratio|working capital|debt[- ]to[- ](?:equity|assets|capital)|"
    r"debt ratio|book value|total (?:assets|liabilities)|(?:long[- ]term|short[- ]term) (?:debt|liabilities)|"
    r"accru(?:ed|al) liabilities|current (?:assets|liabilities)|shareholders['’]? equity|stockholders['’]? equity": [_BALANCE],
    r"(?:inventory|receiv\w*|payables?|asset) turnover|turnover ratio|days (?:sales|inventory|payables?)|"
    r"\bd[sip]o\b|cash conversion cycle|return on (?:assets|equity|invested capital)|\broa\b|\broe\b|\broic\b": [_INCOME, _BALANCE],
    r"gross (?:margin|profit)|operating (?:margin|income)|net (?:profit )?margin|\bebit\b|interest coverage|"
    r"earnings per share|\beps\b|effective tax rate": [_INCOME],
    r"\bebitda\b": [_INCOME, _CASH],
    r"free cash flow|capital expenditures?|\bcapex\b|operating cash flow|cash from operations|dividends paid|"
    r"depreciation and amortization|\bd&a\b": [_CASH],
    r"(?:dividend )?payout ratio": [_INCOME, _CASH],
}
_NEEDS = [(re.compile(pattern, re.IGNORECASE), statements) for pattern, statements in MEASURE_STATEMENTS.items()]

_TEST = "tests/test_finance.py::"
rules.register("named_statement", "a statement named beside the question is where its answer is printed",
               _TEST + "test_statement_names_are_read_however_they_are_written",
               pays_on='docs/experiments/2026-11-26-rules-audit.md: fresh_mm retrieval, the statement-hints step (statements named and measured) off: doc MRR 0.664 -> 0.627, library MRR 0.622 -> 0.594')


def statements_named(text: str) -> list[str]:
    """Rule: a statement named beside the question is where its answer is printed.
    statements_named("relying on the consolidated statements of cash flows") -> ["cash flow statement"]"""
    if not rules.on("named_statement"):
        return []
    return [name for name, pattern in _STATEMENTS.items() if pattern.search(text)]


rules.register("measure_statements", "a financial measure is computed from the statements of its textbook definition",
               _TEST + "test_a_financial_measure_names_the_statements_it_is_computed_from",
               pays_on='docs/experiments/2026-11-26-rules-audit.md: fresh_mm retrieval, the statement-hints step (statements named and measured) off: doc MRR 0.664 -> 0.627, library MRR 0.622 -> 0.594')


def statements_measured(text: str) -> list[str]:
    """Rule: a financial measure is computed from the statements of its textbook definition.
    The statements a financial measure named in ``text`` is computed from.

    statements_measured("What is the FY2021 inventory turnover ratio for Nike?") -> ["income statement", "balance sheet"]
    """
    if not rules.on("measure_statements"):
        return []
    text = re.sub(r"[\s_]+", " ", text)  # "cash_ratio", "payables  turnover"
    found = [name for pattern, names in _NEEDS if pattern.search(text) for name in names]
    if spelled := ratio_spelled_out(text) or growth_asked(text):  # "capex as a % of revenue": cash flows and income
        found += [ITEM_NAMES[name][1] for name in _ITEM_NAME.findall(spelled[1]) if name in ITEM_NAMES]
    return list(dict.fromkeys(found))


# Measure words that ask for arithmetic on figures, not for a figure the page prints; "total liabilities"
# alone is read off a statement.
_ASKS_CALCULATION = re.compile(
    r"\b(turnover|margin|cash conversion cycle|ebitda|return on (assets|equity|invested capital)|free cash flow|"
    # "total debt to total assets", "operating cash flow to current liabilities": one line item over another
    r"(debt|liabilities|assets|equity|cash flows?|income|sales|revenues?|earnings|ebitda) to (total |current |net )?"
    r"(debt|liabilities|assets|equity|capital|ebitda|sales|revenues?))\b",
    re.IGNORECASE,
)


def names_a_figure(question: str) -> bool:
    """Whether the question names a statement's line item, a figure ("What were total current assets in 2019?").
    names_a_figure("What were Nike's inventories in FY2019?") -> True; names_a_figure("Who chairs the board?") -> False"""
    return bool(items_named(question))


rules.register("measure_computed", "a financial measure is computed, not read",
               _TEST + "test_rule_a_financial_measure_is_computed_not_read",
               pays_on="docs/experiments/2026-11-28-rules-that-pay.md: no set measured shows it pays: switched off, neither "
                       "the evidence nor any answer read in code moves on fresh3, fresh4 (held out) or FinanceBench's 65 "
                       "stored questions; what it tells the model is not measured; its removal is left open there")


@rules.switch("measure_computed", stand_in=False)
def asks_calculation(question: str) -> bool:
    """Rule: a financial measure is computed, not read.
    asks_calculation("What is Nike's inventory turnover?") -> True; asks_calculation("What is total debt?") -> False"""
    return bool(_ASKS_CALCULATION.search(question) or formulas_for(question))


# Standard definitions of the measures analysts ask for. The model is told the formula with the question,
# so it knows which figures to fetch; "average" balances are this year's and last year's, halved.
FORMULAS = {
    r"current ratio": "current ratio = total current assets / total current liabilities",
    r"quick ratio|acid[- ]test": "quick ratio = (cash and cash equivalents + short-term investments + accounts receivable) "
    "/ total current liabilities",
    r"cash ratio": "cash ratio = cash and cash equivalents / total current liabilities",
    r"inventory turnover": "inventory turnover = cost of sales / ((inventories this year + inventories last year) / 2)",
    r"receiv\w* turnover": "receivables turnover = revenues / ((accounts receivable this year + last year) / 2)",
    r"payables? turnover": "payables turnover = cost of sales / ((accounts payable this year + last year) / 2)",
    r"asset turnover": "asset turnover = revenues / ((total assets this year + last year) / 2)",
    r"cash conversion cycle": "cash conversion cycle = 365 / inventory turnover + 365 / receivables turnover "
    "- 365 / payables turnover",
    r"gross (?:profit )?margin": "gross margin = (revenues - cost of sales) / revenues",
    r"operating margin": "operating margin = operating income / revenues",
    r"net (?:profit )?margin": "net margin = net income / revenues",
    r"return on equity|\broe\b": "return on equity = net income / ((shareholders' equity this year + last year) / 2)",
    r"return on assets|\broa\b": "return on assets = net income / ((total assets this year + last year) / 2)",
    r"debt[- ]to[- ]equity": "debt to equity = total debt / total shareholders' equity",
    r"\bebitda\b": "EBITDA = operating income + depreciation and amortization",
    r"free cash flow": "free cash flow = net cash from operating activities - capital expenditures",
    r"interest coverage": "interest coverage = operating income / interest expense",
}
_FORMULAS = [(re.compile(pattern, re.IGNORECASE), formula) for pattern, formula in FORMULAS.items()]


def formulas_for(question: str) -> list[str]:
    """formulas_for("What is Nike's cash_ratio?") -> ["cash ratio = cash and cash equivalents / total current liabilities"]"""
    text = re.sub(r"[\s_]+", " ", question)  # "cash_ratio", "payables  turnover"
    return [formula for pattern, formula in _FORMULAS if pattern.search(text)]


# -----------------------------------------------------------------------------
# Statements: reading their pages

# Line items by the labels filings print for them, preferred first (US 10-K wording; "merchandise" is a
# retailer's): a retailer's "Total revenue" includes membership fees that its "Net sales" leave out.
ITEMS = {
    "current_assets": ["total current assets"],
    "current_liabilities": ["total current liabilities"],
    "cash": ["cash and (?:cash )?equivalents"],
    "short_term_investments": ["short-term investments"],
    "receivables": ["(?:accounts )?receivables?, net", "accounts receivable"],
    "inventories": ["(?:merchandise )?inventories"],
    "payables": ["accounts payable"],
    "total_assets": ["total assets"],
    "revenues": ["total revenues?", "revenues?", "net sales", "total net (?:revenues?|sales)", "net revenues?"],
    "cost_of_sales": ["cost of (?:sales|goods sold|revenues?)", "merchandise costs"],
    "operating_income": ["operating income", "operating profit", "(?:earnings|income) from operations"],
    "net_income": ["net income", "net income including noncontrolling interests", "net earnings"],
    "depreciation": ["depreciation and amortization"],
    "interest_expense": ["interest expense(?:, net)?"],
    "income_tax": ["income tax expense", "provision for income taxes", "income taxes", "income tax provision"],
    "pretax_income": ["(?:income|earnings)(?: from continuing operations)? before (?:provision for )?income tax(?:es| expense)"],
    "capex": ["capital expenditures?", "(?:purchases|payments) (?:of|for) property,? (?:plant,? )?and equipment",
              "(?:additions to )?property,? plant and equipment(?: additions)?"],
    "operating_cash_flow": ["net cash (?:provided by|from|provided by \\(used in\\)) operating activities", "cash provided by operations"],
    "research_development": ["research and development(?: expenses?)?(?:, net)?", "research, development and related expenses"],
    "equity": ["total (?:stockholders|shareholders)['’]? equity", "total equity"],
}
# Items that are costs or outflows: a statement brackets them to show their direction, and a measure takes
# their size ("Interest expense (433)" is an interest expense of 433).
COST_ITEMS = frozenset({"cost_of_sales", "interest_expense", "capex", "research_development", "income_tax"})
# How a question names each item ("R&D", "capex", "sales") and the statement that prints it.
ITEM_NAMES = {
    "revenues": (r"(?:total |net )*(?:revenues?|sales)", _INCOME),
    "cost_of_sales": (r"cost of (?:sales|goods sold|revenues?)|\bcogs\b", _INCOME),
    "operating_income": (r"operating (?:income|profit)|income from operations", _INCOME),
    "net_income": (r"net (?:income|earnings|profit)", _INCOME),
    "interest_expense": (r"interest expenses?", _INCOME),
    "income_tax": (r"income tax(?:es| expense)|tax expense", _INCOME),
    "pretax_income": (r"pre-?tax (?:income|earnings)|(?:income|earnings) before (?:income )?tax(?:es)?", _INCOME),
    "research_development": (r"\br&d\b(?: expenses?)?|research and development(?: expenses?)?", _INCOME),
    "depreciation": (r"depreciation and amortization|\bd&a\b", _CASH),
    "capex": (r"capital expenditures?|\bcapex\b", _CASH),
    "operating_cash_flow": (r"(?:net )?cash (?:flows? )?(?:from|provided by) operat\w+(?: activities)?|operating cash flows?", _CASH),
    "total_assets": (r"total assets", _BALANCE),
    "inventories": (r"inventor(?:y|ies)", _BALANCE),
    "current_assets": (r"(?:total )?current assets", _BALANCE),
    "current_liabilities": (r"(?:total )?current liabilities", _BALANCE),
    "equity": (r"(?:total )?(?:stockholders|shareholders)['’]? equity", _BALANCE),
}
_ITEM_NAMES = [(name, re.compile(rf"\b(?:{pattern})(?![\w&])", re.IGNORECASE)) for name, (pattern, _) in ITEM_NAMES.items()]  # "noninterest expense" is no interest expense
# A note in brackets after a label names the same line item: "Net income (loss)", "Purchases of property, plant
# and equipment (PP&E)", "Capital expenditures (including capitalized software)".
_ITEMS = {name: [re.compile(rf"{label}(?:\s*\([^()]*\))?\W*", re.IGNORECASE) for label in labels] for name, labels in ITEMS.items()}

# The measures of FORMULAS that are plain arithmetic on line items; "@prior" is last year's column.
MEASURES = {
    r"current ratio": "current_assets / current_liabilities",
    r"quick ratio|acid[- ]test": "(cash + short_term_investments + receivables) / current_liabilities",
    r"cash ratio": "cash / current_liabilities",
    r"inventory turnover": "cost_of_sales / ((inventories + inventories@prior) / 2)",
    r"receiv\w* turnover": "revenues / ((receivables + receivables@prior) / 2)",
    r"payables? turnover": "cost_of_sales / ((payables + payables@prior) / 2)",
    r"(?<!fixed )asset turnover": "revenues / ((total_assets + total_assets@prior) / 2)",
    r"cash conversion cycle": "365 / (cost_of_sales / ((inventories + inventories@prior) / 2)) + 365 / (revenues / "
    "((receivables + receivables@prior) / 2)) - 365 / (cost_of_sales / ((payables + payables@prior) / 2))",
    r"gross (?:profit )?margin": "(revenues - cost_of_sales) / revenues",
    r"operating (?:profit )?margin": "operating_income / revenues",
    r"net (?:profit )?margin": "net_income / revenues",
    r"\bebitda\b": "operating_income + depreciation",
    r"interest coverage": "operating_income / interest_expense",
    r"effective (?:income )?tax rate": "income_tax / pretax_income",
    r"free cash flow": "operating_cash_flow - capex",
    r"return on (?:average )?(?:shareholders['’]? |stockholders['’]? )?equity|\broe\b": "net_income / ((equity + equity@prior) / 2)",
    r"return on (?:average )?(?:total )?assets|\broa\b": "net_income / ((total_assets + total_assets@prior) / 2)",
}
# Measures that are rates: shown as a percentage, as filings and analysts write them.
PERCENT_MEASURES = re.compile(r"margin|tax rate|return on|\bro[ae]\b", re.IGNORECASE)
_MEASURES = [(re.compile(pattern, re.IGNORECASE), expression) for pattern, expression in MEASURES.items()]
_ITEM_NAME = re.compile(r"[a-z_]+(?:@prior)?")  # an expression's item; "@prior": the year before


# A heading is a whole short line that does not end a sentence ("... included in the\nConsolidated Balance Sheets." is prose),
# perhaps with its period ("Profit and loss account for the year ended March 31, 2003").
_PERIOD = r"(?:\s+(?:for\s+the\s+(?:\w+\s+)?(?:years?|periods?|quarters?)\s+ended|as\s+(?:at|of|on))\b)?"
_STATEMENT_HEADING = {name: re.compile(rf"^\W*(?:consolidated\s+|combined\s+)?(?:{pattern})\b{_PERIOD}.{{0,40}}(?<!\.)$", re.IGNORECASE | re.MULTILINE)
                      for name, pattern in STATEMENT_NAMES.items()}


rules.register("statement_heading", "a statement's page is headed by its name on a line of its own, at the top of the page",
               _TEST + "test_a_statement_heading_is_at_the_top_of_its_page_not_a_column_head_below_its_prose_or_figures", forbids=True,
               pays_on='docs/experiments/2026-11-26-a-fresh-set-of-analyst-questions.md: second fresh set (held out), 5 won / 0 lost, filing hit@5 0.826 -> 0.870')


def statements_headed(page_text: str) -> list[str]:
    """Rule: a statement's page is headed by its name on a line of its own, at the top of the page.
    The financial statements a page is headed by: a short line that names one, in the page's head.

    statements_headed("CONSOLIDATED STATEMENTS OF CASH FLOWS\n(in millions)\n...") -> ["cash flow statement"]
    statements_headed("Note 4. Leases\nCosts were as follows:\n2022\n1,234\nBalance Sheet Location\n...") -> []
    """
    if not rules.on("statement_heading"):  # switched off: a page is headed by any statement it names
        return [name for name, pattern in _STATEMENTS.items() if pattern.search(page_text)]
    head = page_head(page_text)
    return [name for name, heading in _STATEMENT_HEADING.items() if heading.search(head)]


_LOWER_WORD = re.compile(r"\b[a-z][a-z'-]+\b")
PROSE_WORDS = 6  # a line with this many lower-case words is a sentence, not a heading or a cell


def page_head(page_text: str) -> str:
    """The lines that head a page: up to its first sentence of prose, or before its first row of figures.
    A table's column head ("Balance Sheet Location") or a note's sentence naming a statement comes after
    them, so it heads nothing.

    page_head("Table of Contents\n62\nCONSOLIDATED BALANCE SHEETS\nCash\n1,258\n2,003\n...")
    -> "Table of Contents\n62\nCONSOLIDATED BALANCE SHEETS\nCash\n1,258"
    """
    head: list[str] = []
    figures_in_a_row = 0
    for line in (line.strip() for line in page_text.splitlines()):
        if not line:
            continue
        figures_in_a_row = figures_in_a_row + 1 if FIGURE_CELL.match(line) and line != "$" else 0
        if figures_in_a_row == 2:
            break
        head.append(line)
        if len(_LOWER_WORD.findall(line)) >= PROSE_WORDS:
            break
    return "\n".join(head)


MIN_STATEMENT_ROWS = 5  # line items with a figure for two periods or more


def statement_page(page_text: str) -> list[str]:
    """The statements a page prints: headed by a statement's name, with at least MIN_STATEMENT_ROWS line items
    that have two figures or more (a contents page names the statements and prints none of them).

    statement_page("CONSOLIDATED BALANCE SHEETS\n...five rows of figures...") -> ["balance sheet"]
    statement_page("Contents\nConsolidated Balance Sheets\n44\nConsolidated Statement of Cash Flows\n60") -> []
    """
    headed = statements_headed(page_text)
    if not headed or sum(len(figures) >= 2 for _, figures in line_items(page_text)) < MIN_STATEMENT_ROWS:
        return []
    return headed


@dataclass
class Figure:
    """One line item read off a page: what it is, the year of its column, the figure as printed."""

    item: str
    label: str
    year: str
    printed: str
    source: int  # index of the page it was read from

    def as_operand(self, size: bool = False) -> str:
        """The figure as arithmetic: a statement's "(1,234)" is negative, its "—" is zero; ``size``: a cost's
        brackets show its direction, so "(1,234)" is 1,234."""
        if self.printed in ("—", "-"):
            return "0"
        if self.printed.startswith("("):
            return self.printed.strip("()") if size else f"(-{self.printed.strip('()')})"
        return self.printed

    def cited(self, marker: int, unit: str = "") -> str:
        """The figure as an answer line shows it, citing its page: "Capital expenditures, 2018: (1,577) [1]"."""
        return f"{self.label}, {self.year}: {self.printed}{' ' + unit if unit else ''} [{marker}]"


def line_items(text: str) -> list[tuple[str, list[str]]]:
    """The page's lines as (label, figures printed under it), the text layer's one cell per line; a label's
    spaces are plain spaces, whatever the PDF wrote ("Income\xa0tax\xa0expense"), and its leader dots are gone.

    line_items("Inventories\\n6,854 \\n7,367 \\nTotal current assets\\n$\\n26,291 $\\n20,556") ->
    [("Inventories", ["6,854", "7,367"]), ("Total current assets", ["26,291", "20,556"])]
    """
    items: list[tuple[str, list[str]]] = []
    for line in (line.strip() for line in text.splitlines()):
        if not line or line == "$":
            continue
        if (value := FIGURE_CELL.match(line)) and items:
            items[-1][1].append(value.group(1))
        elif not value:
            items.append((row_label(line).rstrip(":"), []))
    return [(label, figures) for label, figures in items if figures]


# Registered only: they say what a column head is; without them no statement has columns to read.
rules.register("column_head_year", "a column is headed by a year alone or by a date, and names that year",
               _TEST + "test_columns_headed_by_dates_and_a_page_number_above_the_heading_are_read_as_the_text_layer_prints_them",
               switchable=False,
               pays_on='docs/experiments/2026-11-27-measures-read-in-code.md: dev (fitted: FinanceBench 88, fresh, fresh2), measures worked out in code 17 -> 25, all right, after dates as column heads and page numbers')
rules.register("statement_year_columns", "a statement's columns are headed by lines that are a year or a date, before its first "
               "figure; a figure before any text is the page's number",
               _TEST + "test_columns_headed_by_dates_and_a_page_number_above_the_heading_are_read_as_the_text_layer_prints_them",
               switchable=False,
               pays_on='docs/experiments/2026-11-27-measures-read-in-code.md: dev (fitted: FinanceBench 88, fresh, fresh2), measures worked out in code 17 -> 25, all right, after dates as column heads and page numbers')


def column_year(line: str) -> str | None:
    """Rule: a column is headed by a year alone or by a date, and names that year.
    column_year("Fiscal 2022") -> "2022"; column_year("February 2, 2019") -> "2019"; column_year("2022 sales") -> None"""
    return year_of_line(line) or (years_named(line)[0] if is_period_cell(line) else None)


def year_columns(text: str) -> list[str]:
    """Rule: a statement's columns are headed by lines that are a year or a date, before its first figure; a
    figure before any text is the page's number.
    The years heading the page's columns, in order.

    year_columns("48\\nBALANCE SHEETS\\nAugust 29,\\n2021\\nAugust 30,\\n2020\\nCash\\n$\\n11,258") -> ["2021", "2020"]
    """
    years: list[str] = []
    text_seen = False
    for line in (line.strip() for line in text.splitlines()):
        if not line or line == "$":
            continue
        if year := column_year(line):
            years.append(year)
        elif FIGURE_CELL.match(line):
            if text_seen:
                break
        else:
            text_seen = True
    return years if len(years) >= 2 else []


def measure_asked(question: str, form: str = "") -> tuple[str, str] | None:
    """The measure a question asks for and its expression over line items: a textbook measure by its name,
    else a ratio or a growth rate the question spells out in line items. ``form``: the instructions beside the
    question, which may say a growth is asked in percent ("Answer in units of percents."); they name no measure.

    measure_asked("What is cash_ratio in FY2021 for Nike?") -> ("cash ratio", "cash / current_liabilities");
    measure_asked("What is total debt to EBITDA?") -> None (a ratio the measure is only part of)
    """
    text = re.sub(r"[\s_]+", " ", question)
    for pattern, expression in _MEASURES:
        match = pattern.search(text)
        if match and not _part_of_a_ratio(text, match):
            return match.group(0), expression
    return ratio_spelled_out(text) or growth_asked(text, form)


def items_named(text: str) -> list[tuple[str, re.Match]]:
    """The line items a question names, in order, each once where names overlap (the longest wins).

    items_named("R&D expense as a % of total revenue") -> [("research_development", …), ("revenues", …)]
    """
    found = sorted(((name, m) for name, pattern in _ITEM_NAMES for m in pattern.finditer(text)),
                   key=lambda found: (found[1].start(), -len(found[1].group(0))))
    kept: list[tuple[str, re.Match]] = []
    for name, match in found:
        if not kept or match.start() >= kept[-1][1].end():
            kept.append((name, match))
    return kept


# "A as a % of B", "A divided by B", "A / B", "A over B", "the ratio of A to B": one line item over another.
_RATIO_BETWEEN = re.compile(r"\s*(?:as an? (?:%|percent(?:age)?|share|proportion|fraction) of|divided by|/|over|relative to|"
                            r"(?P<to>to))\s+(?:the |its |total )*$", re.IGNORECASE)
_RATIO_OF = re.compile(r"\bratio of (?:the |its )?$", re.IGNORECASE)
_ASKS_PERCENT = re.compile(r"%|\bpercent(?:s|age)?\b", re.IGNORECASE)


rules.register("spelled_out_ratio", "a ratio the question spells out between two line items is that item over the other",
               _TEST + "test_a_ratio_the_question_spells_out_between_two_line_items_is_worked_out_in_percent_costs_by_their_size",
               pays_on="docs/experiments/2026-11-27-measures-read-in-code.md: dev (fitted), Corning's capex share and R&D share read in code, right")


@rules.switch("spelled_out_ratio", stand_in=None)
def ratio_spelled_out(text: str) -> tuple[str, str] | None:
    """Rule: a ratio the question spells out between two line items is that item over the other.

    ratio_spelled_out("What was capex as a percentage of total revenue in FY2020?") -> ("capex as a percentage of total revenue",
    "capex / revenues")
    """
    named = items_named(text)
    for (top, first), (bottom, second) in zip(named, named[1:]):
        between = _RATIO_BETWEEN.fullmatch(text[first.end() : second.start()])
        if between and (not between.group("to") or _RATIO_OF.search(text[: first.start()])) and top != bottom:
            return text[first.start() : second.end()], f"{top} / {bottom}"
    return None


_GROWTH = re.compile(r"\b(?:grow(?:th|n)?|grew|chang(?:e|ed)|increas(?:e|ed)|decreas(?:e|ed)|r[io]se|declin(?:e|ed)|f[ae]ll)\b", re.IGNORECASE)
_YEAR_ON_YEAR = re.compile(r"\byear[- ](?:over|on)[- ]year\b|\byoy\b|\b(?:from|over|compared (?:with|to)|versus|vs\.?) "
                           r"(?:the )?(?:prior|previous|preceding|last) (?:fiscal )?(?:year|period|quarter)\b", re.IGNORECASE)


rules.register("growth_rate", "a growth rate asked of one line item, in percent, is this period's figure over the one before, less one",
               _TEST + "test_a_growth_rate_reads_the_column_of_the_year_before_whichever_way_the_columns_run",
               pays_on="docs/experiments/2026-11-27-measures-read-in-code.md: fresh3 (held out), the operating income change (-10.2%) right, refused before; dev (fitted), Block's revenue growth")


@rules.switch("growth_rate", stand_in=None)
def growth_asked(text: str, form: str = "") -> tuple[str, str] | None:
    """Rule: a growth rate asked of one line item, in percent, is this period's figure over the one before, less one.
    The percent may be asked in the question or in the instructions beside it (``form``).

    growth_asked("By what percent did net sales grow year over year in FY2022?") -> ("net sales growth",
    "(revenues - revenues@prior) / revenues@prior")
    """
    named = items_named(text)
    years = years_named(text)
    consecutive = len(years) == 2 and abs(int(years[0]) - int(years[1])) == 1
    in_percent = _ASKS_PERCENT.search(text) or _ASKS_PERCENT.search(form)
    if len(named) != 1 or not _GROWTH.search(text) or not in_percent or not (_YEAR_ON_YEAR.search(text) or consecutive):
        return None
    item, match = named[0]
    return f"{match.group(0)} growth", f"({item} - {item}@prior) / {item}@prior"


def measure_items(question: str, form: str = "") -> list[re.Pattern]:
    """The labels of the line items the textbook measure a question asks for is computed from, or [] (``form``: its
    instructions, as ``measure_asked`` reads them).

    measure_items("Is Verizon's quick ratio healthy?") -> the patterns of cash, short-term investments,
    receivables and total current liabilities
    """
    asked = measure_asked(question, form)
    names = dict.fromkeys(token.split("@")[0] for token in _ITEM_NAME.findall(asked[1])) if asked else {}
    return [pattern for name in names for pattern in _ITEMS[name]]


rules.register("measure_only_a_part", "a measure the question joins to another quantity (to, less, plus, per, a margin, a share "
               "of) is only a part of what it asks", _TEST + "test_rule_a_measure_joined_to_another_quantity_is_only_a_part_of_what_is_asked",
               forbids=True, pays_on="docs/experiments/2026-11-28-the-line-that-answers-first.md: FinanceBench's two EBITDA-margin questions no longer answered with EBITDA")
# "total debt to EBITDA", "EBITDA less capex", "EBITDA margin", "free cash flow per share": another quantity
_JOINED_BEFORE = re.compile(r"\b(?:to|less|minus|plus|over|by)\s+(?:the |its |total )*$", re.IGNORECASE)
_JOINED_AFTER = re.compile(r"\s*(?:to|less|minus|plus|after|net of|per|divided by|as an? (?:%|percent|percentage|share) of)\b|"
                           r"\s*(?:%\s*)?margin\b", re.IGNORECASE)


def _part_of_a_ratio(text: str, match: re.Match) -> bool:
    """Rule: a measure the question joins to another quantity (to, less, plus, per, a margin, a share of) is only a part
    of what it asks. "total debt to EBITDA", "EBITDA less capex", "EBITDA % margin": not EBITDA."""
    if not rules.on("measure_only_a_part"):
        return bool(re.search(r"\bto\s+$", text[: match.start()]) or re.match(r"\s+to\b", text[match.end() :]))
    return bool(_JOINED_BEFORE.search(text[: match.start()]) or _JOINED_AFTER.match(text[match.end() :]))


def year_column(years: list[str], year: str) -> int | None:
    """The column the year heads (the first where it heads two), or None.

    year_column(["2022", "2021"], "2021") -> 1; year_column(["2022", "2021"], "2019") -> None
    """
    return years.index(year) if year in years else None


def find_figure(item: str, prior: bool, pages: list[str], year: str | None) -> Figure | None:
    """The first statement page (in retrieval order) whose columns carry the year and which prints the item;
    ``prior``: the column of the year before. Without a year, the page's latest."""
    for source, text in enumerate(pages):
        if not statements_headed(text):  # a measure is computed from the statements, not from a summary table
            continue
        years = year_columns(text)
        wanted_year = year or max(years, default=None)
        if wanted_year is None:
            continue
        column = year_column(years, str(int(wanted_year) - 1) if prior else wanted_year)
        if column is None:
            continue
        items = line_items(text)
        for wanted in _ITEMS[item]:
            for label, figures in items:
                if wanted.fullmatch(label) and column < len(figures):
                    return Figure(item, label, years[column], figures[column], source)
    return None


# A question about a measure that asks more than its value in one period: whether or why it moved, or an average
# over several years (an average inside the measure's own definition is part of it).
_ASKS_BEYOND_VALUE = re.compile(r"^\s*(?:is|are|was|were|did|does|do|has|have|had|can|will|should)\b|"
                                r"\b(?:why|drove|driven|drivers?|improv\w*|consistent|trend|compar\w*)\b|"
                                r"\baverage of\b|\b(?:two|three|four|five|\d+)[- ]years?\b", re.IGNORECASE)


rules.register("measure_worked_out", "a textbook measure is worked out in code from the statement's own lines, each figure cited",
               _TEST + "test_a_measure_is_worked_out_from_the_year_asked_and_cites_the_pages_it_read",
               pays_on='docs/experiments/2026-11-27-measures-read-in-code.md: fresh3 (held out), right 6 -> 9, refused 55 -> 52, wrong unchanged; its 11 checked sentences all judged backed')


@rules.switch("measure_worked_out", stand_in=None)
def work_out(question: str | ParsedQuestion, pages: list[str]) -> tuple[str, list[int]] | None:
    """Rule: a textbook measure is worked out in code from the statement's own lines, each figure cited.
    The answer to a measure question worked out from the statement pages, and which pages it cites.

    ``pages`` are whole page texts in retrieval order. Returns the answer text, whose markers [1], [2], …
    number the cited pages in the order of the returned indexes, or None when any figure is missing.
    A rate (a margin, a return, a tax rate) or a ratio asked in percent is given in percent. The measure,
    its years and its period are read from the question asked (``query``); the answer's form (percent, decimal
    places) from the whole text, its instructions included ("Round your answer to two decimal places.").
    """
    question = as_read(question)
    asked = measure_asked(question.query, question.form)
    if asked is None:
        return None
    name, expression = asked
    years = question.years  # "FY2021", "fiscal 2021" -> "2021"
    # a measure over two periods (an average, a growth) is the later one's; another asks one period
    if _ASKS_BEYOND_VALUE.search(question.query) or (len(years) > 1 and "@prior" not in expression):
        return None
    year = max(years, default=None)
    figures: dict[str, Figure] = {}
    for token in set(_ITEM_NAME.findall(expression)):
        figure = find_figure(token.split("@")[0], token.endswith("@prior"), pages, year)
        if figure is None:
            return None
        figures[token] = figure
    arithmetic = _ITEM_NAME.sub(lambda m: figures[m.group(0)].as_operand(m.group(0).split("@")[0] in COST_ITEMS), expression)
    value = calc.evaluate(arithmetic)
    if value is None:
        return None
    cited = sorted({f.source for f in figures.values()})
    marker = {source: number for number, source in enumerate(cited, start=1)}
    in_order = sorted(figures.values(), key=lambda f: (f.source, f.item, f.year))
    lines = [f.cited(marker[f.source]) for f in in_order]
    in_percent = "/" in expression and (bool(PERCENT_MEASURES.search(name)) or bool(_ASKS_PERCENT.search(question.text)))
    result = calc.format_result(value * 100, arithmetic, question.text) + "%" if in_percent else calc.format_result(value, arithmetic, question.text)
    return "\n".join([*lines, f"{calc.WORKED_OUT_LABEL} {name} = {arithmetic} = {result}"]), cited


# -----------------------------------------------------------------------------
# The hooks' other ends: evidence lines, the answer without the model, documents and their periods


rules.register("measure_rows", "a measure's evidence is the statement rows it is computed from (\"quick ratio\": cash, receivables, "
               "current liabilities), whatever words the question shares with them", _TEST + "test_rule_a_measures_evidence_is_the_rows_it_is_computed_from",
               pays_on='docs/experiments/2026-11-26-a-fresh-set-of-analyst-questions.md: second fresh set (held out), 6 won / 0 lost, evidence@3 0.543 -> 0.609 in the filing')


def measure_rows(question: object, lines: list[Line]) -> np.ndarray:
    """Rule: a measure's evidence is the statement rows it is computed from ("quick ratio": cash, receivables,
    current liabilities), whatever words the question shares with them.
    For each line, whether it is a row labelled with one of those line items. ``question`` is the answer path's
    question.ParsedQuestion (the measure in its query, a growth's percent in its instructions).

    measure_rows(parse_question("What is the current ratio?"), [row "Assets · Total current assets · 2021: 26,291", sentence])
      -> [True, False]
    """
    if not rules.on("measure_rows"):
        return np.zeros(len(lines), dtype=bool)
    items = measure_items(question.query, question.form)
    return np.array([line.kind == "row" and any(item.fullmatch(line.label) for item in items) for line in lines], dtype=bool)


# Words of a question about one line item that name no other thing: its scale and the fiscal year's wording.
rules.register("line_item_read", "a question asking the value of one line item in one period, each of its words the item's name, "
               "a word asking for a value, the year or the company's name, is answered by that item's statement row",
               _TEST + "test_one_line_item_asked_alone_is_read_off_its_statement_row_with_the_unit",
               pays_on='docs/experiments/2026-11-27-fewer-words-to-read.md: FinanceBench 88 (fitted), 7 read in code (5 before), the three new ones right; it fired on none of fresh3')


@rules.switch("line_item_read", stand_in=None)
def item_asked(question: str | ParsedQuestion, document: str = "") -> str | None:
    """Rule: a question asking the value of one line item in one period, each of its words the item's name,
    a word asking for a value, the year or the company's name, is answered by that item's statement row.
    The item (a key of ITEMS), or None. The question asked is read (``query``: its instructions say the answer's form);
    ``document`` is the file's name, where the company's name stands ("3M_2018_10K.pdf").

    item_asked("What is the FY2018 capital expenditure amount for 3M?", "3M_2018_10K.pdf") -> "capex";
    item_asked("Which of JPM's segments had the highest net income?", "JPM.pdf") -> None ("segments", "highest")
    """
    question = as_read(question)
    query = question.query
    if _ASKS_BEYOND_VALUE.search(query) or measure_asked(query, question.form) or len(question.years) > 1:
        return None
    named = items_named(query)
    if len({name for name, _ in named}) != 1:
        return None
    # its words as cells are named ("FY2019": "fy" is a form word, "2019" a year)
    unaccounted = ({word for word in question.cell_words if not YEAR_TOKEN.match(word)}
                   - (cells.LOOKUP_WORDS if rules.on("lookup_words") else frozenset()) - cells.FORM_WORDS)
    for _, match in named:
        unaccounted -= cells.words_of(match.group(0))
    company = re.sub(r"[^a-z0-9]", "", document.lower())
    return named[0][0] if all(word in company for word in unaccounted) else None


def item_from_statements(question: str | ParsedQuestion, pages: list[str], document: str = "") -> tuple[str, list[int]] | None:
    """The answer to a question asking one line item's value (``item_asked``), read off the first statement page
    that prints it in the column of the year asked (else the latest), with the table's unit; None when no page does.

    Returns the answer text, the marker [1] citing the page, and the page's index in ``pages``.
    """
    question = as_read(question)
    item, years = item_asked(question, document), question.years
    figure = find_figure(item, False, pages, years[0] if years else None) if item else None
    if figure is None:
        return None
    text = pages[figure.source]
    unit = unit_above(text, text.find(figure.label)) if figure.label in text else ""
    return f"{figure.cited(1, unit)}.", [figure.source]


def measure_from_statements(question: ParsedQuestion, pages: list[Page]) -> tuple[str, list[Hit]] | None:
    """A financial measure, or one line item asked alone, read off the statement pages among the ``pages``
    (best first), and the pages it cites; ``question`` as the answer path read it.

    Only the top page's document is read: one measure comes from one company's statements.
    """
    if not pages:
        return None
    document = [page for page in pages if page.hit.collection == pages[0].hit.collection]
    texts = [page.text for page in document]
    if not (worked := work_out(question, texts) if measure_asked(question.query, question.form) else item_from_statements(question, texts, document[0].hit.doc_name)):
        return None
    text, cited = worked
    return text, [replace(document[i].hit, start=0, end=len(document[i].text), text=document[i].text) for i in cited]


# Document types by the words their first pages use (routing's profile; first match wins, before the generic ones).
DOC_TYPES = [
    ("annual report", r"\b(?:form\s+10-?k|annual\s+report)\b"),
    ("quarterly report", r"\b(?:form\s+10-?q|quarterly\s+report|interim\s+report)\b"),
    ("financial statements", r"\b(?:balance\s+sheets?|statements?\s+of\s+cash\s+flows|income\s+statement)\b"),
]

# The period a report covers, as its cover states it: "For the fiscal year ended December 31, 2022",
# "for the quarterly period ended June 30, 2023", "Three months ended December 31, 2022".
_PERIOD_ENDED = re.compile(rf"\b(?:year|period|quarter|months|weeks)\s+ended\s+(?:(?:{MONTHS})\.?\s+\d{{1,2}},?\s+)?({YEAR})\b",
                           re.IGNORECASE)


def report_period(head: str) -> str:
    """The year of the period a report's first pages say it covers, or "".
    report_period("For the fiscal year ended June 30, 2023") -> "2023" """
    found = _PERIOD_ENDED.search(head)
    return found.group(1) if found else ""


# How a document writes its fiscal years ("FY2019", "fiscal 2019", "2019"): the semantic search embeds a
# question's years in each document's own wording.
_FY_STYLE = re.compile(rf"\b{FY}\d{{2,4}}\b")
_FISCAL_STYLE = re.compile(rf"\bfiscal\s+(?:year\s+)?{YEAR}\b", re.IGNORECASE)


def year_wordings(text: str, style: str) -> str:
    """Every year in ``text`` written one way: "plain" 2019, "fy" FY2019 or "fiscal" fiscal 2019.

    year_wordings("Capex in FY2019?", "plain") -> "Capex in 2019?"
    """
    def reword(match: re.Match) -> str:
        year = match.group("year") or f"20{match.group('short')}"
        return {"plain": year, "fy": f"FY{year}", "fiscal": f"fiscal {year}"}[style]

    return YEAR_WORDED.sub(reword, text)


def year_style(text: str) -> str:
    """year_style("Net sales rose in FY2021 and FY2020 ... FY19") -> "fy" (a style needs 3 uses, else "plain")"""
    counts = {"fy": len(_FY_STYLE.findall(text)), "fiscal": len(_FISCAL_STYLE.findall(text))}
    style = max(counts, key=counts.get)
    return style if counts[style] >= 3 else "plain"


# -----------------------------------------------------------------------------
# The hooks domains.py calls, under their generic names

page_marks = statement_page
pages_named = statements_named
pages_needed = statements_measured
line_ranking = measure_rows
answer_in_code = measure_from_statements
prompt_notes = formulas_for
document_types = DOC_TYPES
wordings = ("plain", "fy", "fiscal")
wording_of = year_style
in_wording = year_wordings
