"""Page previews: the cited passage is highlighted where it is on the page, on text and OCR'd pages."""

from __future__ import annotations

import json

import numpy as np
import pymupdf

import ingest
import preview
from conftest import image_only_page, write_text_pdf


def pixels(png: bytes) -> np.ndarray:
    pix = pymupdf.Pixmap(png)
    return np.frombuffer(pix.samples, np.uint8).reshape(pix.h, pix.w, pix.n)[:, :, :3].astype(int)


def changed_rows(pdf, page, start, end, ocr_boxes=None) -> tuple[np.ndarray, float]:
    """Rows (in PDF points) where the highlighted render differs from the plain one."""
    plain = pixels(preview.render_page(pdf, page, width_px=595))
    lit = pixels(preview.render_page(pdf, page, start, end, ocr_boxes, width_px=595))
    assert plain.shape == lit.shape
    rows = np.where(np.abs(plain - lit).sum(axis=(1, 2)) > 0)[0]
    return rows, plain.shape[0] / 842


def test_word_offsets_walk_left_to_right_so_repeats_map_to_their_own_place():
    assert preview.word_offsets("to be or not to be", ["to", "be", "or", "not", "to", "be"]) == [0, 3, 6, 9, 13, 16]
    assert preview.word_offsets("abc", ["zzz", "abc"]) == [None, 0]


def test_the_highlight_covers_the_cited_chunk_and_nothing_above_it(store, embedder, tmp_path):
    filler = " ".join(f"Line {i} of the preamble says nothing in particular." for i in range(40))
    target = "The harbour master logged 3,200 tonnes of cod in 1911."
    pdf = write_text_pdf(tmp_path / "long.pdf", [filler + " " + target])
    result = ingest.ingest_pdf(pdf, store, embedder)
    got = store.get_collection(result.collection).get(include=["documents", "metadatas"])
    meta = next(m for d, m in zip(got["documents"], got["metadatas"]) if "3,200 tonnes" in d)
    page = pymupdf.open(pdf)[0]
    boxes = preview.passage_boxes(page, meta["start"], meta["end"])
    target_box = page.search_for("3,200 tonnes")[0]
    assert any(b.intersects(target_box) for b in boxes)
    assert min(b.y0 for b in boxes) > page.search_for("Line 1 of")[0].y1  # the first lines are not lit
    rows, scale = changed_rows(ingest.kept_pdf_path(result.collection), 1, meta["start"], meta["end"])
    assert rows.size and rows.min() / scale >= min(b.y0 for b in boxes) - 2
    assert rows.max() / scale <= max(b.y1 for b in boxes) + 2


def test_an_ocr_page_is_highlighted_with_its_ocr_line_boxes(store, embedder, tmp_path):
    doc = pymupdf.open()
    image_only_page(doc, "Scanned memo.\n\n\n\nThe vault code changed on 4 March 1998.")
    doc.save(tmp_path / "scan.pdf")
    result = ingest.ingest_pdf(tmp_path / "scan.pdf", store, embedder)
    got = store.get_collection(result.collection).get(include=["metadatas"])
    meta = got["metadatas"][0]
    assert meta["text_source"] == "ocr" and json.loads(meta["ocr_boxes"])
    rows, scale = changed_rows(ingest.kept_pdf_path(result.collection), 1, meta["start"], meta["end"], meta["ocr_boxes"])
    boxes = [pymupdf.Rect(b) for b in json.loads(meta["ocr_boxes"])]
    assert rows.size and rows.min() / scale >= min(b.y0 for b in boxes) - 2
