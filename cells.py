"""Read a table's cell in code when the question names its row and its column: no model reads it.

    the question ("What were total current assets in 2019?") and the evidence lines (evidence.py), each
    table row read with its heads ("Balance Sheets · Total current assets · 2019: 16,525 · 2018: 15,134")
      -> a lookup?       a question that asks for something done to a value (a change, a sum, a yes or no)
                         is not a cell; nor one with a word that neither the row, its column, its table
                         nor its document accounts for ("... of the Asia segment")
      -> the row         the rows whose label's words all stand in the question; the one naming most of them
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

import calc
import rules
from pages import row_cells, unit_above
from text_utils import POSSESSIVE, YEAR_TOKEN, YEAR_WORDED, tokenize, without_s, years_in, years_named

if TYPE_CHECKING:
    from records import Hit

# The rules of this module (rules.py): name, principle as its "Rule:" line states it, its test, whether it forbids
_RULES = [
    ("lookup_words", 'words that ask for a value without naming one ("what was the amount reported at the end of ...")',
     "test_rule_words_that_ask_for_a_value_name_no_other_thing", False),
    ("asks_more", "a question that asks whether, why, or for a value's change or average asks more than one printed cell "
     '(a printed "ratio" or "share" row is a cell like any other)', "test_rule_a_question_asking_whether_or_for_a_change_asks_more_than_a_cell", True),
    ("lookup_only", "only a question asking for one value as printed is answered by a cell",
     "test_rule_only_a_question_asking_one_printed_value_is_a_lookup", True),
    ("unaccounted_word", "a word of the question that neither the cell nor its table nor its document accounts for asks something else",
     "test_rule_a_word_no_cell_accounts_for_asks_something_else", True),
]
for _name, _principle, _test, _forbids in _RULES:
    rules.register(_name, _principle, "tests/test_cells.py::" + _test, forbids=_forbids)

# Rule: words that ask for a value without naming one ("what was the amount reported at the end of ...").
LOOKUP_WORDS = frozenset("amount amounts value values figure figures number reported report end ending ended year years "
                         "period as total company company's firm its much many".split())
# Rule: a question that asks whether, why, or for a value's change or average asks more than one printed cell
# (a printed "ratio" or "share" row is a cell like any other).
_ASKS_MORE = re.compile(r"^\s*(?:is|are|was|were|did|does|do|has|have|had|can|will|should)\b|"
                        r"\b(?:change|changed|growth|grow|grew|increase|decrease|rise|rose|fall|fell|decline|differ|difference|"
                        r"compare|compared|versus|vs|average|trend|why)\b",
                        re.IGNORECASE)


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
    """Lower-cased content words, a plural's "s" dropped, so "assets" names "Asset"."""
    text = re.sub(POSSESSIVE + r"\b", "", text)  # "ACME's" is ACME
    return {without_s(w) for w in tokenize(text)}


def names_column(head: str, asked: set[str], years: set[str]) -> bool:
    """Does the question name this column head? A head with a year is named by that year ("December 31,
    2019" by "2019"); any other by all its words ("Europe", "Q3").

    names_column("December 31, 2019", set(), {"2019"}) -> True; names_column("2018", {"2019"}, {"2019"}) -> False
    """
    head_years = years_in(head)
    if head_years:
        return bool(head_years & years)
    return bool(words_of(head)) and words_of(head) <= asked


def is_lookup(question: str) -> bool:
    """Rule: only a question asking for one value as printed is answered by a cell.
    is_lookup("What were total current assets in 2019?") -> True; is_lookup("How did sales change in 2019?") -> False"""
    if not rules.on("lookup_only"):
        return True
    return not (rules.on("asks_more") and _ASKS_MORE.search(question)) and not calc.asks_calculation(question)


rules.register("cell_read_in_code", "a question naming one row and one column of a table is answered by that cell, read in code",
               "tests/test_cells.py::test_the_cell_named_by_row_and_column_is_read_with_its_row_cited")


@rules.switch("cell_read_in_code", stand_in=None)
def named_cell(question: str, lines: list[Hit]) -> Cell | None:
    """Rule: a question naming one row and one column of a table is answered by that cell, read in code.
    The one cell of the evidence rows that ``question`` names by its row and its column; None when the
    question asks more than a lookup, names no row, no column, two of them, or something else besides."""
    if not is_lookup(question):
        return None
    asked, years = words_of(YEAR_WORDED.sub(" ", question)), set(years_named(question))  # "FY2019" names a year, no word
    found: list[tuple[int, Cell]] = []  # (label words named, cell)
    for number, line in enumerate(lines, 1):
        heading, label, cells, unit = row_parts(line)
        label_words = words_of(label)
        if line.trace.get("kind") != "row" or not label_words or not label_words <= asked:
            continue
        named = [(head, value) for head, value in cells if names_column(head, asked, years)]
        if len(named) != 1:
            continue
        head, value = named[0]
        accounted = label_words | words_of(head) | words_of(heading) | words_of(unit) | (LOOKUP_WORDS if rules.on("lookup_words") else set()) | years
        document = re.sub(r"[^a-z]", "", line.doc_name.lower())
        if rules.on("unaccounted_word") and any(word not in accounted and word not in document and not YEAR_TOKEN.match(word) for word in asked):
            continue  # Rule: a word of the question that neither the cell nor its table nor its document accounts for asks something else
        found.append((len(label_words), Cell(line, number, label, head, value, unit)))
    if not found:
        return None
    most = max(size for size, _ in found)
    best = [cell for size, cell in found if size == most]
    if len({(cell.label.lower(), cell.value) for cell in best}) > 1:
        return None  # two rows fit as well: which one is meant is not ours to guess
    return best[0]


def cell_answer(cell: Cell) -> str:
    """The answer a cell gives, its row cited: "Total current assets, 2019: 16,525 (In millions) [L1]." """
    unit = f" {cell.unit}" if cell.unit else ""
    return f"{cell.label}, {cell.column}: {cell.value}{unit} [L{cell.number}]."
