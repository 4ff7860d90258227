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
    answer_in_code         measure_from_statements()  a measure worked out from the statement lines, no model
    prompt_notes           formulas_for()             a measure's textbook formula, told to the model
    asks_calculation       asks_calculation()         measure words that ask for arithmetic
    document_types         DOC_TYPES                  10-K, 10-Q, financial statements (routing's profile)
    report_period          report_period()            the year a report's cover says it covers
    wordings, wording_of,  year_style(),              how a document writes its fiscal years ("FY2019",
    in_wording             year_wordings()            "fiscal 2019", "2019")

Reading a statement:

    page text  -> statement_page()  which statements the page prints: headed by one, with rows of figures
               -> line_items()      "Total current assets" -> [26291, 20556], one figure per year column
               -> year_columns()    the years the page's columns are headed with ("2021", "2020")
    question   -> measure_asked()   which measure ("current ratio") and its expression over line items
               -> measure_items()   the labels of those line items (the evidence lines show their rows)
               -> work_out()        each item found on a retrieved page, this year's column (or the
                                    year the question names) and, for averages, the year before;
                                    the answer lists every figure with its source, then the result

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
from text_utils import FIGURE_CELL, FY, MONTHS, YEAR, YEAR_WORDED, year_of_line, years_named

if TYPE_CHECKING:
    from pages import Line, Page
    from retriever import Hit

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

def statements_named(text: str) -> list[str]:
    """Rule: a statement named beside the question is where its answer is printed.
    statements_named("relying on the consolidated statements of cash flows") -> ["cash flow statement"]"""
    return [name for name, pattern in _STATEMENTS.items() if pattern.search(text)]


def statements_measured(text: str) -> list[str]:
    """Rule: a financial measure is computed from the statements of its textbook definition.
    The statements a financial measure named in ``text`` is computed from.

    statements_measured("What is the FY2021 inventory turnover ratio for Nike?") -> ["income statement", "balance sheet"]
    """
    text = re.sub(r"[\s_]+", " ", text)  # "cash_ratio", "payables  turnover"
    found = [name for pattern, names in _NEEDS if pattern.search(text) for name in names]
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
    "revenues": ["total revenues?", "revenues?", "net sales"],
    "cost_of_sales": ["cost of (?:sales|goods sold|revenues?)", "merchandise costs"],
    "operating_income": ["operating income", "income from operations"],
    "net_income": ["net income", "net income including noncontrolling interests"],
    "depreciation": ["depreciation and amortization"],
}
_ITEMS = {name: [re.compile(rf"{label}\W*", re.IGNORECASE) for label in labels] for name, labels in ITEMS.items()}

# The measures of FORMULAS that are plain arithmetic on line items; "@prior" is last year's column.
MEASURES = {
    r"current ratio": "current_assets / current_liabilities",
    r"quick ratio|acid[- ]test": "(cash + short_term_investments + receivables) / current_liabilities",
    r"cash ratio": "cash / current_liabilities",
    r"inventory turnover": "cost_of_sales / ((inventories + inventories@prior) / 2)",
    r"receiv\w* turnover": "revenues / ((receivables + receivables@prior) / 2)",
    r"payables? turnover": "cost_of_sales / ((payables + payables@prior) / 2)",
    r"asset turnover": "revenues / ((total_assets + total_assets@prior) / 2)",
    r"cash conversion cycle": "365 / (cost_of_sales / ((inventories + inventories@prior) / 2)) + 365 / (revenues / "
    "((receivables + receivables@prior) / 2)) - 365 / (cost_of_sales / ((payables + payables@prior) / 2))",
    r"gross (?:profit )?margin": "(revenues - cost_of_sales) / revenues",
    r"operating margin": "operating_income / revenues",
    r"net (?:profit )?margin": "net_income / revenues",
    r"\bebitda\b": "operating_income + depreciation",
}
_MEASURES = [(re.compile(pattern, re.IGNORECASE), expression) for pattern, expression in MEASURES.items()]
_ITEM_NAME = re.compile(r"[a-z_]+(?:@prior)?")


# A heading is a whole short line that does not end a sentence ("... included in the\nConsolidated Balance Sheets." is prose),
# perhaps with its period ("Profit and loss account for the year ended March 31, 2003").
_PERIOD = r"(?:\s+(?:for\s+the\s+(?:\w+\s+)?(?:years?|periods?|quarters?)\s+ended|as\s+(?:at|of|on))\b)?"
_STATEMENT_HEADING = {name: re.compile(rf"^\W*(?:consolidated\s+|combined\s+)?(?:{pattern})\b{_PERIOD}.{{0,40}}(?<!\.)$", re.IGNORECASE | re.MULTILINE)
                      for name, pattern in STATEMENT_NAMES.items()}


def statements_headed(page_text: str) -> list[str]:
    """Rule: a statement's page is headed by its name on a line of its own, at the top of the page.
    The financial statements a page is headed by: a short line that names one, in the page's head.

    statements_headed("CONSOLIDATED STATEMENTS OF CASH FLOWS\n(in millions)\n...") -> ["cash flow statement"]
    statements_headed("Note 4. Leases\nCosts were as follows:\n2022\n1,234\nBalance Sheet Location\n...") -> []
    """
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

    def as_operand(self) -> str:
        """The figure as arithmetic: a statement's "(1,234)" is negative, its "—" is zero."""
        if self.printed in ("—", "-"):
            return "0"
        return f"(-{self.printed.strip('()')})" if self.printed.startswith("(") else self.printed


