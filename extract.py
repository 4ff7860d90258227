"""Read a PDF: open it safely, get each page's text (OCR when the words are in a picture; the
layout kept when asked), and cut page text into chunks whose character offsets index the page exactly.

    file -> open_pdf()        checks: a readable file (not a folder, a dangling link or a link loop), size, %PDF-,
                              opens, not encrypted, has pages, page limit, every page readable (a
                              truncated file MuPDF had to repair is "damaged: pages 8–15 could not
                              be read" unless KEEP_READABLE_PAGES)
         -> running_lines()   lines in the top or bottom margin of most pages (headers, page numbers)
         -> read_page()       OCR when the words are likely in a picture: no text layer, a sparse
                              one over a mostly-image page (a scan with a stamp), or a sparse one
                              beside hundreds of vector paths (outlined text); else the text layer,
                              with EXTRACTOR=layout through laid_out_page(): tables as Markdown
                              rows ("| label | v1 | v2 |" under a header row), two columns read
                              column by column, running lines first or last and marked. Every OCR'd
                              line, laid-out line and table cell keeps its box, so a passage can be
                              highlighted on the page. A page's text past MAX_PAGE_CHARS is left out
                              (cap_page_text; ``Page.dropped_chars`` says how much).
         -> chunk_page()      overlapping (start, end) spans of whole sentences and table rows,
                              running lines left out; table_header_for() gives the header row a
                              chunk starting mid-table repeats

Nothing here touches the store or a model: ``ingest.py`` calls these and writes the
results to ChromaDB. Errors are ``IngestError`` subclasses whose message says, in
plain words, what is wrong with the file.

Deliberately simple: the layout is read from word positions with a few geometric rules
(a cell is words separated by a gap of a line's height; a table is three or more rows of
short cells; a page has at most two columns, split at its middle), not a layout model.
Stacked header rows stay separate rows, and a table inside one column of a two-column page
is read as prose. The default page text is still PyMuPDF's plain text layer (EXTRACTOR=text):
on the bench, laid-out text retrieved slightly worse (docs/retrieval.md, "Tables and layout"), so the
layout is a setting until it measures better. PyMuPDF's find_tables and pymupdf4llm were
measured too and cost 8-20 times more per page (the code that ran them is in commit c916c5d).
"""
from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

import pymupdf

import config
import rules
from text_utils import sentence_spans

log = logging.getLogger(__name__)

# -----------------------------------------------------------------------------
# Errors a person can act on


class IngestError(Exception):
    """A PDF could not be ingested; ``str(err)`` says why in plain words."""


class FileTooLargeError(IngestError):
    pass


class NotAPDFError(IngestError):
    pass


class FileProblemError(IngestError):
    """The path is missing, a folder, a dangling link or unreadable: no PDF to look at."""


class CorruptPDFError(IngestError):
    pass


class DamagedPagesError(CorruptPDFError):
    """Some pages of the file cannot be read; the rest could be kept with KEEP_READABLE_PAGES."""


class EncryptedPDFError(IngestError):
    pass


class EmptyPDFError(IngestError):
    pass


class NoTextError(IngestError):
    pass


# -----------------------------------------------------------------------------
# Opening a PDF safely


def page_ranges(numbers: list[int]) -> str:
    """page_ranges([8, 9, 10, 12]) -> "8–10, 12" """
    ranges: list[list[int]] = []
    for n in sorted(numbers):
        if ranges and n == ranges[-1][1] + 1:
            ranges[-1][1] = n
        else:
            ranges.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in ranges)


def _page_is_readable(doc: pymupdf.Document, index: int) -> bool:
    """Whether page ``index`` is whole: a real page object whose content streams and images
    exist and, in a file MuPDF had to repair, read to their end without a MuPDF warning.

    A file cut short still opens (MuPDF repairs it), but the pages past the cut come back
    blank or half-drawn: their page object, content stream or image is missing or cut.
    Streams are only read in a repaired file: intact files with a harmless "premature end
    of data" in a page's stream exist (one of the 32 bench PDFs has two such pages, whose
    text reads fine).
    """
    try:
        page = doc.load_page(index)
        if page.xref <= 0 or doc.xref_get_key(page.xref, "Type") != ("name", "/Page"):
            return False
        contents, images = page.get_contents(), [image[0] for image in page.get_images(full=True)]
        if not all(doc.xref_is_stream(xref) for xref in contents + images):
            return False
        if not doc.is_repaired:
            return True
        pymupdf.TOOLS.mupdf_warnings(reset=True)
        for xref in contents:
            doc.xref_stream(xref)  # decoded: a stream cut short says "premature end of data"
        for xref in images:
            doc.xref_stream_raw(xref)  # raw (decoding a scan would cost seconds): "Length incorrect"
        return not pymupdf.TOOLS.mupdf_warnings(reset=True)
    except Exception:  # PyMuPDF raises several types for a broken page
        return False


