"""Choose which text of the ranked pages the model reads.

    ranked pages (retriever.load_pages of the search's hits, best first: whole text, chunks, spans)
      -> units: the page's sentences and lines (a table row is one line, so one unit)
      -> each unit scored by the question's words it holds, rarer words weighing more,
         plus a bonus inside the chunk the retriever found closest in meaning
      -> one passage per page, in rank order, filled within CONTEXT_CHARS:
           a short page whole; else first a window around each page's best unit,
           then more windows around the next best units anywhere, while budget lasts;
           a table row brings its table's header row along (the column names say which year)
      -> one Hit per page whose text is its windows joined by " … ", and where in it the evidence lines
         stand (``trace["marked"]``: reading.py marks them for the model)

Retrieval finds the right page far more often than the single 800-character chunk it
keeps holds the answer; reading a page's best sentences instead of its best chunk puts
the evidence in front of the model within the same budget. Deliberately simple: units are
scored by words, not embedded one by one, which would add seconds to the first token.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import config
from pages import Page
from records import Hit
from text_utils import is_table_row, tokenize

GAP = " … "  # between two windows of one page: the model must not read them as one sentence


def term_weights(question: str, unit_texts: list[str]) -> dict[str, float]:
    """Question words weighted by rarity among the candidate units (idf), so "net" counts less than "inventories".

    term_weights("net inventories", ["net sales", "net income", "inventories rose"]) -> {"net": 0.69, "inventories": 1.1}
    """
    unit_words = [set(tokenize(t)) for t in unit_texts]
    n = len(unit_words)
    return {t: math.log((n + 1) / (1 + sum(t in w for w in unit_words))) + 0.1 for t in set(tokenize(question))}


def score_units(page: Page, weights: dict[str, float]) -> list[float]:
    """Sum of the weights of the question words each unit holds, plus a bonus inside the retriever's chunk."""
    hit = page.hit
    scores = []
    for s, e in page.spans:
        words = set(tokenize(page.text[s:e]))
        score = sum(w for t, w in weights.items() if t in words)
        if hit.start <= s and e <= hit.end:
            score += config.CONTEXT_BEST_CHUNK_BONUS * max(weights.values(), default=0.0)
        scores.append(score)
    return scores


def window(page: Page, seed: int, size: int) -> list[int]:
    """Unit indices of a window of about ``size`` characters around unit ``seed``: one unit before,
    then following units (a sentence is more often explained by what follows it), then earlier ones."""
    units = page.spans
    chosen = [seed]
    if seed > 0 and units[seed][1] - units[seed - 1][0] <= size:
        chosen.append(seed - 1)
    nxt = seed + 1
    while nxt < len(units) and units[nxt][1] - units[min(chosen)][0] <= size:
        chosen.append(nxt)
        nxt += 1
    prev = min(chosen) - 1
    while prev >= 0 and units[max(chosen)][1] - units[prev][0] <= size:
        chosen.append(prev)
        prev -= 1
    return sorted(chosen)


def with_table_header(page: Page, chosen: set[int]) -> set[int]:
    """Add the header row of every Markdown table a chosen row belongs to (the first row of its block)."""
    is_row = [is_table_row(page.text[s:e]) for s, e in page.spans]
    extra = set()
    for i in chosen:
        if is_row[i]:
            head = i
            while head > 0 and is_row[head - 1]:
                head -= 1
            extra.add(head)
    return chosen | extra


def span_chars(page: Page, chosen: set[int]) -> int:
    return sum(page.spans[i][1] - page.spans[i][0] + 1 for i in chosen)


def choose_context(question: str, pages: list[Page], budget: int | None = None, marked: list[Hit] = ()) -> list[Hit]:
    """One passage per ranked page holding the page's best sentences, all within ``budget`` characters; each
    line of ``marked`` (the evidence lines) that a passage holds whole is kept in its ``trace["marked"]``."""
    budget = budget or config.CONTEXT_CHARS
    weights = term_weights(question, [p.text[s:e] for p in pages for s, e in p.spans])
    chosen: list[set[int]] = []
    scores = [score_units(page, weights) for page in pages]
    for page in pages:
        short = len(page.text) <= config.CONTEXT_WHOLE_PAGE_CHARS
        chosen.append(set(range(len(page.spans))) if short else set())
    used = sum(span_chars(p, c) for p, c in zip(pages, chosen))
    # every page first gets a window around its best unit, best-ranked page first
    seeds = [(p_i, max(range(len(p.spans)), key=lambda u: scores[p_i][u])) for p_i, p in enumerate(pages) if p.spans and not chosen[p_i]]
    # then the best units anywhere, by score (a page's rank breaks ties)
    rest = sorted(((scores[p_i][u], -p_i, u) for p_i, p in enumerate(pages) for u in range(len(p.spans)) if scores[p_i][u] > 0), reverse=True)
    for p_i, u in seeds + [(-neg, u) for _, neg, u in rest]:
        page = pages[p_i]
        if u in chosen[p_i]:
            continue
        grown = with_table_header(page, chosen[p_i] | set(window(page, u, config.CONTEXT_WINDOW_CHARS)))
        cost = span_chars(page, grown) - span_chars(page, chosen[p_i])
        if used + cost > budget:
            continue
        chosen[p_i], used = grown, used + cost
    return [passage(page, units, marked) for page, units in zip(pages, chosen) if units]


def passage(page: Page, chosen: set[int], marked: list[Hit] = ()) -> Hit:
    """The chosen units of a page as one Hit: runs of adjacent units joined, runs separated by GAP; the
    ``marked`` lines of this page that lie whole in a run, as (start, end) in the passage's text."""
    runs: list[list[int]] = []
    for i in sorted(chosen):
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    spans = [(page.spans[r[0]][0], page.spans[r[-1]][1]) for r in runs]
    text = GAP.join(page.text[s:e] for s, e in spans)
    start, end = spans[0][0], spans[-1][1]
    boxes = [box for c in page.chunks if c.ocr_boxes and c.start < end and c.end > start for box in json.loads(c.ocr_boxes)]
    hit = replace(page.hit, text=text, start=start, end=end, ocr_boxes=json.dumps(boxes) if boxes else "")
    if marks := marks_in(page, spans, marked):
        hit.trace = {**hit.trace, "marked": marks}
    return hit


def marks_in(page: Page, spans: list[tuple[int, int]], lines: list[Hit]) -> list[tuple[int, int]]:
    """Where each of ``lines`` on ``page`` stands in the passage made of the page's ``spans`` joined by GAP:
    (start, end) in the passage's text, in reading order; a line not whole inside one span is left out."""
    marks, offset = [], 0
    for s, e in spans:
        marks += [(offset + line.start - s, offset + line.end - s) for line in lines
                  if (line.collection, line.page) == (page.hit.collection, page.hit.page) and s <= line.start < line.end <= e]
        offset += e - s + len(GAP)
    return sorted(set(marks))

