"""Read a table's cell in code when the question names its row and its column: no model reads it.

    the question ("What were total current assets in 2019?") and the evidence lines (evidence.py), each
    table row read with its heads ("Balance Sheets · Total current assets · 2019: 16,525 · 2018: 15,134")
      -> a lookup?       a question with a word that neither the row, its column, its table nor its document
                         accounts for ("... of the Asia segment", "... change ...") is not a cell. Accounted for: words asking
                         for a value, the answer's form ("in thousands", "fiscal"), a date's month and day,
                         and the names the document gives itself (its profile: "Harbor Lane Outfitters'")
      -> the row         the rows whose label's words all stand in the question, the one naming most of them;
                         else the one row of the pages read holding all the words left ("cash")
      -> the column      of that row's cells, the one whose head the question names, and only one
      -> Cell(line, number, column, value): "Total current assets, 2019: 16,525 · (In millions) [L1]."

The small model reads a row badly (a cost-of-sales line for total cost of revenue, a figure in thousands
given as millions); the product reads it instead, and the row is the cited line, so the answer's ✓ is
the row that says it. Any table, not only a company's statements: a row is a label and its cells.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import rules
from pages import row_cells, unit_above
from question import ParsedQuestion, as_read
from text_utils import MONTHS, YEAR_TOKEN, cell_words, months_in, tokenize, without_s, years_in

if TYPE_CHECKING:
    from records import Hit

# The rules of this module (rules.py): name, principle as its "Rule:" line states it, its test, whether it forbids, where it pays
_RULES = [
    ("lookup_words", 'words that ask for a value without naming one ("what was the amount reported at the end of ...")',
     "test_rule_words_that_ask_for_a_value_name_no_other_thing", False,
     "docs/experiments/2026-11-28-rules-that-pay.md: FinanceBench 88 (fitted), 3M's FY2018 capex (1,577) read "
     "in code; switched off, left to the model"),
    ("unaccounted_word", "a word of the question that neither the cell nor its table nor its document accounts for asks something else",
     "test_rule_a_word_no_cell_accounts_for_asks_something_else", True,
     "docs/experiments/2026-11-28-rules-that-pay.md: fresh3 (held out), cells read in code right 4 of 4; "
     "switched off 7 of 9 (two wrong: a percentage and a segment share answered with a revenue row)"),
    ("form_words", 'a unit or a kind of period the question asks the answer in ("in thousands", "USD", "fiscal year") says its form, '
     "not which cell", "test_rule_a_unit_or_a_kind_of_period_says_the_answers_form_not_which_cell", False,
     "docs/experiments/2026-11-28-the-line-that-answers-first.md: FinanceBench 88 (fitted), cells read in code "
     "1 -> 2, both right, with the other three phrasing rules; the phrasing test 8 -> 21 of 21"),
    ("document_names", "a name the document gives itself on its first pages or in its file name says whose figure is asked, not which cell",
     "test_rule_a_name_the_document_gives_itself_says_whose_figure_not_which_cell", False,
     "docs/experiments/2026-11-28-the-line-that-answers-first.md: FinanceBench 88 (fitted), cells read in code "
     "1 -> 2, both right, with the other three phrasing rules; the phrasing test 8 -> 21 of 21"),
    ("date_names_year_column", 'a date in the question ("December 31, 2019") names the column of its year, and of its month where the '
     "column prints one", "test_rule_a_date_names_the_column_of_its_year_and_month", False,
     "docs/experiments/2026-11-28-the-line-that-answers-first.md: FinanceBench 88 (fitted), cells read in code "
     "1 -> 2, both right, with the other three phrasing rules; the phrasing test 8 -> 21 of 21"),
    ("one_row_by_its_words", 'a question naming only some of a row\'s words ("cash") names that row when it is the one row of the '
     "pages read holding them all", "test_rule_a_row_named_by_some_of_its_words_only_when_no_other_row_holds_them", False,
     "docs/experiments/2026-11-28-the-line-that-answers-first.md: FinanceBench 88 (fitted), cells read in code "
     "1 -> 2, both right, with the other three phrasing rules; the phrasing test 8 -> 21 of 21; switched off, "
     "Best Buy's inventories are cited by page, not by their row"),
]
for _name, _principle, _test, _forbids, _pays_on in _RULES:
    rules.register(_name, _principle, "tests/test_cells.py::" + _test, forbids=_forbids, pays_on=_pays_on)

# Rule: words that ask for a value without naming one ("what was the amount reported at the end of ...").
LOOKUP_WORDS = frozenset("amount amounts value values figure figures number reported report end ending ended year years "
                         "period as total company company's firm its much many give tell show state provide find hold held "
                         "recorded".split())
# Rule: a unit or a kind of period the question asks the answer in ("in thousands", "USD", "fiscal year") says its form, not which cell.
# (The words as words_of reads them: a plural's "s" dropped.)
FORM_WORDS = frozenset("usd us dollar euro eur gbp million billion thousand fy fiscal calendar".split())
# Rule: a date in the question ("December 31, 2019") names the column of its year, and of its month where the column prints one.
_DATE_BEFORE_YEAR = re.compile(rf"\b(?P<month>{MONTHS})\.?\s+(?:\d{{1,2}}(?:st|nd|rd|th)?,?\s+)?(?=(?:FY\s?)?\d{{4}}\b)", re.IGNORECASE)


@dataclass
class Cell:
    line: Hit  # the row, as the evidence shows it
    number: int  # its place among the lines the answer cites ([L1] is 1)
    label: str
    column: str
    value: str
    unit: str = ""


def row_parts(line: Hit) -> tuple[str, str, list[tuple[str, str]], str]:
    """A row line's heading, label, (column head, value) cells and unit, as evidence.py wrote them.

    row_parts(Hit(text="Balance · Cash · 2019: 5 · 2018: 6 · (In millions)", trace={"label": "Cash"}, ...))
      -> ("Balance", "Cash", [("2019", "5"), ("2018", "6")], "(In millions)")
    """
    label = line.trace.get("label", "")
    parts = line.text.split(" · ")
    after = " · ".join(parts[parts.index(label) + 1 :]) if label in parts else ""
    cells = row_cells(after)
    heading = " · ".join(parts[: parts.index(label)]) if label in parts else ""
    # evidence.py adds the table's unit last, unless its heading says it already
    unit = after.split(" · ")[-1] if cells and not row_cells(after.split(" · ")[-1]) else unit_above(heading, len(heading))
    return heading, label, cells, unit


def words_of(text: str) -> set[str]:
    """Lower-cased content words, a plural's "s" dropped, so "assets" names "Asset" (text_utils.cell_words); a
    question's are read once, on it (``ParsedQuestion.cell_words``)."""
    return cell_words(tokenize(text))