def unreadable_pages(doc: pymupdf.Document) -> list[int]:
    """The 1-based numbers of the pages that cannot be read (see ``_page_is_readable``).

    Measured on the 45 bench and sample PDFs (3,304 pages, 0.0-0.7 s per file): none flagged.
    A scanned 15-page file cut at half: pages 8-15; cut at 30%: pages 5-15.
    """
    return [n + 1 for n in range(doc.page_count) if not _page_is_readable(doc, n)]


def _declares_no_pages(doc: pymupdf.Document) -> bool:
    """Whether the file's own page tree says it has no pages (rather than having lost it)."""
    try:
        kind, ref = doc.xref_get_key(doc.pdf_catalog(), "Pages")
        return kind == "xref" and doc.xref_get_key(int(ref.split()[0]), "Count") == ("int", "0")
    except Exception:  # no catalog or no page tree: lost, not empty
        return False


def _check_pages(doc: pymupdf.Document, name: str) -> None:
    """Raise when the file has no pages, too many, or damaged ones (unless the person asked
    to keep the readable pages only)."""
    try:
        pages = doc.page_count
    except Exception as err:  # a page tree cut short: "Invalid number of pages"
        raise CorruptPDFError(f"{name} is damaged and cannot be read ({err}).") from err
    if pages == 0 and not _declares_no_pages(doc):  # a page tree lost to truncation, not an empty document
        raise CorruptPDFError(f"{name} is damaged: no page could be read.")
    if pages == 0:
        raise EmptyPDFError(f"{name} has no pages.")
    if pages > config.MAX_PAGES:
        raise FileTooLargeError(f"{name} has {pages} pages; the limit is {config.MAX_PAGES} (setting MAX_PAGES).")
    damaged = unreadable_pages(doc)
    if len(damaged) == pages:
        raise CorruptPDFError(f"{name} is damaged: no page could be read.")
    if damaged and not config.KEEP_READABLE_PAGES:
        readable = [n for n in range(1, pages + 1) if n not in damaged]
        raise DamagedPagesError(
            f"{name} is damaged: pages {page_ranges(damaged)} could not be read. To add only the readable "
            f"pages ({page_ranges(readable)}), set KEEP_READABLE_PAGES=true; or get a complete copy of the file."
        )


def display_name(path: Path) -> str:
    """A file's name as text that can be shown, printed and stored: a byte that is not UTF-8
    (a name from an old Windows or Latin-1 disk) becomes "�".

    display_name(Path(b"caf\\xe9.pdf".decode("utf-8", "surrogateescape"))) -> "caf�.pdf"
    """
    return os.fsencode(Path(path).name).decode("utf-8", "replace")


def _read_head(path: Path, name: str) -> tuple[int, bytes]:
    """The file's size and first KiB, or the FileProblemError that says why it cannot be read."""
    if config.is_link_loop(path):
        raise FileProblemError(f"{name} is a symbolic link loop, not a file.")
    if path.is_symlink() and not path.exists():
        raise FileProblemError(f"{name} is a link to a file that does not exist.")
    if not path.exists():
        raise FileProblemError(f"There is no file {os.fsencode(path).decode('utf-8', 'replace')}.")
    if path.is_dir():
        raise FileProblemError(f"{name} is a folder, not a PDF file.")
    try:
        with open(path, "rb") as f:
            return os.fstat(f.fileno()).st_size, f.read(1024)
    except OSError as err:
        raise FileProblemError(f"{name} cannot be read ({err.strerror}).") from err


