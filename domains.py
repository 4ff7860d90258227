"""The door between the generic answer path and what a domain knows (today one: finance.py).

The retriever, the evidence lines, the question reader, routing and qa know no domain: where a domain
can add something they call one of the hooks below, and each hook asks every active domain. Adding a
domain (contracts, papers) is a module with these names and its name in ``_KNOWN``; ``DOMAINS=``
(empty) runs the generic path alone.

    hook              called by       a domain says
    page_marks        retriever       which marks a page carries, at index time ("balance sheet")
    pages_named       question        the marks a question or its instructions name outright
    pages_needed      question        the marks of the pages what it asks is computed from
    line_ranking      evidence        which of the candidate lines to rank as a third ranking
    answer_in_code    qa              an answer worked out in code from the loaded pages, no model
    prompt_notes      qa              notes for the model beside the question (a measure's formula)
    asks_calculation  calc            whether the question asks for arithmetic
    names_a_figure    question        whether the question names something it knows as a figure (a line item)
    document_types    routing         (type, pattern) of documents it knows, tried before the generic ones
    report_period     routing         the year a document's first pages say it covers
    wordings, wording_of, in_wording  retriever   how a document writes the question's years, so the
                                      question is embedded in each document's own wording
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

import config

if TYPE_CHECKING:
    import numpy as np

    from pages import Page
    from records import Hit, Line

_KNOWN = ("finance",)


def active() -> list[ModuleType]:
    """The domain modules switched on by DOMAINS (comma-separated names; empty: none)."""
    names = [name.strip() for name in config.DOMAINS.split(",") if name.strip()]
    unknown = [name for name in names if name not in _KNOWN]
    if unknown:
        raise config.SettingError(f"Setting DOMAINS names {', '.join(unknown)}; known domains: {', '.join(_KNOWN)}.")
    return [importlib.import_module(name) for name in names]


def page_marks(page_text: str) -> list[str]:
    return [mark for domain in active() for mark in domain.page_marks(page_text)]


def pages_named(text: str) -> list[str]:
    return [mark for domain in active() for mark in domain.pages_named(text)]


def pages_needed(text: str) -> list[str]:
    return [mark for domain in active() for mark in domain.pages_needed(text)]


def line_ranking(question: object, lines: list[Line]) -> np.ndarray | None:
    """The first active domain's marks over ``lines`` (a bool per line), or None. ``question``: the answer path's
    question.ParsedQuestion, as for ``answer_in_code``."""
    for domain in active():
        marked = domain.line_ranking(question, lines)
        if marked.any():
            return marked
    return None


def answer_in_code(question: object, pages: list[Page]) -> tuple[str, list[Hit]] | None:
    """(answer text, the pages it cites) from the first domain that can work it out, or None. ``question`` is the
    answer path's question.ParsedQuestion (what is asked in its query, the answer's form in its instructions),
    not named here: question.py reads the domains through this door, so this door imports no question."""
    return next((worked for domain in active() if (worked := domain.answer_in_code(question, pages))), None)


def prompt_notes(question: str) -> list[str]:
    return [note for domain in active() for note in domain.prompt_notes(question)]


def asks_calculation(question: str) -> bool:
    return any(domain.asks_calculation(question) for domain in active())


def names_a_figure(question: str) -> bool:
    return any(domain.names_a_figure(question) for domain in active())


def document_types() -> list[tuple[str, str]]:
    return [kind for domain in active() for kind in domain.document_types]


def report_period(head: str) -> str:
    return next((period for domain in active() if (period := domain.report_period(head))), "")


def wordings() -> tuple[str, ...]:
    """The ways documents write a year ("plain" 2019 first); ("plain",) alone when no domain rewords."""
    return next((domain.wordings for domain in active()), ("plain",))


def wording_of(text: str) -> str:
    return next((domain.wording_of(text) for domain in active()), "plain")


def in_wording(question: str, wording: str) -> str:
    return next((domain.in_wording(question, wording) for domain in active()), question)
