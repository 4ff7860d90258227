"""Find the lines in the best pages that answer the question: the evidence shown before any model speaks.

    the loaded pages (retriever.load_pages, best first), each cut into lines (pages.py); a line
    printed twice is read once
      -> how many lines each page shows, in search order: half of those still to show (3 -> 2 + 1);
         with ``more``, the further lines the model reads, chosen the same way after the first ``n``
      -> rankings of the lines of those pages, as for pages (retriever.line_scores, one visit):
           keywords   BM25 over those lines (the question's words, numbers, years; a word printed on
                      most of a document's pages, like its company's name, left out)
           meaning    cosine of the question and the line's text, both embedded
         and, when a domain marks some of the lines (domains.line_ranking: a measure's rows), a third:
           marked     those lines, in keyword order
      -> Reciprocal Rank Fusion of them; each page shows its best lines
      -> each line a Hit whose [start, end) is the line's span on its page (for highlighting)
         and whose text is the line as read (heading, row label, column heads, the table's unit);
         its trace keeps its kind, a row's label and a sentence's sentence before (for the prompt)

Retrieval finds the right page most of the time; the small model then often fails to read the line
that answers from it. Showing the lines themselves, in well under a second, gives the person the answer
whatever the model writes, and lets them check the model's sentence against the very lines it read.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import numpy as np

import config
import domains
from pages import Line, Page, page_text, unit_above
from question import ParsedQuestion, parse_question
from retriever import Hit, Retriever, rrf

log = logging.getLogger(__name__)

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


def fuse_lines(keyword: np.ndarray, meaning: np.ndarray, marked: np.ndarray | None = None) -> np.ndarray:
    """One score per line: Reciprocal Rank Fusion of its keyword rank and its meaning rank. A line sharing
    no word with the question still ranks by meaning: a paraphrase is evidence too. ``marked`` says which
    lines a domain points at (``domains.line_ranking``): a third ranking, in keyword order.

    fuse_lines(np.array([2.0, 0.0]), np.array([0.1, 0.9])) -> both lines tied (each leads one ranking)
    """
    ids = [str(i) for i in range(len(keyword))]
    by_keyword = [ids[i] for i in np.argsort(-keyword, kind="stable") if keyword[i] > 0]
    by_meaning = [ids[i] for i in np.argsort(-meaning, kind="stable")]
    by_mark = [ids[i] for i in np.argsort(-keyword, kind="stable") if marked is not None and marked[i]]
    fused = rrf([by_keyword, by_meaning] + ([by_mark] if by_mark else []))
    return np.array([fused.get(i, 0.0) for i in ids])


def best_lines(question: str | ParsedQuestion, pages: list[Page], retriever: Retriever, n: int | None = None,
               max_pages: int | None = None, more: int = 0) -> list[Hit]:
    """The ``n`` lines of the ``max_pages`` best-ranked ``pages`` that best answer ``question``, best first;
    then, given ``more``, that many further lines, chosen the same way as if ``n + more`` were asked (the
    lines the model reads: the first ``n`` are those shown first, so [L1]..[Ln] are on screen).

    ``pages`` are the search's hits loaded once (``retriever.load_pages``); ``question`` the text or its
    ``ParsedQuestion``. Each line is a Hit on its page: ``text`` is the line as read (a row with its heads),
    ``[start, end)`` its span in the page text (so a preview highlights exactly it), ``score`` its fused
    score, and ``trace`` says why: the page's search trace, the line's keyword and meaning scores, the
    page's rank.
    """
    n = n or config.EVIDENCE_LINES
    max_pages = max_pages or config.EVIDENCE_PAGES
    parsed = question if isinstance(question, ParsedQuestion) else parse_question(question)
    quotas = page_quotas(n + more, max_pages)
    candidates: list[tuple[Hit, Line, int, Page]] = []  # the lines of the pages that show some, with their page's rank
    shown_pages: list[tuple[int, int]] = []  # (page rank, lines it shows)
    said: set[str] = set()
    for rank, page in enumerate(pages[:max_pages], 1):
        if len(shown_pages) == len(quotas):
            break
        lines = [line for line in page.lines  # a heading names, it states nothing
                 if line.kind != "heading" and len(line.text) >= config.EVIDENCE_MIN_CHARS]
        if lines:  # a page with nothing to show passes its share on to the next
            shown_pages.append((rank, quotas[len(shown_pages)]))
            candidates += [(replace(page.hit, start=line.start, end=line.end, text=line.text), line, rank, page) for line in lines
                           if line.text not in said and not said.add(line.text)]  # a line printed twice is read once
    if not candidates:
        return []
    texts = [hit.text for hit, *_ in candidates]
    keyword, meaning = retriever.line_scores(parsed.query, texts, [hit.collection for hit, *_ in candidates])
    fused = fuse_lines(keyword, meaning, domains.line_ranking(parsed.text, [line for _, line, *_ in candidates]))
    ranked = np.argsort(-fused, kind="stable")
    first = _chosen(ranked, [rank for rank, _ in shown_pages], page_quotas(n, max_pages), [c[2] for c in candidates], n, [])
    chosen = first + _chosen(ranked, [rank for rank, _ in shown_pages], quotas, [c[2] for c in candidates], n + more, first)[: more]
    shown = []
    for i in chosen:
        hit, line, page_rank, page = candidates[i]
        hit.id = f"{hit.collection}:{hit.page}:{line.start}"
        hit.score = float(fused[i])
        hit.ocr_boxes = _boxes_within(page, line)
        if line.kind == "row" and (unit := unit_above(page.text, line.start)) and unit not in hit.text:
            hit.text += f" · {unit}"  # a figure read alone needs its unit
        # the page's search trace stays; the line's own signals join it
        hit.trace = {**hit.trace, "line_keyword": round(float(keyword[i]), 3), "line_meaning": round(float(meaning[i]), 3),
                     "page_rank": page_rank, "kind": line.kind, "label": line.label,
                     "before": sentence_before(page, line)}
        shown.append(hit)
    return shown


def sentence_before(page: Page, line: Line) -> str:
    """The sentence just before a prose line on its page, what a reader of that one line needs to follow
    it ("It" of "It rose 5%."); "" for a row, a heading or the page's first sentence."""
    if line.kind not in ("sentence", "item"):
        return ""
    before = [other for other in page.lines if other.end <= line.start]
    return before[-1].text if before and before[-1].kind in ("sentence", "item") else ""