def open_pdf(path: Path) -> pymupdf.Document:
    """Open ``path`` as a PDF or raise the IngestError that says what is wrong with it."""
    path = Path(path)
    name = display_name(path)
    size, head = _read_head(path, name)
    if size / 2**20 > config.MAX_FILE_MB:
        raise FileTooLargeError(f"{name} is {size / 2**20:.0f} MB; the limit is {config.MAX_FILE_MB} MB (setting MAX_FILE_MB).")
    if b"%PDF-" not in head:
        raise NotAPDFError(f"{name} is not a PDF file (it does not start like one).")
    try:
        if name == path.name:
            doc = pymupdf.open(path, filetype="pdf")
        else:  # PyMuPDF cannot open a path that is not valid UTF-8: hand it the bytes
            doc = pymupdf.open(stream=path.read_bytes(), filetype="pdf")
    except Exception as err:  # PyMuPDF raises several types for broken files
        raise CorruptPDFError(f"{name} is damaged and cannot be read ({err}).") from err
    if doc.needs_pass:
        doc.close()
        raise EncryptedPDFError(f"{name} is password-protected. Remove the password and upload it again.")
    try:
        _check_pages(doc, name)
    except IngestError:
        doc.close()
        raise
    return doc


# -----------------------------------------------------------------------------
# Page text, with OCR for pages that are pictures


Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in PDF points


@dataclass
class Page:
    number: int  # 1-based, as people count pages
    text: str
    source: str  # "text" | "ocr" | "empty"
    line_boxes: list[tuple[int, int, Box]] = field(default_factory=list)
    # ^ (start, end) within ``text`` of each OCR'd line, laid-out line or table cell, and its box;
    #   empty when ``text`` is PyMuPDF's own text layer (preview then finds the words itself)
    running: list[tuple[int, int]] = field(default_factory=list)
    # ^ spans of running headers, footers and page numbers: kept in ``text``, never chunked or embedded
    dropped_chars: int = 0  # characters of the page's text past MAX_PAGE_CHARS, left out (see cap_page_text)


class OcrEngine:
    """One OCR route: ``read(page) -> [(line text, (x0, y0, x1, y1) in PDF points)]``."""

    def __init__(self, name: str, read: Callable[[pymupdf.Page], list[tuple[str, tuple]]]):
        self.name = name
        self.read = read


def ocr_dpi(page: pymupdf.Page) -> int:
    """Render resolution for OCR: OCR_MAX_DPI, lowered so the long side stays within
    OCR_MAX_PIXELS (huge pages garble OCR and cost gigabytes)."""
    long_side = max(page.rect.width, page.rect.height) or 1
    return int(min(config.OCR_MAX_DPI, 72 * config.OCR_MAX_PIXELS / long_side))


def _render_for_ocr(page: pymupdf.Page) -> tuple[pymupdf.Pixmap, float]:
    """The page as a picture for OCR, and the factor from its pixels back to PDF points."""
    dpi = ocr_dpi(page)
    return page.get_pixmap(dpi=dpi), 72 / dpi


def _rapidocr_engine() -> OcrEngine:
    import numpy as np
    from rapidocr import RapidOCR

    engine = RapidOCR(params={"Global.use_cls": False, "Global.log_level": "warning"})

    def read(page: pymupdf.Page) -> list[tuple[str, tuple]]:
        pix, scale = _render_for_ocr(page)
        rgb = np.frombuffer(pix.samples, np.uint8).reshape(pix.h, pix.w, pix.n)[:, :, :3]
        result = engine(np.ascontiguousarray(rgb[:, :, ::-1]))  # RapidOCR wants BGR
        if result.boxes is None:
            return []
        return [
            (text, (b[:, 0].min() * scale, b[:, 1].min() * scale, b[:, 0].max() * scale, b[:, 1].max() * scale))
            for b, text in zip(result.boxes, result.txts)
        ]

    return OcrEngine("rapidocr", read)


def _tesseract_engine() -> OcrEngine:
    tessdata = pymupdf.get_tessdata()  # raises when Tesseract's language data is not installed

    def read(page: pymupdf.Page) -> list[tuple[str, tuple]]:
        textpage = page.get_textpage_ocr(dpi=ocr_dpi(page), full=True, tessdata=tessdata)
        lines = []
        for block in page.get_text("dict", textpage=textpage)["blocks"]:
            for line in block.get("lines", []):
                text = "".join(span["text"] for span in line["spans"]).strip()
                if text:
                    lines.append((text, tuple(line["bbox"])))
        return lines

    return OcrEngine("tesseract", read)


