"""JSON shapes: how documents, hits, evidence lines, answers and conversations look over HTTP.
"""

from __future__ import annotations

import time


import conversations
import ingest
import qa
from checker import Citation
from records import Hit


# -----------------------------------------------------------------------------
# JSON shapes


def document_json(doc: dict, enricher: ingest.BackgroundEnricher | None) -> dict:
    """A document as the API shows it: counts, OCR'd pages and the state of its page labels."""
    sources = doc.get("page_sources", "")
    labelling = enricher.progress().get(doc["collection"]) if enricher is not None else None
    if labelling is not None and labelling.state != "done":
        labels = {"state": labelling.state, "done": labelling.done, "total": labelling.total, "message": labelling.message}
    else:
        state = "done" if not ingest.labels_missing(doc) else ("off" if enricher is None else "waiting")
        labels = {"state": state, "done": doc.get("enriched_pages", 0), "total": doc["pages"] - doc.get("empty_pages", 0)}
    return {
        "id": doc["collection"],
        "name": doc["doc_name"],
        "pages": doc["pages"],
        "passages": doc.get("chunks"),
        "ocr_pages": [n for n, s in enumerate(sources, 1) if s == "O"],
        "empty_pages": [n for n, s in enumerate(sources, 1) if s == "E"],
        "cut_pages": ingest.cut_pages_in(doc),  # pages whose text passed MAX_PAGE_CHARS: [{"page", "kept", "dropped"}]
        "labels": labels,
        "sha256": doc.get("sha256"),
        "embedder": doc.get("embedder"),
        "language": doc.get("language") or None,
        "created_at": doc.get("created_at"),
    }


def hit_json(hit: Hit) -> dict:
    return {
        "document_id": hit.collection,
        "doc": hit.doc_name,
        "page": hit.page,
        "passage_id": hit.id,
        "passage": hit.text,
        "start": hit.start,
        "end": hit.end,
        "title": hit.title,
        "keywords": hit.keywords,
        "score": round(hit.score, 6),
        "trace": hit.trace,
    }


def line_json(line: Hit) -> dict:
    """An evidence line as /api/search returns it: qa.evidence_json's fields, its span on the page
    (``[start, end)`` of the page text) and the trace of its ranking (keyword, meaning, page_rank, kind)."""
    [body] = qa.evidence_json([line])
    return {**body, "start": line.start, "end": line.end, "title": line.title, "keywords": line.keywords, "trace": line.trace}


def citation_json(answer: qa.Answer, citation: Citation) -> dict:
    """A citation with the line (or passage) the model read as its number: its text, span and id."""
    hit = answer.cited(citation)
    return {**qa.citation_json(citation, hit), "document_id": citation.collection, "passage": hit.text, "passage_id": hit.id}


def answer_json(answer: qa.Answer, model_id: str | None = None) -> dict:
    """``qa.Answer.to_json`` with each citation's document id and passage, and the passages shown.
    ``model`` is the label of the model that wrote the text, ``model_id`` its choice id (both None
    when no model did: a greeting, a refusal decided by the search, a figure worked out in code)."""
    body = answer.to_json()
    body["model_id"] = model_id if answer.model else None
    body["citations"] = [citation_json(answer, c) for c in answer.citations]
    body["sources"] = [hit_json(h) for h in answer.sources]
    return body


def iso_time(seconds: float) -> str:
    """iso_time(0) -> "1970-01-01T00:00:00Z" """
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def conversation_json(conversation: conversations.Conversation) -> dict:
    """A conversation as the list shows it: id, title, times (UTC) and how many messages it holds."""
    return {
        "id": conversation.id,
        "title": conversation.title,
        "created": iso_time(conversation.created),
        "updated": iso_time(conversation.updated),
        "message_count": conversation.count,
    }


def message_json(message: dict) -> dict:
    """A kept message: a question's text; an answer's text, its evidence lines and, unless answering
    failed (``error``), the answer as /api/ask returned it (citations with their passages, sources)."""
    if message["role"] != "assistant":
        return {"role": message["role"], "content": message["content"]}
    body = {"role": "assistant", "content": message.get("content", ""), "evidence": qa.evidence_json(message.get("evidence", []))}
    if message.get("error"):
        body["error"] = message["error"]
    if "answer" in message:
        body["answer"] = answer_json(message["answer"], message.get("model_id"))
    return body
