"""Read a PDF: open it safely, get each page's text (OCR when the words are in a picture),
and cut page text into chunks whose character offsets index the page exactly.

    file -> open_pdf()       checks: a readable file (not a folder or a dangling link), size, %PDF-, opens, not encrypted, has pages, page limit,
                             every page readable (a truncated file MuPDF had to repair is
                             "damaged: pages 8–15 could not be read" unless KEEP_READABLE_PAGES)
         -> extract_page()   text layer, or OCR when the words are likely in a picture: no text
                             layer, a sparse one over a mostly-image page (a scan with a stamp),
                             or a sparse one beside hundreds of vector paths (outlined text);
                             OCR line boxes are kept so a passage can be highlighted later
         -> chunk_page()     sentence-aware, overlapping (start, end) spans of the page text

Nothing here touches the store or a model: ``ingest.py`` calls these and writes the
results to ChromaDB. Errors are ``IngestError`` subclasses whose message says, in
plain words, what is wrong with the file.

Deliberately simple: page text is PyMuPDF's plain text layer in its stored order.
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


@dataclass
class Page:
    number: int  # 1-based, as people count pages
    text: str
    source: str  # "text" | "ocr" | "empty"
    ocr_lines: list[tuple[int, int, tuple[float, float, float, float]]] = field(default_factory=list)
    # ^ (start, end) of each OCR'd line within ``text`` and its box in PDF points


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


def extract_page(page: pymupdf.Page, text: str, ocr: OcrEngine | None) -> Page:
    """One page's text: the text layer ``text``, or what ``ocr`` reads from its picture when that says more."""
    number = page.number + 1
    if ocr is None:
        return Page(number, text, "text" if text else "empty")
    lines, offsets, pos = [], [], 0
    for line_text, box in ocr.read(page):
        lines.append(line_text)
        offsets.append((pos, pos + len(line_text), tuple(round(float(v), 1) for v in box)))
        pos += len(line_text) + 1
    ocr_text = "\n".join(lines)
    if len(ocr_text.strip()) <= len(text):
        return Page(number, text, "text" if text else "empty")
    return Page(number, ocr_text, "ocr", offsets)


def read_page(page: pymupdf.Page) -> Page:
    """One page's text: the text layer, or OCR when its words are likely in a picture."""
    text = page.get_text("text").strip()
    return extract_page(page, text, ocr_engine() if needs_ocr(page, text) else None)


# -----------------------------------------------------------------------------
# Chunking: the one place the chunking policy lives

_SENTENCE_END = re.compile(r"(?<=[.!?;:])[\"')\]]*\s+|\n\s*")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence or line of ``text``, whitespace trimmed.

    sentence_spans("One. Two!\\nThree") -> [(0, 4), (5, 9), (10, 15)]
    """
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        if match.start() > start:
            spans.append((start, match.start()))
        start = match.end()
    if start < len(text):
        spans.append((start, len(text)))
    return [(s, e) for s, e in spans if text[s:e].strip()]


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


def chunk_page(text: str, size: int | None = None, overlap: int | None = None) -> list[tuple[int, int]]:
    """Character spans of ``text`` that pack whole sentences into chunks of about ``size``.

    Consecutive chunks share whole sentences worth up to ``overlap`` chars, so a
    fact split across a boundary is still whole in one chunk. Offsets index the
    page text exactly: ``text[start:end]`` is the chunk.
    chunk_page("A a. B b. C c.", size=9, overlap=4) -> [(0, 9), (5, 14)]
    """
    size = size or config.CHUNK_SIZE
    overlap = config.CHUNK_OVERLAP if overlap is None else overlap
    units: list[tuple[int, int]] = []
    for s, e in sentence_spans(text):
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