@lru_cache(maxsize=None)
def ocr_engine(choice: str | None = None) -> OcrEngine | None:
    """The OCR engine from setting OCR_ENGINE (auto tries rapidocr, then tesseract), or None."""
    choice = choice or config.OCR_ENGINE
    builders = {"rapidocr": _rapidocr_engine, "tesseract": _tesseract_engine}
    order = {"auto": ["rapidocr", "tesseract"], "none": []}.get(choice, [choice])
    for name in order:
        try:
            engine = builders[name]()
            log.info("OCR engine: %s", name)
            return engine
        except Exception as err:  # an engine that cannot start is simply not available
            log.warning("OCR engine %s unavailable: %s", name, err)
    return None


def image_coverage(page: pymupdf.Page) -> float:
    """Share of the page's area covered by pictures (overlaps counted twice; capped at 1)."""
    area = abs(page.rect) or 1
    covered = sum(abs(pymupdf.Rect(info["bbox"]) & page.rect) for info in page.get_image_info())
    return min(covered / area, 1.0)


def needs_ocr(page: pymupdf.Page, text: str) -> bool:
    """A page is OCR'd when its words are likely in a picture or drawn as outlines: almost no
    text layer and some image; a sparse text layer (a stamp, a page number) over a
    mostly-image page; or a sparse text layer beside hundreds of vector paths."""
    if len(text) >= config.OCR_SPARSE_TEXT_CHARS:
        return False
    coverage = image_coverage(page)
    if coverage > 0 and (len(text) < config.MIN_TEXT_CHARS or coverage >= config.OCR_IMAGE_COVERAGE):
        return True
    return len(page.get_drawings()) >= config.OCR_MIN_DRAWINGS


def ocr_page(page: pymupdf.Page, text: str, ocr: OcrEngine) -> Page | None:
    """The page as ``ocr`` reads it from its picture, with line boxes; None when that says less than ``text``."""
    lines, offsets, pos = [], [], 0
    for line_text, box in ocr.read(page):
        lines.append(line_text)
        offsets.append((pos, pos + len(line_text), tuple(round(float(v), 1) for v in box)))
        pos += len(line_text) + 1
    ocr_text = "\n".join(lines)
    if len(ocr_text.strip()) <= len(text):
        return None
    return Page(page.number + 1, ocr_text, "ocr", offsets)


rules.register("page_text_cap", "a page's text is cut at MAX_PAGE_CHARS before it is chunked, because a page with megabytes of text "
               "(hidden or generated) would otherwise cost minutes of embedding and a write the store refuses",
               "tests/test_ingest_limits.py::test_rule_a_page_is_read_at_most_max_page_chars_long",
               pays_on='docs/experiments/2026-11-27-nothing-wasted-nothing-stalled.md: a 5 MB page, before nothing stored after 572 s, after searchable in 17 s')
rules.register("long_page_plain", "a page whose text layer is past MAX_PAGE_CHARS is read as plain text, not laid out, because laying "
               "out hundreds of thousands of words costs far more than the part of them that is kept is worth",
               "tests/test_ingest_limits.py::test_a_page_past_the_limit_is_read_as_plain_text_not_laid_out",
               pays_on="docs/experiments/2026-11-28-rules-that-pay.md: one page of 2,000,000 characters, EXTRACTOR=layout, read "
                       "in 3.1 s; switched off (laid out) 17.2 s, the same 50,000 characters kept")


def read_page(page: pymupdf.Page, running: frozenset[str] = frozenset(), extractor: str | None = None) -> Page:
    """One page's text: OCR when its words are likely in a picture, else its text layer: as PyMuPDF
    gives it (``extractor`` "text", the default) or laid out ("layout"; lines whose ``running_key``
    is in ``running`` are then kept out of chunks). At most MAX_PAGE_CHARS of it (``cap_page_text``).
    ``extractor`` is handed in by whoever varies it (an evaluation's profile); None: the EXTRACTOR setting.

    Rule: a page's text is cut at MAX_PAGE_CHARS before it is chunked, because a page with megabytes
    of text (hidden or generated) would otherwise cost minutes of embedding and a write the store refuses.
    """
    plain = page.get_text("text").strip()
    whole = _page_text(page, plain, running, extractor or config.EXTRACTOR)
    return cap_page_text(whole, config.MAX_PAGE_CHARS) if rules.on("page_text_cap") else whole


