"""One page as the answer path reads it: its whole text, its chunks, its lines and its sentence spans.

    stored chunks -> page_text()   the page's text, each chunk placed at its offset
    hits          -> Page          built once per question by ``Retriever.load_pages`` and handed to the
                                   evidence lines (``lines``), the model's context (``spans``) and a
                                   domain's worked-out answer (``text``)
    page text     -> page_lines()  the lines a person reads as one statement:
      prose      one sentence (wrapped lines joined; a short line that ends no sentence is a heading, unless
                 the next line carries it on in lower case: prose wrapped in a narrow column, ``carries_on``;
                 a sentence's last line above a page or section number stays prose, ``ends_wrapped_sentence``)
      list item  a line that starts with a bullet or an item number
      table row  a label and the figures printed under it, one cell per line in the text layer
                 ("Purchases of PP&E\\n(1,577)\\n(1,373)"), or a Markdown row; read with its column
                 heads ("2018: (1,577) · 2017: (1,373)") and the table's heading above it, its leader dots dropped
                 (``row_label``: "Total assets ......" reads "Total assets")
    -> [Line(start, end, kind, text, label)]: the span on the page (for highlighting) and the line as read
    row line      -> row_cells()   its (column head, value) cells read back (the checker, cells.py)
    page, offset  -> unit_above()  the unit its table is printed in ("(In millions)")

Plain ``re`` on the page text; nothing here knows the store or a model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import rules
from records import Hit, Line
from text_utils import FIGURE_CELL, is_period_cell, sentence_spans

_FILLER_CELL = re.compile(r"^[\s$]*$")
_BULLET = re.compile(r"^\s*(?:[•●▪◦·\-–*]|\(?\d{1,2}[.)]|\(?[a-z][.)])\s+")
HEADING_MAX_CHARS = 60
LONGEST_LINE = 400  # characters; a longer "sentence" (a run-on list) is cut at its line breaks


def _physical_lines(text: str) -> list[tuple[int, int]]:
    """(start, end) of each non-blank line, whitespace trimmed."""
    spans = []
    for match in re.finditer(r"[^\n]+", text):
        stripped = match.group().strip()
        if stripped:
            start = match.start() + match.group().index(stripped)
            spans.append((start, start + len(stripped)))
    return spans


def _cell_kind(cell: str) -> str:
    """year | figure | filler | text"""
    if is_period_cell(cell):
        return "year"
    if FIGURE_CELL.match(cell):
        return "figure"
    if _FILLER_CELL.match(cell):
        return "filler"
    return "text"


def _sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Sentence spans of one paragraph ``text[start:end]``; an over-long one is cut at its line breaks."""
    # a sentence ends at . ! ? (with a closing quote or bracket) before a space; a line break is a space
    spans = sentence_spans(text, start, end, marks=".!?", kept=r"[\"'”’)\]]*", between=r"(?=\s)", line_breaks=False,
                           trim=True)
    out = []
    for s, e in spans:
        if e - s <= LONGEST_LINE:
            out.append((s, e))
        else:
            out += [(s + a, s + b) for a, b in _physical_lines(text[s:e])]
    return out


def _joined(text: str) -> str:
    """Wrapped lines read as one: line breaks and runs of spaces become single spaces."""
    return " ".join(text.split())


_LEADER = re.compile(r"(?:\s*\.){3,}\s*")


rules.register("leader_dots", "a row's leader dots lead the eye to its figures and say nothing, so its label is read without them",
               "tests/test_evidence.py::test_a_row_is_read_without_its_leader_dots",
               pays_on="docs/experiments/2026-11-28-rules-that-pay.md: FinanceBench 88 (fitted), Adobe's measure read in code "
                       "names \"Net cash provided by operating activities\"; switched off, with 57 leader dots; "
                       "docs/experiments/2026-11-27-fewer-words-to-read.md: prompts")


def row_label(cell: str) -> str:
    """Rule: a row's leader dots lead the eye to its figures and say nothing, so its label is read without them.

    row_label("Total current liabilities.......... ") -> "Total current liabilities"
    """
    if not rules.on("leader_dots"):
        return _joined(cell).strip()
    return _LEADER.sub(" ", _joined(cell)).strip()