def names_column(head: str, asked: set[str], years: set[str], months: set[str] = frozenset()) -> bool:
    """Does the question name this column head? A head with a year is named by that year ("December 31,
    2019" by "2019"), and by the question's month where both print one; any other by all its words ("Europe", "Q3").

    names_column("December 31, 2019", set(), {"2019"}) -> True; names_column("2018", {"2019"}, {"2019"}) -> False
    names_column("June 30, 2019", set(), {"2019"}, {"dec"}) -> False
    """
    head_years = years_in(head)
    if head_years:
        head_months = months_in(head)
        month_agrees = not (months and head_months and rules.on("date_names_year_column")) or bool(head_months & months)
        return bool(head_years & years) and month_agrees
    return bool(words_of(head)) and words_of(head) <= asked


@dataclass
class AskedCell:
    """A question read for the cell it names: its words (dates and years set apart), the years and months
    it names, and the words that say whose figure and in what form rather than which cell."""

    words: set[str]
    years: set[str]
    months: set[str]
    no_cell: set[str]  # words asking for a value, its form, or naming the document (rules lookup_words, form_words)


def read_asked(question: ParsedQuestion) -> AskedCell:
    """The question's words as cells are named (``ParsedQuestion.cell_words``), the month and day of a date before a
    year left out (the year names the column), its years however worded ("FY2019": "fy" is a form word, "2019" a year).

    read_asked(parse_question("What was cash at December 31, 2019, in thousands?")) -> words {"cash", "thousand", "2019"},
    years {"2019"}, months {"dec"}"""
    dates = [match.group(0) for match in _DATE_BEFORE_YEAR.finditer(question.query)] if rules.on("date_names_year_column") else []
    months = set(question.months) if dates else set()
    no_cell = (LOOKUP_WORDS if rules.on("lookup_words") else set()) | (FORM_WORDS if rules.on("form_words") else set())
    return AskedCell(set(question.cell_words) - words_of(" ".join(dates)), set(question.years), months, set(no_cell))