def _page_text(page: pymupdf.Page, plain: str, running: frozenset[str], extractor: str) -> Page:
    """The whole text of a page (``plain`` is its text layer), before any cap: see ``read_page``.

    Rule: a page whose text layer is past MAX_PAGE_CHARS is read as plain text, not laid out, because
    laying out hundreds of thousands of words costs far more than the part of them that is kept is worth.
    """
    if needs_ocr(page, plain):
        engine = ocr_engine()
        read = ocr_page(page, plain, engine) if engine is not None else None
        if read is not None:
            return read
    if not plain:
        return Page(page.number + 1, "", "empty")
    if extractor == "layout" and (len(plain) <= config.MAX_PAGE_CHARS or not rules.on("long_page_plain")):
        return laid_out_page(page, running)
    return Page(page.number + 1, plain, "text")


def cap_page_text(page: Page, limit: int) -> Page:
    """``page`` with its text cut to at most ``limit`` characters, at the last white space before the
    limit when there is one in its second half (so no word is cut in half); the line boxes and running
    spans past the cut are dropped and ``dropped_chars`` says how much text was left out.

    cap_page_text(Page(1, "one two three", "text"), 9) -> Page(1, "one two", "text", dropped_chars=6)
    """
    if len(page.text) <= limit:
        return page
    cut = limit
    space = max(page.text.rfind(" ", 0, limit + 1), page.text.rfind("\n", 0, limit + 1))
    if space >= limit // 2:
        cut = space
    text = page.text[:cut].rstrip()
    return Page(
        page.number,
        text,
        page.source,
        [(s, min(e, len(text)), box) for s, e, box in page.line_boxes if s < len(text)],
        [(s, min(e, len(text))) for s, e in page.running if s < len(text)],
        dropped_chars=len(page.text) - len(text),
    )


# -----------------------------------------------------------------------------
# Layout: tables as Markdown rows, columns in reading order, running headers set aside
#
# Everything comes from PyMuPDF's words and their boxes (one get_text call per page):
#   words -> PyMuPDF lines -> visual rows (lines side by side) -> segments (a row cut at wide gaps)
#   -> tables: runs of rows with several short segments, cells assigned to columns
#   -> blocks of the remaining lines, ordered column by column
#   -> page text, every line or cell remembering its box (so highlighting maps back to the page)

CURRENCY = {"$", "€", "£", "¥", "US$"}
CLOSING = {"%", ")", "%)"}


@dataclass
class TextLine:
    words: list[tuple[float, float, float, float, str]]  # x0, y0, x1, y1, word; left to right
    block: int

    @property
    def box(self) -> Box:
        return _union([w[:4] for w in self.words])

    @property
    def text(self) -> str:
        return " ".join(w[4] for w in self.words)


def _union(boxes: list) -> Box:
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def text_lines(page: pymupdf.Page) -> list[TextLine]:
    """PyMuPDF's lines of the page in stored order, each with its words and block number."""
    lines: dict[tuple[int, int], TextLine] = {}
    for x0, y0, x1, y1, word, block, line, _ in page.get_text("words"):
        lines.setdefault((block, line), TextLine([], block)).words.append((x0, y0, x1, y1, word))
    for line in lines.values():
        line.words.sort(key=lambda w: w[0])
    return list(lines.values())


def running_key(text: str) -> str:
    """What a running header or page number has in common across pages.

    running_key("Annual Report 2021 | Page 7") -> "annual report # | page #"
    """
    return " ".join(re.sub(r"\d+", "#", text.lower()).split())


def _in_margin(box: Box, page_rect: pymupdf.Rect) -> bool:
    band = config.RUNNING_MARGIN_SHARE * page_rect.height
    return box[3] <= page_rect.y0 + band or box[1] >= page_rect.y1 - band


