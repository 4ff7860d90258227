"""The records the answer path hands from module to module, and nothing else.

    Hit   one retrieved passage (a chunk of a page), or one evidence line cut from a page: where it is,
          what it says, and why it was chosen (``trace``)
    Line  one readable line of a page (a sentence, a heading, a list item, a table row) as ``pages.page_lines``
          reads it: its span on the page and how it reads with its context

Modules that only pass these along import them from here, not from the module that makes them, so no
module needs the retriever just to name its type: this module imports nothing of the app.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Hit:
    """One retrieved passage: where it is, what it says, and why it was chosen."""

    id: str
    collection: str
    doc_name: str
    page: int
    start: int
    end: int
    text: str
    title: str = ""
    keywords: str = ""
    ocr_boxes: str = ""  # JSON line boxes when the page was OCR'd (for highlighting)
    score: float = 0.0  # fused score (RRF or normalised scores)
    trace: dict = field(default_factory=dict)  # semantic_rank/score, bm25_rank/score, page_ref_rank, hint_rank, fused, routed, seat


@dataclass
class Line:
    """One readable line of a page: its span in the page text, and how it reads with its context."""

    start: int
    end: int
    kind: str  # "sentence", "heading", "item", "row"; "block" (a run of short lines read as one: evidence.readable_lines)
    text: str  # as read: a row with its heading and column heads
    label: str = ""  # a row's own label ("Net sales"), without heading or figures