def document_names(names: set[str]) -> set[str]:
    """Rule: a name the document gives itself on its first pages or in its file name says whose figure is asked,
    not which cell. The names (routing's profile) as words_of reads a question's: document_names({"outfitters"}) -> {"outfitter"}"""
    return {without_s(name) for name in names} if rules.on("document_names") else set()


rules.register("cell_read_in_code", "a question naming one row and one column of a table is answered by that cell, read in code",
               "tests/test_cells.py::test_the_cell_named_by_row_and_column_is_read_with_its_row_cited",
               pays_on="docs/experiments/2026-11-28-rules-that-pay.md: fresh3 (held out), American Express's provisions (2,182) "
                       "and Corning's capex (1,377) read in code, right; switched off, left to the model")


@rules.switch("cell_read_in_code", stand_in=None)
def named_cell(question: str | ParsedQuestion, lines: list[Hit], names: dict[str, set[str]] | None = None,
               row_labels: list[str] | None = None) -> Cell | None:
    """Rule: a question naming one row and one column of a table is answered by that cell, read in code.
    The one cell of the evidence rows that ``question`` names by its row and its column; None when the
    question asks more than a lookup, names no row, no column, two of them, or something else besides.

    ``names`` are the names each document (by collection) gives itself (routing's profile); ``row_labels`` the
    labels of every row on the pages read, against which a row named by only some of its words must be the
    only one holding them (the evidence lines' own rows when not given).
    """
    question = as_read(question)
    asked = read_asked(question)
    rows = [line for line in lines if line.trace.get("kind") == "row" and words_of(line.trace.get("label", ""))]
    labels = [words_of(label) for label in (row_labels if row_labels is not None else [line.trace["label"] for line in rows])]
    found: list[tuple[int, int, Cell]] = []  # (whole label named, label words named, cell)
    for line in rows:
        heading, label, cells, unit = row_parts(line)
        label_words = words_of(label)
        named = [(head, value) for head, value in cells if names_column(head, asked.words, asked.years, asked.months)]
        if len(named) != 1:
            continue
        head, value = named[0]
        own = document_names((names or {}).get(line.collection, set()))
        rest = {word for word in asked.words - words_of(head) - words_of(heading) - words_of(unit) - asked.no_cell - asked.years - own
                if not YEAR_TOKEN.match(word) and word not in re.sub(r"[^a-z]", "", line.doc_name.lower())}
        whole = label_words <= asked.words and (rest <= label_words or not rules.on("unaccounted_word"))
        if not whole and not part_names_one_row(rest, label_words, labels):
            continue  # Rule: a word of the question that neither the cell nor its table nor its document accounts for asks something else
        found.append((int(whole), len(label_words & asked.words), Cell(line, lines.index(line) + 1, label, head, value, unit)))
    if not found:
        return None
    most = max((whole, size) for whole, size, _ in found)
    best = [cell for whole, size, cell in found if (whole, size) == most]
    if len({(cell.label.lower(), cell.value) for cell in best}) > 1:
        return None  # two rows fit as well: which one is meant is not ours to guess
    return best[0]


def part_names_one_row(rest: set[str], label_words: set[str], labels: list[set[str]]) -> bool:
    """Rule: a question naming only some of a row's words ("cash") names that row when it is the one row of the
    pages read holding them all. ``rest`` are the question's words nothing else accounts for; ``labels`` the
    words of every row label read."""
    if not rest or not rest <= label_words or not rules.on("one_row_by_its_words"):
        return False
    return len({frozenset(label) for label in labels if rest <= label}) == 1


def cell_answer(cell: Cell) -> str:
    """The answer a cell gives, its row cited: "Total current assets, 2019: 16,525 (In millions) [L1]." """
    unit = f" {cell.unit}" if cell.unit else ""
    return f"{cell.label}, {cell.column}: {cell.value}{unit} [L{cell.number}]."