def page_lines(text: str) -> list[Line]:
    """The page cut into lines a person reads as one statement; see the module docstring.

    page_lines("Cash Flows\\n2018\\n2017\\nCapex\\n(1,577)\\n(1,373)") ->
      [Line(kind="heading", text="Cash Flows"), Line(kind="row", text="Cash Flows · Capex · 2018: (1,577) · 2017: (1,373)")]
    """
    physical = _physical_lines(text)
    kinds = [_cell_kind(text[s:e]) for s, e in physical]
    lines: list[Line] = []
    years: list[str] = []  # the column heads now in force
    heading = ""  # the last heading seen: a table's title, a section's name
    paragraph: list[tuple[int, int]] = []  # the physical lines of the prose or list item being read
    paragraph_kind = "sentence"

    def flush_paragraph() -> None:
        nonlocal paragraph_kind
        if paragraph:
            for s, e in _sentences(text, paragraph[0][0], paragraph[-1][1]):
                lines.append(Line(s, e, paragraph_kind, _joined(text[s:e])))
        paragraph.clear()
        paragraph_kind = "sentence"

    i = 0
    while i < len(physical):
        s, e = physical[i]
        cell = text[s:e]
        if kinds[i] == "year":  # a run of years alone heads the columns below it
            flush_paragraph()
            run = []
            while i < len(physical) and kinds[i] in ("year", "filler"):
                if kinds[i] == "year":
                    run.append(text[physical[i][0] : physical[i][1]])
                i += 1
            years = run if len(run) >= 2 else years
            continue
        figures_after = []
        j = i + 1
        while j < len(physical) and kinds[j] in ("figure", "filler"):
            if kinds[j] == "figure":
                figures_after.append(j)
            j += 1
        if kinds[i] == "text" and figures_after and ends_wrapped_sentence(cell, bool(paragraph)):
            paragraph.append((s, e))  # the sentence's last line; the number under it numbers the page or section
            flush_paragraph()
            i = j
            continue
        if kinds[i] == "text" and figures_after:  # a label and the figures printed under it: a row
            flush_paragraph()
            end = physical[figures_after[-1]][1]
            figures = [text[physical[f][0] : physical[f][1]].replace(" ", "") for f in figures_after]
            label = row_label(cell)
            lines.append(Line(s, end, "row", row_text(heading, label, figures, years), label))
            i = j
            continue
        if cell.startswith("|") and cell.endswith("|"):  # a Markdown table row (EXTRACTOR=layout)
            flush_paragraph()
            first_row = i == 0 or not text[physical[i - 1][0]].startswith("|")  # the column heads: they name, they state nothing
            label = cell.strip("|").split("|")[0].strip()
            lines.append(Line(s, e, "heading" if first_row else "row", _markdown_row_text(text, physical, i, heading), label))
            i += 1
            continue
        if kinds[i] in ("figure", "filler"):  # figures with no label above them: part of nothing
            i += 1
            continue
        if _BULLET.match(cell):  # a list item starts here, whatever came before
            flush_paragraph()
            paragraph_kind = "item"
        paragraph.append((s, e))
        ends_sentence = bool(re.search(r"[.!?:;][\"'”’)\]]*$", cell))
        if (paragraph_kind != "item" and not ends_sentence and len(cell) <= HEADING_MAX_CHARS and len(paragraph) == 1
                and not carries_on(text, physical, kinds, i)):
            # a short line that ends no sentence stands alone: a heading (or a table's title)
            paragraph.clear()
            lines.append(Line(s, e, "heading", _joined(cell)))
            # a unit line under a table's title ("(in thousands)") adds to that title rather than replacing it
            heading = f"{heading} {_joined(cell)}" if heading and _UNIT.fullmatch(_joined(cell)) else _joined(cell)
        elif ends_sentence and len(cell) <= HEADING_MAX_CHARS:  # a paragraph's short last line: the next starts anew
            flush_paragraph()
        i += 1
    flush_paragraph()
    return lines


