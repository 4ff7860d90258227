"""A document's map: its top-level sections and the pages each one covers.

"Summarise this document" or "What are its sections?" is not answered by a page search; it
needs the whole document laid out as a few sections with page ranges. Three sources can give
that map, tried best first:

    kept PDF -> pdf_outline()      the PDF's own outline (bookmarks): [level, title, page] rows;
                                   the level that divides the document (a lone book-title entry
                                   at level 1 is descended into)
             -> heading_outline()  no outline: lines set in a large font on the pages
                                   (body size = commonest size; top level = largest heading size
                                   seen on two or more pages; one section per page at most)
    labels   -> label_outline()    neither: the titles the app's LLM gave each page, in up to 12
                                   runs of consecutive pages ("pages" when no page has a label)

    document_outline() picks the first that gives a useful map; page_range() writes "pp. 4–9".

Every section runs from its first page to the page before the next section starts (the last one
to the end of the document), so the map has no gaps after its first section and no overlaps.
Nothing here loads a model or opens the store: it is PyMuPDF and arithmetic.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pymupdf

log = logging.getLogger(__name__)


@dataclass
class Section:
    title: str
    start: int  # first page, 1-based
    end: int  # last page, 1-based, inclusive
    level: int = 1  # the outline level it came from (1 unless a PDF outline was descended into)
    source: str = "toc"  # "toc" (the PDF's own outline) | "headings" (large-font lines) | "labels" | "pages"


def page_range(section) -> str:
    """"p. 4" for a one-page section, "pp. 4–9" (en dash) for more."""
    if section.end <= section.start:
        return f"p. {section.start}"
    return f"pp. {section.start}\u2013{section.end}"


def _clean(title: str) -> str:
    return " ".join(str(title).split())


def _with_ends(starts: list[tuple[str, int, int]], page_count: int, source: str) -> list[Section]:
    """Sections from (title, start, level) sorted by start: each ends where the next begins."""
    sections = []
    for i, (title, start, level) in enumerate(starts):
        # Two entries on one page: the first is that page alone, not a section ending before it starts.
        end = max(start, starts[i + 1][1] - 1) if i + 1 < len(starts) else max(start, page_count)
        sections.append(Section(title, start, end, level, source))
    return sections


# -----------------------------------------------------------------------------
# 1. The PDF's own outline


def pdf_outline(pdf: pymupdf.Document) -> list[Section]:
    """The top-level sections of the PDF's outline (bookmarks), with page ranges; [] when it has none."""
    try:
        toc = pdf.get_toc(simple=True)
    except Exception as exc:  # a damaged outline is no outline: the next source answers
        log.warning("could not read the PDF outline: %s", exc)
        return []
    if not toc:
        return []
    page_count = pdf.page_count
    # The level that divides the document: a book often has one level-1 entry (its title) with
    # the chapters under it, so while a level has a single entry and there is a deeper one, go down.
    level = min(row[0] for row in toc)
    while sum(1 for row in toc if row[0] == level) == 1 and any(row[0] > level for row in toc):
        level += 1
    starts: dict[tuple[str, int], int] = {}  # (title, start) -> level; a dict drops duplicates, keeps order
    for row in toc:
        row_level, title, page = row[0], _clean(row[1]), row[2]
        if row_level != level or not title or not isinstance(page, int) or not 1 <= page <= page_count:
            continue  # -1 / 0 is an entry that points nowhere (or outside the file)
        starts.setdefault((title, page), row_level)
    ordered = sorted(((title, start, lvl) for (title, start), lvl in starts.items()), key=lambda s: s[1])
    return _with_ends(ordered, page_count, "toc")


# -----------------------------------------------------------------------------
# 2. Headings found from the layout

