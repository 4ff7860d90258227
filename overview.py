"""Questions about a document as a whole: its summary, its sections, its topics, two documents compared.

A page search finds the pages most like a question; "Summarise this report" is like no page, so a
top-5 search cannot answer it. Such questions are answered from the whole document's map instead:

    question -> whole_document_request()   summary | outline | compare, or None (the page search answers)
             -> documents_meant()           the documents the question is about: those it names, else the
                                            only one in scope; with several and none named, the person is
                                            asked which (no guess)
             -> outline.document_outline()  the PDF's own outline, else its large-font headings, else the
                                            app's page labels: top-level sections with page ranges
             -> summary: each section's opening text, read in order within WHOLE_DOCUMENT_SECONDS
                ("Reading section 3 of 7…"); the model says in one sentence what it covers. Sections past
                the budget are listed with the labels of their pages, said plainly.
                outline: the sections and their pages, no model call.
                compare: the sections of two documents side by side, no model call.
             -> one line per section with its page range ("pp. 4–9") and a [n] marker to what was read,
                so the checker judges each model sentence against the section's own text, as for any answer

Nothing here is a search: every section is listed, so coverage does not depend on the model, and no
section is invented (titles come from the document).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

import config
import ingest
import prompts
import rules
from language import language_name, question_language
from outline import Section, document_outline, page_range
from pages import page_text
from records import Hit
from retriever import Retriever
from safe_text import fence_text

log = logging.getLogger(__name__)

# -----------------------------------------------------------------------------
# Recognising a question about a whole document

_DOCUMENT = r"(?:document|report|paper|pdf|file|book|manual|filing|deck|presentation|text|article|study)"
_KINDS = {
    "compare": re.compile(
        r"\b(compare|comparison|differences? between|what changed between|how do(?:es)? .{1,60} differ)\b"
        r"|\b(vergleich|unterschied)|\b(compar(?:er|ez|ar)|diff[ée]rences? entre|diferencias? entre)\b", re.I),
    "outline": re.compile(
        r"\b(table of contents|outline|(list|what are|which are|name) (all )?(the |its |their )?(sections|chapters|parts|headings))\b"
        r"|\bhow is (the |this )?" + _DOCUMENT + r" (structured|organi[sz]ed)\b"
        r"|\b(inhaltsverzeichnis|gliederung|kapitel)\b|\b(table des mati[èe]res|quels sont les chapitres)\b"
        r"|\b([íi]ndice|qu[ée] cap[íi]tulos)\b", re.I),
    "summary": re.compile(
        r"\b(summari[sz]e|summary|overview|tl;?dr|gist|main (points|topics|ideas|themes|takeaways)"
        r"|key (points|topics|takeaways|themes|findings|figures)"
        r"|what (is|'s) (this|the|that) " + _DOCUMENT + r" about|what does (this|the) " + _DOCUMENT + r" (cover|say))\b"
        r"|\b(zusammenfass\w*|fass\w*\b.{0,40}\bzusammen|überblick|worum geht es)|\b(r[ée]sum[ée]\w*|de quoi parle)|\b(resum\w+|de qu[ée] trata)", re.I),
}


rules.register("whole_document_request", "a question about a document as a whole (its summary, its sections, a comparison of two) is "
               "answered from its whole outline, not from the pages most like the question",
               "tests/test_overview.py::test_rule_a_request_for_a_summary_is_a_whole_document_question",
               pays_on="docs/experiments/2026-11-26-languages-and-whole-documents.md: evaluation/whole_document_bench.jsonl, ten documents' sections covered from their outlines")


@rules.switch("whole_document_request", stand_in=None)
def whole_document_request(question: str) -> str | None:
    """Rule: a question about a document as a whole (its summary, its sections, a comparison of two) is
    answered from its whole outline, not from the pages most like the question.

    whole_document_request("Summarise this document.") -> "summary"
    whole_document_request("What are the chapters of the manual?") -> "outline"
    whole_document_request("What was the revenue in 2022?") -> None
    """
    for kind, pattern in _KINDS.items():
        if pattern.search(question):
            return kind
    return None


# -----------------------------------------------------------------------------
# Which document


@dataclass
class Document:
    collection: str
    name: str
    pages: int
    labelled: int  # pages with a label (the app labels pages in the background after upload)
    with_text: int  # pages that have text to label


def documents_meant(question: str, retriever: Retriever, scope: list[str] | None) -> list[Document]:
    """The in-scope documents ``question`` names (routing.py), best first; else all in scope."""
    docs = {d["collection"]: d for d in ingest.list_documents(retriever.client)}
    in_scope = [c for c in (scope if scope is not None else list(docs)) if c in docs]
    named = [c for c in retriever.named_documents(question, in_scope) if c in docs] if len(in_scope) > 1 else []
    chosen = named or in_scope
    return [Document(c, docs[c].get("doc_name", c), docs[c]["pages"], docs[c].get("enriched_pages", 0),
                     docs[c]["pages"] - docs[c].get("empty_pages", 0)) for c in chosen]


def which_document_text(docs: list[Document], kind: str) -> str:
    """What to ask when a question about "the document" could mean several."""
    listed = "\n".join(f"- {d.name} ({d.pages} page{'s' if d.pages != 1 else ''})" for d in docs[: config.WHOLE_DOCUMENT_LIST])
    more = f"\n- … and {len(docs) - config.WHOLE_DOCUMENT_LIST} more" if len(docs) > config.WHOLE_DOCUMENT_LIST else ""
    verb = "compare" if kind == "compare" else "summarise"
    return (f"Which document should I {verb}? {len(docs)} are in scope; name one in your question "
            f"or choose it under *Ask only these documents* (or `documents` in the API):\n{listed}{more}")


# -----------------------------------------------------------------------------
# Reading a document section by section


def section_text(retriever: Retriever, collection: str, section: Section) -> tuple[str, int]:
    """The opening of a section as it is stored (up to WHOLE_DOCUMENT_SECTION_CHARS, from its first
    pages on), and the page it starts on; what the model reads and what its sentence is checked against."""
    text, first = "", section.start
    for page in range(section.start, section.end + 1):
        passages = retriever.page_passages(collection, page)
        if not passages:
            continue
        if not text:
            first = page
        text += ("\n" if text else "") + page_text(passages)
        if len(text) >= config.WHOLE_DOCUMENT_SECTION_CHARS:
            break
    return text[: config.WHOLE_DOCUMENT_SECTION_CHARS], first


def section_labels(retriever: Retriever, collection: str, section: Section) -> list[str]:
    """The distinct labels (titles) the app gave the section's pages, in page order."""
    titles = retriever.page_titles(collection)
    return list(dict.fromkeys(titles[p] for p in range(section.start, section.end + 1) if titles.get(p)))