rules.register("wrapped_line_carries_on", "a short line whose next line begins in lower case carries its sentence on: it is "
               "prose wrapped in a narrow column, not a heading", "tests/test_evidence.py::test_rule_a_short_line_carried_on_in_lower_case_is_prose_not_a_heading",
               pays_on="docs/experiments/2026-11-28-lines-as-the-page-prints-them.md: with short_lines_read_as_one, fresh4_mm (held out) "
                       "overlap@3 9 -> 14 of 22; mmlongbench (fitted) 3 -> 7 of 25")

_CARRIED_ON = re.compile(r"^[\"'“‘(\[]*[a-zà-ÿ]")


def carries_on(text: str, physical: list[tuple[int, int]], kinds: list[str], i: int) -> bool:
    """Rule: a short line whose next line begins in lower case carries its sentence on: it is prose wrapped in a
    narrow column, not a heading. Line ``i`` of the page's ``physical`` lines (``kinds`` as ``_cell_kind`` reads them).

    In two- and three-column pages every line is short; read as headings, whole paragraphs ("Hamilton County /
    covers approximately 538 square miles and / elevations range ...") were dropped from the evidence lines.
    """
    if not rules.on("wrapped_line_carries_on") or i + 1 >= len(physical) or kinds[i + 1] != "text":
        return False
    after = _joined(text[physical[i + 1][0] : physical[i + 1][1]])
    return bool(_CARRIED_ON.match(after)) and not _UNIT.fullmatch(after)  # "(in millions)" under a table's title is its unit


rules.register("sentence_end_no_row", "a line that carries a sentence on and ends it is prose, not a row's label: a number printed "
               "under it numbers the page or the section", "tests/test_evidence.py::test_rule_a_sentence_ended_above_a_page_number_is_prose_not_a_row",
               pays_on="docs/experiments/2026-11-29-sentences-above-page-numbers.md: a reading: 2,540 of the 32 filings' rows and 129 of "
                       "the mmlongbench store's were a sentence's end and a page or section number; states@3 fresh6-fresh11 141 -> 142 "
                       "of 216 (design), the issue's sets 98 -> 98 of 177, fresh13 (held out) 20 -> 20 of 36; eval_retrieval "
                       "mmlongbench evidence@3 0.395 -> 0.368 of 38")

_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*$")  # not ":" or ";", which end a row's label as often as a sentence


def ends_wrapped_sentence(cell: str, in_paragraph: bool) -> bool:
    """Rule: a line that carries a sentence on and ends it is prose, not a row's label: a number printed under it
    numbers the page or the section. ``cell`` carries on when it begins in lower case or a paragraph is open above it.

    In two-column papers and manuals the last line of a paragraph ("sourced under the Apache-2.0 license.") stands
    above a section's number ("6") or the page's; read as a row, the sentence lost its first half.

    ends_wrapped_sentence("sourced under the Apache-2.0 license.", True) -> True
    ends_wrapped_sentence("Total current assets", True) -> False
    """
    if not rules.on("sentence_end_no_row") or not _SENTENCE_END.search(cell):
        return False
    return in_paragraph or bool(_CARRIED_ON.match(cell))


# A table's unit, as its heading prints it: "(In millions, except per share data)", "(Rs. in lakhs)", "$ in thousands".
_UNIT = re.compile(r"\(?(?<![A-Za-z])(?:amounts |expressed |figures )?(?:(?:[$€£¥₹]|rs\.?|inr|usd|eur|us\s?\$)\s*)?(?:in\s+)?"
                   r"(?:millions|thousands|billions|lakhs|crores)\b(?:[^)\n]{0,60}\))?", re.IGNORECASE)
_UNIT_BACK_CHARS = 3000  # a unit this far above a line heads another table
_UNIT_LEAD_CHARS = 30  # "(U.S. dollars in millions)": words between the bracket and "in millions"


# registered only: the unit pattern's own lookbehind reads its first word whole; switching it off would need a second pattern
rules.register("unit_read_whole", 'a unit is read whole, from the word it begins with and the bracket that opens it ("(Dollars in '
               'millions)", never "rs in millions)")', "tests/test_evidence.py::test_a_unit_is_read_whole_from_the_bracket_that_opens_it",
               switchable=False,
               pays_on="docs/experiments/2026-11-27-answers-on-fresh-questions.md: a behaviour: \"(Dollars in millions)\" reached "
                       "the model and the screen as \"rs in millions)\"; read whole since (not switchable)")