BODY_SAMPLE_PAGES = 60  # pages read to find the body font size (spread through the document)
HEADING_RATIO = 1.25  # a heading's font is at least this much larger than the body's...
BOLD_HEADING_RATIO = 1.15  # ...or this much larger and bold
MIN_SECTIONS, MAX_SECTIONS = 2, 40  # fewer is no map; more is a list of pages, not of sections
# Images are not needed and make the "dict" extraction slower.
_FLAGS = pymupdf.TEXTFLAGS_DICT & ~pymupdf.TEXT_PRESERVE_IMAGES
# "12", "3.1", "IV." are numbers, not titles (Roman numerals in capitals only: "mix" is a word)
_JUST_A_NUMBER = re.compile(r"[\W\d_]*|M{0,3}(CM|CD|D?C{0,3})(XC|XL|L?X{0,3})(IX|IV|V?I{0,3})[.)]?")


@dataclass
class _Run:
    """Adjacent lines of one font size on a page, read as one piece of text."""
    size: float
    text: str
    bold_chars: int
    chars: int
    y0: float
    y1: float


def _size(size: float) -> float:
    # Half-point steps: "17.99" and "18.01" are one size, 11 and 12 are two.
    return round(size * 2) / 2


def _lines(page: pymupdf.Page, clip: pymupdf.Rect | None = None) -> list[_Run]:
    """The page's text lines top to bottom, each with its main font size (by characters) and boldness."""
    try:
        blocks = page.get_text("dict", flags=_FLAGS, clip=clip, sort=True)["blocks"]
    except Exception as exc:  # one unreadable page should not cost the whole map
        log.debug("page %d: no text layout (%s)", page.number + 1, exc)
        return []
    lines = []
    for block in blocks:
        for line in block.get("lines", ()):
            sizes: Counter[float] = Counter()
            bold = chars = 0
            for span in line["spans"]:
                n = len(span["text"].strip())
                sizes[_size(span["size"])] += n
                chars += n
                if span["flags"] & pymupdf.TEXT_FONT_BOLD or "bold" in span["font"].lower():
                    bold += n
            text = _clean("".join(span["text"] for span in line["spans"]))
            if chars and text:
                lines.append(_Run(sizes.most_common(1)[0][0], text, bold, chars, line["bbox"][1], line["bbox"][3]))
    return lines


def _runs(lines: list[_Run]) -> list[_Run]:
    """Merge each line into the one before it when both have one size and touch: a title set on two lines
    (or "1" and "Introduction" side by side) is one title."""
    runs: list[_Run] = []
    for line in lines:
        last = runs[-1] if runs else None
        if last and line.size == last.size and line.y0 - last.y1 <= line.size:
            runs[-1] = _Run(last.size, f"{last.text} {line.text}", last.bold_chars + line.bold_chars,
                            last.chars + line.chars, last.y0, max(last.y1, line.y1))
        else:
            runs.append(line)
    return runs


def _body_size(pdf: pymupdf.Document) -> float | None:
    """The commonest font size by characters, read on at most BODY_SAMPLE_PAGES pages spread through."""
    n = pdf.page_count
    picks = range(n) if n <= BODY_SAMPLE_PAGES else sorted({round(i * (n - 1) / (BODY_SAMPLE_PAGES - 1))
                                                            for i in range(BODY_SAMPLE_PAGES)})
    sizes: Counter[float] = Counter()
    for number in picks:
        for line in _lines(pdf[number]):
            sizes[line.size] += line.chars
    return sizes.most_common(1)[0][0] if sizes else None


def _is_heading(run: _Run, body: float, first_on_page: bool, middle: float) -> bool:
    bold = run.bold_chars * 2 > run.chars
    large = run.size >= HEADING_RATIO * body or (bold and run.size >= BOLD_HEADING_RATIO * body)
    return (large and 3 <= len(run.text) <= 100 and any(c.isalpha() for c in run.text)
            and not _JUST_A_NUMBER.fullmatch(run.text) and (run.y0 < middle or first_on_page))


