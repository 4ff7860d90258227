"""Show a cited page as it looks, with the cited passage highlighted.

    kept PDF copy (ingest.kept_pdf_path) -> the cited page
    -> boxes of the passage:
         text-layer page: the page's words, each located at its character offset in
         the same page text ingest chunked, kept when inside the passage's [start, end)
         OCR'd page: the OCR line boxes stored on the passage's chunk
    -> highlight annotations on those boxes (in memory; the file is never written)
    -> PNG bytes for st.image

A passage is located by offsets, not by searching for its text, so repeated
phrases and hyphenated line breaks cannot move the highlight to the wrong place.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pymupdf

log = logging.getLogger(__name__)

HIGHLIGHT_RGB = (1.0, 0.85, 0.1)


def word_offsets(page_text: str, words: list[str]) -> list[int | None]:
    """Character offset of each word in ``page_text``, found left to right (None: not found).

    word_offsets("to be or", ["to", "be", "or"]) -> [0, 3, 6]
    """
    offsets, cursor = [], 0
    for word in words:
        at = page_text.find(word, cursor)
        offsets.append(None if at < 0 else at)
        if at >= 0:
            cursor = at + len(word)
    return offsets


def passage_boxes(page: pymupdf.Page, start: int, end: int, ocr_boxes: str | list | None = None) -> list[pymupdf.Rect]:
    """Rectangles (PDF points) covering characters [start, end) of the page's text."""
    if ocr_boxes:
        boxes = json.loads(ocr_boxes) if isinstance(ocr_boxes, str) else ocr_boxes
        return [pymupdf.Rect(box) for box in boxes]
    raw = page.get_text("text")
    lead = len(raw) - len(raw.lstrip())  # ingest stripped the page text, so its offsets start after this
    words = page.get_text("words")
    offsets = word_offsets(raw, [w[4] for w in words])
    lines: dict[tuple[int, int], pymupdf.Rect] = {}  # one box per text line reads better than per word
    for w, at in zip(words, offsets):
        if at is not None and start <= at - lead < end:
            key = (w[5], w[6])  # (block number, line number)
            lines[key] = lines[key] | pymupdf.Rect(w[:4]) if key in lines else pymupdf.Rect(w[:4])
    return list(lines.values())


def render_page(
    pdf_path: Path | str,
    page_number: int,
    start: int = 0,
    end: int = 0,
    ocr_boxes: str | list | None = None,
    width_px: int = 900,
) -> bytes:
    """PNG of 1-based ``page_number`` of ``pdf_path``, ``width_px`` wide, passage highlighted."""
    with pymupdf.open(pdf_path) as doc:
        page = doc.load_page(page_number - 1)
        boxes = passage_boxes(page, start, end, ocr_boxes) if end > start else []
        if boxes:
            annot = page.add_highlight_annot(boxes)
            annot.set_colors(stroke=HIGHLIGHT_RGB)
            annot.update()
        else:
            log.debug("No highlight boxes for page %d [%d:%d] of %s", page_number, start, end, pdf_path)
        zoom = width_px / max(page.rect.width, 1)
        return page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), annots=True).tobytes("png")
