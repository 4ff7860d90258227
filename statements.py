"""Work out a financial measure from the statements themselves, without the model.

The 1.5B model finds the right statement pages and still picks the wrong lines to compute with (gross
profit for cost of sales, long-term debt for total debt). A balance sheet or income statement is a
list of line items, each a label and one figure per year, so for the textbook measures the app can
read the lines itself:

    page text  -> statement_page()  which statements the page prints: headed by one, with rows of figures
               -> line_items()      "Total current assets" -> [26291, 20556], one figure per year column
               -> year_columns()    the years the page's columns are headed with ("2021", "2020")
    question   -> measure_asked()   which measure ("current ratio") and its expression over line items
               -> measure_items()   the labels of those line items (evidence.py shows their rows)
               -> work_out()        each item found on a retrieved page, this year's column (or the
                                    year the question names) and, for averages, the year before;
                                    the answer lists every figure with its source, then the result

Only what the page prints is used: a measure with a missing line, or pages without year columns,
returns None and the question goes to the model as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import calc
from question import STATEMENT_NAMES
from text_utils import FIGURE_CELL, year_of_line, years_named

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

# The measures of calc.FORMULAS that are plain arithmetic on line items; "@prior" is last year's column.
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