def _chosen(ranked: np.ndarray, page_ranks: list[int], quotas: list[int], line_pages: list[int], n: int,
            taken: list[int]) -> list[int]:
    """Which lines (indices into ``line_pages``, the page rank of each line) ``quotas`` pick from the pages
    with some to show (``page_ranks``, best first), leaving out those ``taken`` already: each page its
    share of its best lines by ``ranked``, best page first, each page's best line first."""
    chosen = [i for page_rank, quota in zip(page_ranks, quotas)
              for i in [i for i in ranked if line_pages[i] == page_rank][:quota]]
    # fewer pages than shares (a one-page document): the pages read show more rather than fewer lines in all
    chosen += [i for i in ranked if i not in chosen][: n - len(chosen)]
    position = {i: p for p, i in enumerate(ranked)}
    chosen.sort(key=lambda i: (line_pages[i], position[i]))
    return [i for i in chosen if i not in taken]


def _boxes_within(page: Page, line: Line) -> str:
    """The OCR line boxes of the chunks the line lies in (OCR'd pages highlight by box, not by offset)."""
    boxes = [box for c in page.chunks if c.ocr_boxes and c.start < line.end and c.end > line.start for box in json.loads(c.ocr_boxes)]
    return json.dumps(boxes) if boxes else ""


def span_text(line: Hit, retriever: Retriever) -> str:
    """The line as its page prints it (the span ``[start, end)`` of the page text), without the heads added to read it."""
    return page_text(retriever.page_passages(line.collection, line.page))[line.start : line.end]