def unit_above(text: str, start: int) -> str:
    """The unit the table a line stands in is printed in: the last unit phrase above it on the page ("" if none).

    unit_above("Balance Sheets\n(In millions)\nCash\n5\n6", 27) -> "(In millions)"

    Rule: a unit is read whole, from the word it begins with and the bracket that opens it
    ("(Dollars in millions)", never "rs in millions)").
    """
    found = [m for m in _UNIT.finditer(text, max(0, start - _UNIT_BACK_CHARS), start)
             if re.search(r"\bin\b|^\(|[$€£¥₹]", m.group(), re.IGNORECASE)]  # "millions of users" is no unit
    if not found:
        return ""
    begins, ends = found[-1].span()
    opening = text.rfind("(", max(0, begins - _UNIT_LEAD_CHARS), begins)
    if opening != -1 and not re.search(r"[()\n]", text[opening + 1:begins]):  # "(Dollars " opens "in millions)"
        begins = opening
    return " ".join(text[begins:ends].split())


def row_text(heading: str, label: str, figures: list[str], years: list[str]) -> str:
    """A table row as it reads: its heading, its label, each figure under its column head.

    row_text("Cash Flows", "Capex", ["(1,577)", "(1,373)"], ["2018", "2017"]) -> "Cash Flows · Capex · 2018: (1,577) · 2017: (1,373)"
    """
    figures = [f for f in figures if f != "$"]
    if years and len(years) == len(figures):
        cells = [f"{year}: {figure}" for year, figure in zip(years, figures)]
    else:
        cells = figures
    return " · ".join(([heading] if heading else []) + [label] + cells)


_READ_CELL = re.compile(r"^(?P<head>[^:]{1,40}):\s(?P<value>.+)$")


def row_cells(text: str) -> list[tuple[str, str]]:
    """The (column head, value) cells of a line read as a row, as ``row_text`` writes them ([] for prose).

    row_cells("Cash Flows · Capex · 2018: (1,577) · 2017: (1,373)") -> [("2018", "(1,577)"), ("2017", "(1,373)")]
    """
    return [(m["head"].strip(), m["value"].strip()) for part in text.split(" · ") if (m := _READ_CELL.match(part))]


def _markdown_row_text(text: str, physical: list[tuple[int, int]], i: int, heading: str) -> str:
    """A Markdown row read under its table's first row (the column heads)."""
    head = i
    while head > 0 and text[physical[head - 1][0]].startswith("|"):
        head -= 1
    cells = [c.strip() for c in text[physical[i][0] : physical[i][1]].strip("|").split("|")]
    if head == i:
        return " · ".join(([heading] if heading else []) + [c for c in cells if c])
    heads = [c.strip() for c in text[physical[head][0] : physical[head][1]].strip("|").split("|")]
    label, rest = cells[0], cells[1:]
    pairs = [f"{h}: {c}" if h else c for h, c in zip(heads[1:], rest) if c and not set(c) <= set("-: ")]
    return " · ".join(([heading] if heading else []) + [label] + pairs)


# -----------------------------------------------------------------------------
# A page, loaded once


def page_text(chunks: list[Hit]) -> str:
    """The page's text rebuilt from its chunks, each placed at its offset (gaps become spaces).

    page_text([Hit(start=0, end=5, text="A a. "...), Hit(start=5, end=9, text="B b.")]) -> "A a. B b."
    """
    chars = [" "] * max((c.end for c in chunks), default=0)
    for c in chunks:
        chars[c.start : c.end] = c.text
    return "".join(chars)


@dataclass
class Page:
    """One page as the answer path reads it, loaded once per question (``Retriever.load_pages``): the hit
    that ranked it, its whole text rebuilt from its chunks, the chunks (for OCR boxes), and, read on first
    use, its lines (what the evidence shows) and its sentence spans (what context.py windows)."""

    hit: Hit
    text: str
    chunks: list[Hit]

    @cached_property
    def lines(self) -> list[Line]:
        return page_lines(self.text)

    @cached_property
    def spans(self) -> list[tuple[int, int]]:
        return sentence_spans(self.text)