def gist(llm: BaseChatModel, section: Section, text: str, language: str) -> str:
    """One sentence from the model on what a section covers, read from its opening text (fenced: data)."""
    messages = [
        SystemMessage(prompts.SECTION_SYSTEM),
        HumanMessage(prompts.SECTION_USER.format(title=fence_text(section.title), text=fence_text(text),
                                                 language=language_name(language))),
    ]
    reply = llm.bind(max_tokens=config.WHOLE_DOCUMENT_GIST_TOKENS).invoke(messages).content
    sentence = " ".join(str(reply).split())
    return sentence.split("\n")[0][: config.WHOLE_DOCUMENT_GIST_CHARS]


@dataclass
class Reading:
    """The sources of a whole-document answer, one per section line: what was read there."""
    sources: list[Hit]


def section_hit(doc: Document, section: Section, text: str, first: int) -> Hit:
    return Hit(id=f"{doc.collection}:{first}:section", collection=doc.collection, doc_name=doc.name, page=first,
               start=0, end=len(text), text=text, title=section.title, score=0.0, trace={"section": page_range(section), "source": section.source})


def outline_lines(doc: Document, sections: list[Section], retriever: Retriever) -> Iterator[tuple[str, Hit]]:
    for section in sections:
        text, first = section_text(retriever, doc.collection, section)
        yield f"{section.title} ({page_range(section)})", section_hit(doc, section, text, first)


