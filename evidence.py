"""Find the lines in the best pages that answer the question: the evidence shown before any model speaks.

    retriever.search() hits (best pages first)
      -> each page's whole text, rebuilt from its stored chunks
      -> page_lines(): the page cut into lines a person reads as one statement
           prose      one sentence (wrapped lines joined; a short line that ends no sentence is a heading)
           list item  a line that starts with a bullet or an item number
           table row  a label and the figures printed under it, one cell per line in the text layer
                      ("Purchases of PP&E\\n(1,577)\\n(1,373)"), or a Markdown row; read with its column
                      heads ("2018: (1,577) · 2017: (1,373)") and the table's heading above it
      -> how many lines each page shows, in search order: half of those still to show (3 -> 2 + 1)
      -> rankings of the lines of those pages, as for pages:
           keywords   BM25 over those lines (the question's words, numbers, years; a word printed on
                      most of a document's pages, like its company's name, left out)
           meaning    cosine of the question and the line's text, both embedded
         and, when the question asks a textbook measure ("quick ratio"), a third:
           measure    the rows labelled with the line items it is computed from (statements.py)
      -> Reciprocal Rank Fusion of them; each page shows its best lines
      -> each line a Hit whose [start, end) is the line's span on its page (for highlighting)
         and whose text is the line as read (row label, column heads, heading)

Retrieval finds the right page most of the time; the small model then often fails to read the line
that answers from it. Showing the lines themselves, in well under a second, gives the person the answer
whatever the model writes, and lets them check the model's sentence against the very lines it read.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, replace

import numpy as np

import config
import statements
from question import parse_question
from retriever import Hit, Retriever, SparseBM25, page_text, rrf
from text_utils import FIGURE_CELL, is_period_cell, keyword_tokens, sentence_spans

log = logging.getLogger(__name__)

_FILLER_CELL = re.compile(r"^[\s$]*$")
_BULLET = re.compile(r"^\s*(?:[•●▪◦·\-–*]|\(?\d{1,2}[.)]|\(?[a-z][.)])\s+")
_HEADING_MAX_CHARS = 60
LONGEST_LINE = 400  # characters; a longer "sentence" (a run-on list) is cut at its line breaks


@dataclass
class Line:
    """One readable line of a page: its span in the page text, and how it reads with its context."""

    start: int
    end: int
    kind: str  # "sentence", "heading", "item", "row"
    text: str  # as read: a row with its heading and column heads
    label: str = ""  # a row's own label ("Net sales"), without heading or figures


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
        if kinds[i] == "text" and figures_after:  # a label and the figures printed under it: a row
            flush_paragraph()
            end = physical[figures_after[-1]][1]
            figures = [text[physical[f][0] : physical[f][1]].replace(" ", "") for f in figures_after]
            lines.append(Line(s, end, "row", row_text(heading, _joined(cell), figures, years), _joined(cell)))
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
        if paragraph_kind != "item" and not ends_sentence and len(cell) <= _HEADING_MAX_CHARS and len(paragraph) == 1:
            # a short line that ends no sentence stands alone: a heading (or a table's title)
            paragraph.clear()
            lines.append(Line(s, e, "heading", _joined(cell)))
            heading = _joined(cell)
        elif ends_sentence and len(cell) <= _HEADING_MAX_CHARS:  # a paragraph's short last line: the next starts anew
            flush_paragraph()
        i += 1
    flush_paragraph()
    return lines


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
# Ranking the lines


def page_quotas(n: int, pages: int) -> list[int]:
    """How many of the ``n`` lines each page shows, best page first: half of those still to show, rounded up.

    page_quotas(3, 5) -> [2, 1];  page_quotas(10, 5) -> [5, 3, 1, 1]

    The page search is surer than any one line's score (measured: ranking all lines of five pages
    together found the evidence less often than taking the best page's best lines first), so lines
    are chosen within the pages in their search order, the best page giving most.
    """
    quotas = []
    while n > 0 and len(quotas) < pages:
        quotas.append(-(-n // 2))
        n -= quotas[-1]
    return quotas


def fuse_lines(keyword: np.ndarray, meaning: np.ndarray, measure: np.ndarray | None = None) -> np.ndarray:
    """One score per line: Reciprocal Rank Fusion of its keyword rank and its meaning rank. A line sharing
    no word with the question still ranks by meaning: a paraphrase is evidence too. ``measure`` marks the
    rows a measure asked for is computed from (``measure_rows``): a third ranking, in keyword order.

    fuse_lines(np.array([2.0, 0.0]), np.array([0.1, 0.9])) -> both lines tied (each leads one ranking)
    """
    ids = [str(i) for i in range(len(keyword))]
    by_keyword = [ids[i] for i in np.argsort(-keyword, kind="stable") if keyword[i] > 0]
    by_meaning = [ids[i] for i in np.argsort(-meaning, kind="stable")]
    by_measure = [ids[i] for i in np.argsort(-keyword, kind="stable") if measure is not None and measure[i]]
    fused = rrf([by_keyword, by_meaning] + ([by_measure] if by_measure else []))
    return np.array([fused.get(i, 0.0) for i in ids])


def measure_rows(question: str, lines: list[Line]) -> np.ndarray:
    """Rule: a measure's evidence is the statement rows it is computed from ("quick ratio": cash, receivables,
    current liabilities), whatever words the question shares with them.
    For each line, whether it is a row labelled with one of those line items.

    measure_rows("What is the current ratio?", [row "Assets · Total current assets · 2021: 26,291", sentence]) -> [True, False]
    """
    items = statements.measure_items(question)
    return np.array([line.kind == "row" and any(item.fullmatch(line.label) for item in items) for line in lines], dtype=bool)


def keyword_scores(query: str, collections: list[str], texts: list[str], retriever: Retriever) -> np.ndarray:
    """BM25 of each line (``texts``, of documents ``collections``) for the query's words, leaving out, for
    each document, the words printed on most of its pages (its own name, say), which tell no line apart."""
    words = retriever.query_tokens(query, sorted(set(collections)))
    index = SparseBM25([keyword_tokens(t, retriever.language(c)) for c, t in zip(collections, texts)])
    scores = np.zeros(len(texts))
    for collection in set(collections):
        common = retriever.words_on_most_pages(collection, words, config.EVIDENCE_COMMON_SHARE)
        rows = np.array([c == collection for c in collections])
        scores[rows] = index.get_scores([w for w in words if w not in common])[rows]
    return scores


def best_lines(
    question: str, hits: list[Hit], retriever: Retriever, n: int | None = None, pages: int | None = None
) -> list[Hit]:
    """The ``n`` lines of the ``pages`` best-ranked hits that best answer ``question``, best first.

    Each is a Hit on its page: ``text`` is the line as read (a row with its heads), ``[start, end)``
    its span in the page text (so a preview highlights exactly it), ``score`` its fused score, and
    ``trace`` says why: the page's search trace, the line's keyword and meaning scores, the page's rank.
    """
    n = n or config.EVIDENCE_LINES
    pages = pages or config.EVIDENCE_PAGES
    query = parse_question(question).query
    quotas = page_quotas(n, pages)
    candidates: list[tuple[Hit, Line, int]] = []  # the lines of the pages that show some, with their page's rank
    shown_pages: list[tuple[int, int]] = []  # (page rank, lines it shows)
    for rank, hit in enumerate(hits[:pages], 1):
        if len(shown_pages) == len(quotas):
            break
        chunks = retriever.page_passages(hit.collection, hit.page) or [hit]
        text = page_text(chunks)
        lines = [line for line in page_lines(text)  # a heading names, it states nothing
                 if line.kind != "heading" and len(line.text) >= config.EVIDENCE_MIN_CHARS]
        if lines:  # a page with nothing to show passes its share on to the next
            shown_pages.append((rank, quotas[len(shown_pages)]))
            candidates += [(replace(hit, start=line.start, end=line.end, text=line.text), line, rank) for line in lines]
    if not candidates:
        return []
    texts = [hit.text for hit, _, _ in candidates]
    keyword = keyword_scores(query, [hit.collection for hit, _, _ in candidates], texts, retriever)
    meaning = retriever.similarities(query, texts, [hit.collection for hit, _, _ in candidates])
    fused = fuse_lines(keyword, meaning, measure_rows(question, [line for _, line, _ in candidates]))
    ranked = np.argsort(-fused, kind="stable")
    chosen = [i for page_rank, quota in shown_pages for i in [i for i in ranked if candidates[i][2] == page_rank][:quota]]
    # fewer pages than shares (a one-page document): the pages read show more rather than fewer lines in all
    chosen += [i for i in ranked if i not in chosen][: n - len(chosen)]
    chosen.sort(key=lambda i: (candidates[i][2], -fused[i]))  # best page first, each page's best line first
    shown = []
    for i in chosen:
        hit, line, page_rank = candidates[i]
        hit.id = f"{hit.collection}:{hit.page}:{line.start}"
        hit.score = float(fused[i])
        hit.ocr_boxes = _boxes_within(retriever, hit, line)
        # the page's search trace stays; the line's own signals join it
        hit.trace = {**hit.trace, "line_keyword": round(float(keyword[i]), 3), "line_meaning": round(float(meaning[i]), 3),
                     "page_rank": page_rank, "kind": line.kind}
        shown.append(hit)
    return shown


def _boxes_within(retriever: Retriever, hit: Hit, line: Line) -> str:
    """The OCR line boxes of the chunks the line lies in (OCR'd pages highlight by box, not by offset)."""
    boxes = [box for c in retriever.page_passages(hit.collection, hit.page)
             if c.ocr_boxes and c.start < line.end and c.end > line.start for box in json.loads(c.ocr_boxes)]
    return json.dumps(boxes) if boxes else ""


def span_text(line: Hit, retriever: Retriever) -> str:
    """The line as its page prints it (the span ``[start, end)`` of the page text), without the heads added to read it."""
    return page_text(retriever.page_passages(line.collection, line.page))[line.start : line.end]
