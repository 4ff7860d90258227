"""Find the lines in the best pages that answer the question: the evidence shown before any model speaks.

    the loaded pages (retriever.load_pages, best first), each cut into lines (pages.py); a heading is
    no evidence, but a run of short lines standing alone (a cover page) is read as one line (readable_lines);
    a line printed twice is read once
      -> the order the pages show lines in: search order, except that a prose page none of whose lines
         holds a word of the question telling pages apart shows after the others (page_order)
      -> how many lines each page shows, in that order: half of those still to show (3 -> 2 + 1);
         with ``more``, the further lines the model reads, chosen the same way after the first ``n``
      -> rankings of the lines of the pages that show some, as for pages (retriever.line_scores, one visit):
           keywords   BM25 over those lines (the question's words, numbers, years; a word printed on
                      most of a document's pages, or a name the question gives the document, left out)
           meaning    cosine of the question and the line's text, both embedded (only the lines holding a word
                      asked, or all when none does: retriever.meaning_read; the rest rank last)
         and, when a domain marks some of the lines (domains.line_ranking: a measure's rows), a third:
           marked     those lines, in keyword order
         and, when the question asks a quantity or a date (ParsedQuestion.answer_kind), another:
           fitting    the lines holding a word asked that can give that kind (a figure, a date), in keyword order
         and, with a RERANKER set, its order (rerankers.py)
      -> Reciprocal Rank Fusion of them
      -> each page shows its best lines; the best line of all leads, wherever it stands, unless a domain's
         hint or the page the question names led the search to its best page (best_line_leading)
      -> each line a Hit whose [start, end) is the line's span on its page (for highlighting)
         and whose text is the line as read (heading, row label, column heads, the table's unit);
         its trace keeps its kind and a row's label

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
import rerankers
import rules
from pages import HEADING_MAX_CHARS, LONGEST_LINE, Page, page_text, unit_above
from question import ParsedQuestion, parse_question
from records import Hit, Line
from retriever import Retriever, rrf
from text_utils import YEAR_TOKEN, keyword_tokens, months_in, numbers_in, years_in

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


def fuse_lines(keyword: np.ndarray, meaning: np.ndarray, marked: np.ndarray | None = None,
               fitting: np.ndarray | None = None) -> np.ndarray:
    """One score per line: Reciprocal Rank Fusion of its keyword rank and its meaning rank (read for the lines that
    share a word with the question, or for all when none does: retriever.meaning_read). ``marked`` says which
    lines a domain points at (``domains.line_ranking``), ``fitting`` which can give the kind of answer asked
    (``gives_kind_asked``): each a further ranking, in keyword order.

    fuse_lines(np.array([2.0, 0.0]), np.array([0.1, 0.9])) -> both lines tied (each leads one ranking)
    """
    ids = [str(i) for i in range(len(keyword))]
    by_keyword = [ids[i] for i in np.argsort(-keyword, kind="stable") if keyword[i] > 0]
    by_meaning = [ids[i] for i in np.argsort(-meaning, kind="stable")]
    further = [[ids[i] for i in np.argsort(-keyword, kind="stable") if chosen[i]] for chosen in (marked, fitting) if chosen is not None]
    fused = rrf([by_keyword, by_meaning] + [ranking for ranking in further if ranking])
    return np.array([fused.get(i, 0.0) for i in ids])


rules.register("kind_asked_first", "a line that holds a word the question asks about and can give the kind of answer asked "
               "(a figure for a quantity, a date for when) ranks above one that cannot",
               "tests/test_evidence.py::test_rule_a_line_that_can_give_the_kind_of_answer_asked_ranks_above_one_that_cannot",
               pays_on="docs/experiments/2026-11-28-the-line-that-answers-first.md: states@1 FinanceBench 28 -> 29 of 63 (fitted), fresh3 15 -> 16 of 30 (held out); mmlongbench states@3 3 -> 2 of 25")


def gives_kind_asked(kind: str, text: str) -> bool:
    """Rule: a line that holds a word the question asks about and can give the kind of answer asked (a figure for a
    quantity, a date for when) ranks above one that cannot. Whether ``text`` prints an answer of that ``kind``
    (ParsedQuestion.answer_kind): a figure that is no year, or a year or month.

    gives_kind_asked("quantity", "Revenue was $2.41 billion in 2022.") -> True
    gives_kind_asked("quantity", "Acme had a record fiscal 2022.") -> False
    """
    if kind == "quantity":
        return any(not YEAR_TOKEN.match(number) and (len(number) > 1 or "." in number) for number in numbers_in(text))
    if kind == "date":
        return bool(years_in(text) or months_in(text))
    return False


def best_lines(question: str | ParsedQuestion, pages: list[Page], retriever: Retriever, n: int | None = None,
               max_pages: int | None = None, more: int = 0, reranker: str | None = None) -> list[Hit]:
    """The ``n`` lines of the ``max_pages`` best-ranked ``pages`` that best answer ``question``, best first;
    then, given ``more``, that many further lines, chosen the same way as if ``n + more`` were asked (the
    lines the model reads: the first ``n`` are those shown first, so [L1]..[Ln] are on screen).

    ``pages`` are the search's hits loaded once (``retriever.load_pages``); ``question`` the text or its
    ``ParsedQuestion``. Each line is a Hit on its page: ``text`` is the line as read (a row with its heads),
    ``[start, end)`` its span in the page text (so a preview highlights exactly it), ``score`` its fused
    score, and ``trace`` says why: the page's search trace, the line's keyword and meaning scores, the
    page's rank. ``reranker`` is the RERANKER setting to rank the lines with too (default: the app's).
    """
    n = n or config.EVIDENCE_LINES
    max_pages = max_pages or config.EVIDENCE_PAGES
    parsed = question if isinstance(question, ParsedQuestion) else parse_question(question)
    quotas = page_quotas(n + more, max_pages)
    # the lines of every page read, with their page's rank (a page shown later lets the next one in);
    # a page with nothing to show passes its share on to the next
    candidates: list[tuple[Hit, Line, int, Page]] = []
    said: set[str] = set()
    for rank, page in enumerate(pages[:max_pages], 1):
        lines = [line for line in readable_lines(page.lines) if len(line.text) >= config.EVIDENCE_MIN_CHARS]
        candidates += [(replace(page.hit, start=line.start, end=line.end, text=line.text), line, rank, page) for line in lines
                       if line.text not in said and not said.add(line.text)]  # a line printed twice is read once
    if not candidates:
        return []
    texts = [hit.text for hit, *_ in candidates]
    collections = [hit.collection for hit, *_ in candidates]
    marked = domains.line_ranking(parsed, [line for _, line, *_ in candidates])
    asked_on = holds_telling_word(parsed, texts, collections, retriever) | (marked if marked is not None else False)
    tabled = {rank for _, line, rank, _ in candidates if line.kind == "row"}
    shown_pages = page_order([rank for _, _, rank, _ in candidates], asked_on, tabled)[: len(quotas)]
    # only the lines of the pages that show some are ranked (and embedded): a first question on new
    # pages pays for the lines it may show, not for every page read
    kept = [i for i, (_, _, rank, _) in enumerate(candidates) if rank in shown_pages]
    candidates = [candidates[i] for i in kept]
    marked = marked[kept] if marked is not None and marked[kept].any() else None
    keyword, meaning = retriever.line_scores(parsed, [texts[i] for i in kept], [collections[i] for i in kept])
    fitting = None
    if parsed.answer_kind and rules.on("kind_asked_first"):
        fitting = np.array([asked_on[i] and gives_kind_asked(parsed.answer_kind, texts[i]) for i in kept])
    fused = fuse_lines(keyword, meaning, marked, fitting if fitting is not None and fitting.any() else None)
    fused = rerankers.rerank_lines(parsed.query, [texts[i] for i in kept], fused, reranker)  # one more ranking (RERANKER)
    line_pages = [rank for _, _, rank, _ in candidates]
    ranked = [int(i) for i in np.argsort(-fused, kind="stable")]
    first = _chosen(ranked, shown_pages, page_quotas(n, max_pages), line_pages, n, [])
    if rules.on("best_line_leads") and not led_by_more_than_words(pages[0]):
        first = best_line_leading(first, ranked, n)
    chosen = first + _chosen(ranked, shown_pages, quotas, line_pages, n + more, first)[: more]
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
                     "page_rank": page_rank, "kind": line.kind, "label": line.label}
        shown.append(hit)
    return shown


rules.register("short_lines_read_as_one", "a run of short lines standing alone (a cover page, a letterhead, a signature) is "
               "read as one line: each names, together they state (\"Rick Scott · GOVERNOR\", \"Produced by: · Florida Department of Health\")",
               "tests/test_evidence.py::test_rule_a_run_of_short_lines_is_read_as_one_line",
               pays_on="docs/experiments/2026-11-28-lines-as-the-page-prints-them.md: with wrapped_line_carries_on, fresh4_mm (held out) "
                       "overlap@3 9 -> 14 of 22; mmlongbench (fitted) 3 -> 7 of 25")


def readable_lines(lines: list[Line]) -> list[Line]:
    """The page's lines that can be shown as evidence: every line but a heading, since a heading names and
    states nothing.

    Rule: a run of short lines standing alone (a cover page, a letterhead, a signature) is read as one line:
    each names, together they state ("Rick Scott · GOVERNOR", "Produced by: · Florida Department of Health").
    A run of two or more headings (``page_lines`` reads any short line that ends no sentence as one) or short
    labels ending in a colon ("Produced by:") becomes a "block" line spanning them; a lone label is read as it is,
    and a run right above a table's rows is the table's title, which its rows already read.
    """
    out: list[Line] = []
    run: list[Line] = []
    for line in [*lines, None]:
        if line is not None and (line.kind == "heading" or (line.kind == "sentence" and line.text.endswith(":")
                                                             and len(line.text) <= HEADING_MAX_CHARS)):
            run.append(line)
            continue
        titles_a_table = line is not None and line.kind == "row"  # the rows below carry their table's title
        if len(run) >= 2 and not titles_a_table and rules.on("short_lines_read_as_one"):
            out += [Line(part[0].start, part[-1].end, "block", " · ".join(short.text for short in part)) for part in _parts(run)]
        else:
            out += [short for short in run if short.kind != "heading"]
        run = []
        if line is not None:
            out.append(line)
    return out


def _parts(run: list[Line]) -> list[list[Line]]:
    """A run of short lines cut into parts of at most LONGEST_LINE characters, as a run-on sentence is cut (a table
    of contents is one long run of short lines, and one line of all of it would tell nothing apart)."""
    parts: list[list[Line]] = [[]]
    for short in run:
        if parts[-1] and sum(len(s.text) + 3 for s in parts[-1]) + len(short.text) > LONGEST_LINE:
            parts.append([])
        parts[-1].append(short)
    return parts


def holds_telling_word(query: ParsedQuestion, texts: list[str], collections: list[str], retriever: Retriever) -> np.ndarray:
    """Whether each line (``texts``, of documents ``collections``) holds a word of ``query`` that tells its
    document's pages apart: a keyword token of the question not printed on most of the pages, the words
    the keyword ranking reads (a company's name and year in every running head are not among them, nor a name the
    question gives the document: retriever.own_names_asked)."""
    holds = np.zeros(len(texts), dtype=bool)
    for collection in dict.fromkeys(collections):
        telling = telling_words(query, collection, retriever)
        language = retriever.language(collection)
        for i in (i for i, c in enumerate(collections) if c == collection):
            holds[i] = bool(telling & set(keyword_tokens(texts[i], language)))
    return holds


def telling_words(query: ParsedQuestion, collection: str, retriever: Retriever) -> set[str]:
    """The keyword tokens of ``query`` that tell the pages of ``collection`` apart: not printed on most of its pages,
    and no name the question gives the document (retriever.own_names_asked)."""
    words = retriever.query_tokens(query, [collection])
    return set(words) - retriever.words_on_most_pages(collection, words, config.EVIDENCE_COMMON_SHARE) - retriever.own_names_asked(collection, query)


rules.register("prose_pages_after", "a prose page none of whose lines holds a word of the question telling pages apart shows its "
               "lines after the other pages; a page with a table row keeps its place in search order",
               "tests/test_evidence.py::test_a_page_of_table_rows_keeps_its_place_though_no_line_holds_a_word_asked",
               pays_on="docs/experiments/2026-11-27-release-lines.md: the 9-page release of its tests, the figure on page 3 shown"
                       " first (switched off, the CEO's page-1 sentences lead: two tests fail); no verdict moves on the 203 bench"
                       " questions")


def page_order(line_pages: list[int], asked_on: np.ndarray, tabled: set[int]) -> list[int]:
    """Rule: a prose page none of whose lines holds a word of the question telling pages apart shows its
    lines after the other pages; a page with a table row keeps its place in search order.

    ``line_pages`` is each line's page rank, ``asked_on`` whether the line holds such a word (or a domain
    marks it), ``tabled`` the ranks of the pages with a row. A release's first page, quoting its CEO on the
    company and the year, is often searched first and states nothing asked. A statement's rows, though,
    often share no word with the question ("capital expenditure" against "Purchases of property"), and a
    statement page first in search order is most often the one that answers: demoting statement pages too
    was most of what lost 7 of FinanceBench's 88 questions @8 (docs/experiments/2026-11-27-better-lines.md).

    page_order([1, 1, 2, 3], np.array([False, False, False, True]), {2}) -> [2, 3, 1]
    """
    kept = {page for page, held in zip(line_pages, asked_on) if held} | tabled
    ranks = list(dict.fromkeys(line_pages))
    if not rules.on("prose_pages_after"):
        return ranks
    return [rank for rank in ranks if rank in kept] + [rank for rank in ranks if rank not in kept]


def _chosen(ranked: list[int], page_ranks: list[int], quotas: list[int], line_pages: list[int], n: int,
            taken: list[int]) -> list[int]:
    """Which lines (indices into ``line_pages``, the page rank of each line) ``quotas`` pick from the pages
    with some to show (``page_ranks``, in the order they show lines), leaving out those ``taken`` already:
    each page its share of its best lines by ``ranked``, first page first, each page's best line first."""
    chosen = [i for page_rank, quota in zip(page_ranks, quotas)
              for i in [i for i in ranked if line_pages[i] == page_rank][:quota]]
    # fewer pages than shares (a one-page document): the pages read show more rather than fewer lines in all
    chosen += [i for i in ranked if i not in chosen][: n - len(chosen)]
    position = {i: p for p, i in enumerate(ranked)}
    page_position = {rank: p for p, rank in enumerate(page_ranks)}
    chosen.sort(key=lambda i: (page_position[line_pages[i]], position[i]))
    return [i for i in chosen if i not in taken]