def running_lines(doc: pymupdf.Document, skip: set[int] | frozenset[int] = frozenset()) -> frozenset[str]:
    """Keys of lines in the top or bottom margin on most pages: running headers, footers, page numbers.

    Looks at up to RUNNING_SAMPLE_PAGES pages spread over the document; a line counts as
    running when its key is on at least RUNNING_MIN_SHARE of them (and on 3 pages or more).
    """
    step = max(1, doc.page_count // config.RUNNING_SAMPLE_PAGES)
    sampled = [n for n in range(0, doc.page_count, step) if n + 1 not in skip]  # skip: damaged pages, 1-based
    seen: dict[str, int] = {}
    for number in sampled:
        page = doc.load_page(number)
        keys = {running_key(line.text) for line in text_lines(page) if _in_margin(line.box, page.rect)}
        for key in keys:
            seen[key] = seen.get(key, 0) + 1
    need = max(3, config.RUNNING_MIN_SHARE * len(sampled))
    return frozenset(key for key, count in seen.items() if count >= need)


def visual_rows(lines: list[TextLine]) -> list[list[TextLine]]:
    """Lines grouped into rows: a line joins the row above when its middle is within that row's height."""
    rows: list[list[TextLine]] = []
    for line in sorted(lines, key=lambda ln: (ln.box[1], ln.box[0])):
        middle = (line.box[1] + line.box[3]) / 2
        if rows:
            top, bottom = _union([ln.box for ln in rows[-1]])[1::2]
            if top <= middle <= bottom:
                rows[-1].append(line)
                continue
        rows.append([line])
    return rows


def segments(row: list[TextLine]) -> list[list[tuple]]:
    """A row's words cut into cells at gaps wider than LAYOUT_CELL_GAP line heights. Financial
    tables set "$" and "%" apart from their number: a currency sign starts a cell and keeps the
    number after it, a lone "%" or ")" after a number stays with it.

    Words "Net", "sales", "$", "3,226.8", "%" far apart -> [[Net, sales], [$, 3,226.8, %]]
    """
    words = sorted((w for line in row for w in line.words), key=lambda w: w[0])
    cells = [[words[0]]]
    for word in words[1:]:
        last = cells[-1][-1]
        wide = word[0] - last[2] > config.LAYOUT_CELL_GAP * (last[3] - last[1])
        if (word[4] in CLOSING and last[4][-1:].isdigit()) or (len(cells[-1]) == 1 and last[4] in CURRENCY):
            cells[-1].append(word)
        elif wide or word[4] in CURRENCY:
            cells.append([word])
        else:
            cells[-1].append(word)
    return cells


def _row_box(row: list[TextLine]) -> Box:
    return _union([line.box for line in row])


def _is_tabular(cells: list[list[tuple]], page_width: float) -> bool:
    """Several cells, none as wide as a column of prose."""
    return len(cells) >= 2 and max(c[-1][2] - c[0][0] for c in cells) < config.TABLE_MAX_CELL_SHARE * page_width


def table_runs(rows: list[list[TextLine]], cells: list[list[list[tuple]]], page_width: float) -> list[tuple[int, int]]:
    """(first, last) row index of each table: at least TABLE_MIN_ROWS tabular rows, each close to the
    row above, with at most one narrow one-cell row (a wrapped label, a section name) between two."""
    tabular = [_is_tabular(c, page_width) for c in cells]
    runs: list[list[int]] = []
    current: list[int] | None = None
    for i, row in enumerate(rows):
        box = _row_box(row)
        close = i > 0 and box[1] - _row_box(rows[i - 1])[3] <= 2 * (box[3] - box[1])
        if tabular[i]:
            if current is not None and close and i - current[1] <= 2:
                current[1] = i
            else:
                current = [i, i]
                runs.append(current)
        elif not (current is not None and close and len(cells[i]) == 1 and i - current[1] < 2
                  and box[2] - box[0] < config.TABLE_MAX_CELL_SHARE * page_width):
            current = None
    return [(a, b) for a, b in runs if sum(tabular[a : b + 1]) >= config.TABLE_MIN_ROWS and _short_cells(cells[a : b + 1])]


def _short_cells(rows: list[list[list[tuple]]]) -> bool:
    """Table cells are short; side-by-side columns of prose are not."""
    cells = [c for row in rows for c in row]
    return sum(len(c) for c in cells) / len(cells) <= config.TABLE_MAX_CELL_WORDS


def table_columns(rows: list[list[list[tuple]]]) -> list[tuple[float, float]]:
    """Column spans (x0, x1) of a table: the cells of its fullest rows, overlapping spans merged."""
    most = max(len(r) for r in rows)
    spans = sorted((c[0][0], c[-1][2]) for r in rows if len(r) == most for c in r)
    columns = [list(spans[0])]
    for x0, x1 in spans[1:]:
        if x0 <= columns[-1][1]:
            columns[-1][1] = max(columns[-1][1], x1)
        else:
            columns.append([x0, x1])
    return [tuple(c) for c in columns]


def _column_of(cell: list[tuple], columns: list[tuple[float, float]]) -> int:
    """The column a cell overlaps most (the nearest one when it overlaps none)."""
    x0, x1 = cell[0][0], cell[-1][2]
    overlap = [min(x1, c1) - max(x0, c0) for c0, c1 in columns]
    best = max(range(len(columns)), key=lambda i: overlap[i])
    if overlap[best] > 0:
        return best
    return min(range(len(columns)), key=lambda i: abs((x0 + x1) / 2 - (columns[i][0] + columns[i][1]) / 2))


def table_grid(cells: list[list[list[tuple]]]) -> list[list[list[tuple]]]:
    """Each row's words per column, from each row's cells: grid[row][column] -> words (empty: a blank cell)."""
    columns = table_columns(cells)
    grid = []
    for row in cells:
        slots: list[list[tuple]] = [[] for _ in columns]
        for cell in row:
            slots[_column_of(cell, columns)].extend(cell)
        grid.append(slots)
    return grid


class _PageText:
    """Page text being written, with the box of each piece written (for highlighting)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.boxes: list[tuple[int, int, Box]] = []

    def write(self, text: str, box: Box | None = None) -> tuple[int, int]:
        start = self.length
        self.parts.append(text)
        self.length += len(text)
        if box is not None and text:
            self.boxes.append((start, self.length, tuple(round(v, 1) for v in box)))
        return start, self.length

    def write_line(self, line: TextLine) -> tuple[int, int]:
        span = self.write(line.text, line.box)
        self.write("\n")
        return span

    def write_table(self, grid: list[list[list[tuple]]]) -> None:
        """Markdown pipe table: the first row is the header, then one row per line (a "|" in a
        cell becomes "¦", which looks the same and splits nothing)."""
        for index, row in enumerate(grid):
            self.write("|")
            for words in row:
                self.write(" ")
                self.write(" ".join(w[4] for w in words).replace("|", "¦"), _union([w[:4] for w in words]) if words else None)
                self.write(" |")
            self.write("\n")
            if index == 0:
                self.write("|" + "---|" * len(row) + "\n")

    @property
    def text(self) -> str:
        return "".join(self.parts).rstrip("\n")


def reading_order(blocks: list[tuple[Box, object]], page_rect: pymupdf.Rect) -> list[object]:
    """Items of ``blocks`` (box, item) in reading order: top to bottom, and where the page has two
    columns, the left column before the right one (a block across the middle starts a new band).

    Blocks at y 0 left, y 0 right, y 10 left -> left 0, left 10, right 0
    """
    middle = (page_rect.x0 + page_rect.x1) / 2
    slack = 0.05 * page_rect.width
    ordered, band = [], []
    for box, item in sorted(blocks, key=lambda b: (b[0][1], b[0][0])):
        if box[0] < middle - slack and box[2] > middle + slack:  # spans both columns
            ordered += [it for _, it in sorted(band, key=lambda b: (b[0][0] >= middle - slack, b[0][1]))]
            ordered.append(item)
            band = []
        else:
            band.append((box, item))
    ordered += [it for _, it in sorted(band, key=lambda b: (b[0][0] >= middle - slack, b[0][1]))]
    return ordered


def laid_out_page(page: pymupdf.Page, running: frozenset[str] = frozenset()) -> Page:
    """The page's text layer with its layout kept: tables as Markdown rows, columns in reading
    order, running lines first or last and marked so they are not embedded. Offsets map back to
    the page through the box of every line and cell."""
    lines = text_lines(page)
    margin = [ln for ln in lines if running_key(ln.text) in running and _in_margin(ln.box, page.rect)]
    body = [ln for ln in lines if ln not in margin]
    rows = visual_rows(body)
    cells = [segments(row) for row in rows]
    items: list[tuple[Box, object]] = []
    in_table: set[int] = set()
    for first, last in table_runs(rows, cells, page.rect.width):
        table_rows = rows[first : last + 1]
        in_table.update(id(ln) for row in table_rows for ln in row)
        items.append((_union([_row_box(row) for row in table_rows]), table_grid(cells[first : last + 1])))
    blocks: dict[int, list[TextLine]] = {}
    for line in body:
        if id(line) not in in_table:
            blocks.setdefault(line.block, []).append(line)
    items += [(_union([ln.box for ln in block]), block) for block in blocks.values()]

    out = _PageText()
    running_spans = []
    top = [ln for ln in margin if ln.box[1] < page.rect.y0 + page.rect.height / 2]
    for line in sorted(top, key=lambda ln: ln.box[1]):
        running_spans.append(out.write_line(line))
    for item in reading_order(items, page.rect):
        if isinstance(item, list) and item and isinstance(item[0], TextLine):
            for line in sorted(item, key=lambda ln: (ln.box[1], ln.box[0])):
                out.write_line(line)
        else:
            out.write_table(item)
    for line in sorted((ln for ln in margin if ln not in top), key=lambda ln: ln.box[1]):
        running_spans.append(out.write_line(line))
    text = out.text
    return Page(page.number + 1, text, "text", [b for b in out.boxes if b[1] <= len(text)], running_spans)


# -----------------------------------------------------------------------------
# Chunking: the one place the chunking policy lives

def _split_long(text: str, start: int, end: int, size: int) -> list[tuple[int, int]]:
    """Cut one over-long sentence at whitespace into pieces of at most ``size`` chars."""
    pieces = []
    while end - start > size:
        cut = text.rfind(" ", start + size // 2, start + size)
        cut = cut if cut > start else start + size
        pieces.append((start, cut))
        start = cut + 1 if text[cut : cut + 1] == " " else cut
    pieces.append((start, end))
    return pieces


def chunk_units(text: str, skip: list[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """The pieces a chunk is packed from: sentences of prose, and whole table rows (a row is never
    cut at the full stop in "Inc." or "3.5"); pieces inside a ``skip`` span (running headers) are left out.

    chunk_units("Total. Up.\n| Inc. | 3.5 |") -> [(0, 6), (7, 10), (11, 25)]
    """
    units = []
    for line in re.finditer(r"[^\n]+", text):
        if line.group().lstrip().startswith("|"):
            units.append((line.start(), line.end()))
        else:
            units += [(line.start() + s, line.start() + e) for s, e in sentence_spans(line.group())]
    return [(s, e) for s, e in units if not any(a <= s and e <= b for a, b in skip)]


def chunk_page(
    text: str, size: int | None = None, overlap: int | None = None, skip: list[tuple[int, int]] = ()
) -> list[tuple[int, int]]:
    """Character spans of ``text`` that pack whole sentences and table rows into chunks of about ``size``.

    Consecutive chunks share whole sentences worth up to ``overlap`` chars, so a
    fact split across a boundary is still whole in one chunk. Offsets index the
    page text exactly: ``text[start:end]`` is the chunk. Spans in ``skip`` (running
    headers) are in no chunk.
    chunk_page("A a. B b. C c.", size=9, overlap=4) -> [(0, 9), (5, 14)]
    """
    size = size or config.CHUNK_SIZE
    overlap = config.CHUNK_OVERLAP if overlap is None else overlap
    units: list[tuple[int, int]] = []
    for s, e in chunk_units(text, skip):
        units.extend(_split_long(text, s, e, size))
    chunks, i = [], 0
    while i < len(units):
        j = i
        while j + 1 < len(units) and units[j + 1][1] - units[i][0] <= size:
            j += 1
        chunks.append((units[i][0], units[j][1]))
        if j + 1 >= len(units):
            break
        # next chunk starts at the earliest sentence that still fits in the overlap
        nxt = j + 1
        while nxt - 1 > i and units[j][1] - units[nxt - 1][0] <= overlap:
            nxt -= 1
        i = nxt
    return chunks


def table_header_for(text: str, start: int) -> str:
    """The header row (and its |---| line) of the table a chunk starting at ``start`` begins inside,
    to repeat at the top of that chunk; "" when the chunk does not start inside a table's body.

    table_header_for("| a | b |\n|---|---|\n| x | 1 |", 20) -> "| a | b |\n|---|---|\n"
    """
    line_start = text.rfind("\n", 0, start) + 1
    if not text.startswith("|", line_start):
        return ""
    above: list[str] = []
    for line in reversed(text[:line_start].split("\n")[:-1]):
        if not line.startswith("|"):
            break
        above.insert(0, line)
    if len(above) < 2 or not above[1].startswith("|---"):
        return ""  # the chunk starts at the header itself, or the rows have no header
    return above[0] + "\n" + above[1] + "\n"