def heading_outline(pdf: pymupdf.Document) -> list[Section]:
    """Sections from the headings set in a large font; [] when that gives no useful map (< 2 or > 40)."""
    body = _body_size(pdf)
    if body is None:
        return []  # no text layer (a scan): no fonts to read
    # Headings open a page or sit near its top, so only the top half is read (half the work);
    # a page whose top half is empty is read whole for its first line.
    candidates: dict[int, list[_Run]] = {}  # page number (1-based) -> its heading runs, top to bottom
    for page in pdf:
        rect = page.rect
        middle = rect.y0 + rect.height / 2
        runs = _runs(_lines(page, pymupdf.Rect(rect.x0, rect.y0, rect.x1, middle)))
        if not runs:
            runs = _runs(_lines(page))[:1]
        found = [run for i, run in enumerate(runs) if _is_heading(run, body, i == 0, middle)]
        if found:
            candidates[page.number + 1] = found
    # The top level is the largest heading size on two pages or more: one only on page 1 is the
    # document's title, and any size on a single page is an accident of layout, not a level.
    pages_of: dict[float, set[int]] = {}
    for number, runs in candidates.items():
        for run in runs:
            pages_of.setdefault(run.size, set()).add(number)
    levels = [size for size, pages in pages_of.items() if len(pages) >= 2]
    if not levels:
        return []
    top = max(levels)
    starts: list[tuple[str, int, int]] = []
    for number in sorted(candidates):
        run = next((r for r in candidates[number] if r.size == top), None)
        if run is None:
            continue
        if starts and starts[-1][0] == run.text:
            continue  # the same heading again on the next page is that section going on (a running head)
        starts.append((run.text, number, 1))  # one section per page: its first top-level heading
    if not MIN_SECTIONS <= len(starts) <= MAX_SECTIONS:
        log.debug("heading outline: %d sections at %.1f pt (body %.1f pt), not a useful map", len(starts), top, body)
        return []
    return _with_ends(starts, pdf.page_count, "headings")


# -----------------------------------------------------------------------------
# 3. The app's page labels

MAX_LABEL_SECTIONS = 12


def _pages_title(start: int, end: int) -> str:
    return f"Page {start}" if start == end else f"Pages {start}\u2013{end}"


def label_outline(titles: dict[int, str], page_count: int) -> list[Section]:
    """Up to 12 runs of consecutive pages of about equal length, each titled by the label of its first
    labelled page ("Pages a–b" when none of its pages has one). Source "labels"; "pages" when no page
    of the document has a label (the map is then only the page groups)."""
    if page_count < 1:
        return []
    labels = {page: _clean(title) for page, title in titles.items()
              if isinstance(page, int) and 1 <= page <= page_count and title and _clean(title)}
    source = "labels" if labels else "pages"
    groups = min(MAX_LABEL_SECTIONS, page_count)
    # Boundaries at i * page_count / groups: lengths differ by one page at most (13 pages -> 12 groups).
    bounds = [1 + (i * page_count) // groups for i in range(groups + 1)]
    sections = []
    for start, after in zip(bounds, bounds[1:]):
        end = after - 1
        title = next((labels[p] for p in range(start, end + 1) if p in labels), None) or _pages_title(start, end)
        sections.append(Section(title, start, end, 1, source))
    return sections


# -----------------------------------------------------------------------------
# The map, from the best source there is


def document_outline(pdf_path: Path | None, titles: dict[int, str], page_count: int) -> list[Section]:
    """The document's sections: the PDF's outline when it has two or more, else its large-font headings,
    else its page labels (also when the PDF is not there or cannot be opened)."""
    if pdf_path is not None and Path(pdf_path).is_file():
        try:
            pdf = pymupdf.open(pdf_path)
        except Exception as exc:  # damaged or not a PDF: the labels still make a map
            log.warning("could not open %s for its outline: %s", pdf_path, exc)
        else:
            try:
                if not pdf.needs_pass:  # an encrypted PDF shows neither outline nor text
                    sections = pdf_outline(pdf)
                    if len(sections) >= 2:
                        return sections
                    sections = heading_outline(pdf)
                    if sections:
                        return sections
            finally:
                pdf.close()
    return label_outline(titles, page_count)