rules.register("best_line_leads", "the line that answers best leads, wherever it stands, unless the search was led to its best page by "
               "more than the question's words (a domain's page hint, the page the question names)",
               "tests/test_evidence.py::test_rule_the_best_line_leads_unless_a_hint_led_to_the_page",
               pays_on="docs/experiments/2026-11-29-the-best-line-leads.md: fresh6-fresh11 (216 questions, design), "
                       "states@1 79 -> 92, states@3 116 -> 123; held out fresh3, fresh4, fresh4_mm, mmlongbench: states@1 37 -> 42, "
                       "states@3 55 -> 57; fresh12 (written after it) states@3 16 -> 20 of 36; FinanceBench (fitted) unchanged")


def led_by_more_than_words(page: Page) -> bool:
    """Was the search led to ``page`` by more than the question's words: a domain's hint (a statement the question
    names) or a page the question names? Its trace says (retriever.search)."""
    return bool(page.hit.trace.get("hint_rank") or page.hit.trace.get("page_ref_rank"))


def best_line_leading(first: list[int], ranked: list[int], n: int) -> list[int]:
    """Rule: the line that answers best leads, wherever it stands, unless the search was led to its best page by
    more than the question's words (a domain's page hint, the page the question names).
    ``first`` (the lines the pages' shares chose) with the best-ranked line of all at its head: moved there if
    chosen, else taking the place of the last. A page the search found by its words alone is no surer than the
    line's own fit (measured on prose questions); a statement page a hint found is (FinanceBench's statements).

    best_line_leading([4, 7, 2], [2, 9, 4, 7], 3) -> [2, 4, 7];  best_line_leading([4, 7, 2], [9, 2, 4, 7], 3) -> [9, 4, 7]
    """
    if not ranked:
        return first
    best = ranked[0]
    return [best] + [i for i in first if i != best] if best in first else [best] + first[: n - 1]


def _boxes_within(page: Page, line: Line) -> str:
    """The OCR line boxes of the chunks the line lies in (OCR'd pages highlight by box, not by offset)."""
    boxes = [box for c in page.chunks if c.ocr_boxes and c.start < line.end and c.end > line.start for box in json.loads(c.ocr_boxes)]
    return json.dumps(boxes) if boxes else ""


def span_text(line: Hit, retriever: Retriever) -> str:
    """The line as its page prints it (the span ``[start, end)`` of the page text), without the heads added to read it."""
    return page_text(retriever.page_passages(line.collection, line.page))[line.start : line.end]