def header(doc: Document, sections: list[Section]) -> str:
    source = {"toc": "its table of contents", "headings": "its headings", "labels": "the labels of its pages",
              "pages": "its pages in order"}[sections[0].source]
    text = f"**{doc.name}**: {doc.pages} pages, {len(sections)} sections (from {source})."
    if doc.labelled < doc.with_text and config.ENRICH_ENABLED:
        text += (f" Its pages are still being labelled ({doc.labelled} of {doc.with_text} done): sections not read "
                 f"below are described by the labels there are.")
    return text


def read_document(
    kind: str, docs: list[Document], retriever: Retriever, llm: BaseChatModel, question: str,
    stage: Callable[[str], None],
) -> Iterator[str | Reading]:
    """The answer's text piece by piece, then one Reading (its sources) as the last item."""
    sources: list[Hit] = []
    if kind == "compare":
        yield from compare(docs[:2], retriever, sources)
        yield Reading(sources)
        return
    doc = docs[0]
    pdf = ingest.kept_pdf_path(doc.collection, ingest.store_dir(retriever.client))  # beside the store searched
    sections = document_outline(pdf, retriever.page_titles(doc.collection), doc.pages)
    yield header(doc, sections) + "\n\n"
    language = question_language(question)
    deadline, last_read = time.perf_counter() + config.WHOLE_DOCUMENT_SECONDS, 0.0
    out_of_time = False
    for number, (line, hit) in enumerate(outline_lines(doc, sections, retriever), 1):
        sources.append(hit)
        if kind == "summary":
            # a section is read only when, at the pace of the last one, it ends within the budget
            out_of_time = out_of_time or time.perf_counter() + last_read > deadline
            if not out_of_time and hit.text.strip():
                stage(f"Reading section {number} of {len(sections)}…")
                started = time.perf_counter()
                said = gist(llm, sections[number - 1], hit.text, language)
                last_read = time.perf_counter() - started
            else:
                labels = section_labels(retriever, doc.collection, sections[number - 1])
                said = ("Its pages: " + "; ".join(labels[:3]) + ".") if labels else ""
            line = f"**{line}**: {said} [{number}]" if said else f"**{line}** [{number}]"
        else:
            line = f"{line} [{number}]"
        yield f"{number}. {line}\n"
    if out_of_time:
        yield (f"\n*The time for reading ({config.WHOLE_DOCUMENT_SECONDS} s) ran out: the sections without a sentence "
               f"were not read; their pages' labels are shown where there are any.*\n")
    yield Reading(sources)


def _normal(title: str) -> str:
    return " ".join(re.sub(r"^[\dIVXivx.]+\s+", "", title).lower().split())


def compare(docs: list[Document], retriever: Retriever, sources: list[Hit]) -> Iterator[str]:
    """Two documents' sections side by side: those in both (by title), those in one only."""
    store = ingest.store_dir(retriever.client)  # the kept PDFs: beside the store searched
    outlines = [document_outline(ingest.kept_pdf_path(d.collection, store), retriever.page_titles(d.collection), d.pages) for d in docs]
    titles = [{_normal(s.title) for s in sections} for sections in outlines]
    yield f"Comparing **{docs[0].name}** ({docs[0].pages} pages) with **{docs[1].name}** ({docs[1].pages} pages), section by section.\n\n"
    for doc, sections, other in ((docs[0], outlines[0], titles[1]), (docs[1], outlines[1], titles[0])):
        only = [s for s in sections if _normal(s.title) not in other]
        shared = len(sections) - len(only)
        yield f"**Only in {doc.name}** ({len(only)} of {len(sections)} sections; {shared} in both):\n"
        for section in only:
            text, first = section_text(retriever, doc.collection, section)
            sources.append(section_hit(doc, section, text, first))
            yield f"- {section.title} ({page_range(section)}) [{len(sources)}]\n"
        yield "\n"