def line_items(text: str) -> list[tuple[str, list[str]]]:
    """The page's lines as (label, figures printed under it), the text layer's one cell per line.

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
            items.append((line.rstrip(":"), []))
    return [(label, figures) for label, figures in items if figures]


def year_columns(text: str) -> list[str]:
    """Rule: a statement's columns are headed by lines that are a year alone, before its first figure.
    The years heading the page's columns, in order: the lines that are a year alone, before the first figure.

    year_columns("BALANCE SHEETS\\nAugust 29,\\n2021\\nAugust 30,\\n2020\\nCash\\n$\\n11,258") -> ["2021", "2020"]
    """
    years: list[str] = []
    for line in (line.strip() for line in text.splitlines()):
        if year := year_of_line(line):
            years.append(year)
        elif FIGURE_CELL.match(line) and line != "$":
            break
    return years if len(years) >= 2 else []


def measure_asked(question: str) -> tuple[str, str] | None:
    """measure_asked("What is cash_ratio in FY2021 for Nike?") -> ("cash ratio", "cash / current_liabilities");
    measure_asked("What is total debt to EBITDA?") -> None (a ratio the measure is only part of)"""
    text = re.sub(r"[\s_]+", " ", question)
    for pattern, expression in _MEASURES:
        match = pattern.search(text)
        if match and not _part_of_a_ratio(text, match):
            return match.group(0), expression
    return None


def measure_items(question: str) -> list[re.Pattern]:
    """The labels of the line items the textbook measure a question asks for is computed from, or [].

    measure_items("Is Verizon's quick ratio healthy?") -> the patterns of cash, short-term investments,
    receivables and total current liabilities
    """
    asked = measure_asked(question)
    names = dict.fromkeys(token.split("@")[0] for token in _ITEM_NAME.findall(asked[1])) if asked else {}
    return [pattern for name in names for pattern in _ITEMS[name]]


def _part_of_a_ratio(text: str, match: re.Match) -> bool:
    """"total debt to EBITDA" asks a ratio of which EBITDA is only a part."""
    return bool(re.search(r"\bto\s+$", text[: match.start()]) or re.match(r"\s+to\b", text[match.end() :]))


def find_figure(item: str, prior: bool, pages: list[str], year: str | None) -> Figure | None:
    """The first statement page (in retrieval order) whose columns carry the year and which prints the item."""
    for source, text in enumerate(pages):
        if not statements_headed(text):  # a measure is computed from the statements, not from a summary table
            continue
        years = year_columns(text)
        column = years.index(year) if year in years else (0 if years and year is None else None)
        if column is None:
            continue
        column += 1 if prior else 0
        items = line_items(text)
        for wanted in _ITEMS[item]:
            for label, figures in items:
                if wanted.fullmatch(label) and column < len(figures) and column < len(years):
                    return Figure(item, label, years[column], figures[column], source)
    return None


def work_out(question: str, pages: list[str]) -> tuple[str, list[int]] | None:
    """Rule: a textbook measure is worked out in code from the statement's own lines, each figure cited.
    The answer to a measure question worked out from the statement pages, and which pages it cites.

    ``pages`` are whole page texts in retrieval order. Returns the answer text, whose markers [1], [2], …
    number the cited pages in the order of the returned indexes, or None when any figure is missing.
    """
    asked = measure_asked(question)
    if asked is None:
        return None
    name, expression = asked
    year = next(iter(years_named(question)), None)  # "FY2021", "fiscal 2021" -> "2021"
    figures: dict[str, Figure] = {}
    for token in set(_ITEM_NAME.findall(expression)):
        figure = find_figure(token.split("@")[0], token.endswith("@prior"), pages, year)
        if figure is None:
            return None
        figures[token] = figure
    arithmetic = _ITEM_NAME.sub(lambda m: figures[m.group(0)].as_operand(), expression)
    value = calc.evaluate(arithmetic)
    if value is None:
        return None
    cited = sorted({f.source for f in figures.values()})
    marker = {source: number for number, source in enumerate(cited, start=1)}
    in_order = sorted(figures.values(), key=lambda f: (f.source, f.item, f.year))
    lines = [f"{f.label}, {f.year}: {f.printed} [{marker[f.source]}]" for f in in_order]
    result = calc.format_result(value, arithmetic, question)
    return "\n".join([*lines, f"{calc.WORKED_OUT_LABEL} {name} = {arithmetic} = {result}"]), cited


# -----------------------------------------------------------------------------
# The hooks' other ends: evidence lines, the answer without the model, documents and their periods


def measure_rows(question: str, lines: list[Line]) -> np.ndarray:
    """Rule: a measure's evidence is the statement rows it is computed from ("quick ratio": cash, receivables,
    current liabilities), whatever words the question shares with them.
    For each line, whether it is a row labelled with one of those line items.

    measure_rows("What is the current ratio?", [row "Assets · Total current assets · 2021: 26,291", sentence]) -> [True, False]
    """
    items = measure_items(question)
    return np.array([line.kind == "row" and any(item.fullmatch(line.label) for item in items) for line in lines], dtype=bool)


def measure_from_statements(question: str, pages: list[Page]) -> tuple[str, list[Hit]] | None:
    """A financial measure read off the statement pages among the ``pages`` (best first), and the pages it cites.

    Only the top page's document is read: one measure comes from one company's statements.
    """
    if not pages or not measure_asked(question):
        return None
    document = [page for page in pages if page.hit.collection == pages[0].hit.collection]
    if not (worked := work_out(question, [page.text for page in document])):
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
