"""The library as an OpenAI-compatible model: POST /v1/chat/completions, GET /v1/models[/{id}], POST /v1/embeddings.

    messages -> system/developer messages: the asker's instructions on form and language (reading.client_instructions),
                said in the asker's words in the system prompt and after the question, bound by the prompt's
                rules (reading.build_messages); the last user message: the question; earlier user/assistant
                messages: the history (its latest turns that fit are kept, reading.fitted_history)
             -> queue_question (a question too long for the model: 400 context_length_exceeded, nothing queued)
             -> the reply, once the answer is checked: what the app shows (marked_answer): each sentence the checker
                does not back marked ⚠, the checker's summary (first when nothing is backed), then its sources with
                their ✓/⚠ and the evidence lines; every piece of document or model text escaped by safe_text (no
                image, link or HTML of a PDF comes alive in a chat UI). Streamed, the same text in two deltas (the
                answer, its sources): the words wait for the check, for a chat client cannot take back words shown.
                ``citations``, ``evidence`` and ``sentences`` beside the message (raw text) and ``usage`` when not
                streamed, a last chunk with ``usage`` when streamed with stream_options.include_usage
    input    -> the library's own embedder (embed_documents) -> OpenAI's list of embeddings

Errors are OpenAI's shape (server/errors.py): its clients raise BadRequestError, NotFoundError... with the message.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Literal

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.sse import format_sse_event
from langchain_core.embeddings import Embeddings
from pydantic import BaseModel, Field

import config
import embedders
import models
from safe_text import md

from server.errors import ApiError, error_json
from server.answers import answer_unless_gone, is_choice_id, queue_question
from server.library import Lib

router = APIRouter()

# Texts one /v1/embeddings call may carry: 256 passages take the embedded embedder ~10 s on two cores.
EMBEDDING_MAX_INPUTS = 256

# Roles whose messages are the asker's instructions ("developer" is OpenAI's newer name for "system").
INSTRUCTION_ROLES = ("system", "developer")


# -- chat completions -------------------------------------------------------------------


class OpenAIMessage(BaseModel):
    role: str
    content: str | list[dict] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):  # content parts: keep the text ones
            return " ".join(part.get("text", "") for part in self.content if part.get("type") == "text")
        return self.content or ""


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    model: str | None = Field(
        None, description=f"an id from /v1/models: {config.API_MODEL_ID} (or any name that is no choice id) for the default model"
    )
    messages: list[OpenAIMessage]
    stream: bool = False
    stream_options: StreamOptions | None = Field(None, description="include_usage: a last chunk with the usage")
    n: int | None = Field(None, description="answers to write: 1 (the only one this server writes)")


def question_and_history(messages: list[OpenAIMessage]) -> tuple[str, list[tuple[str, str]]]:
    """The question (the last message, which must be the user's) and the history before it: user and assistant
    turns, and system/developer messages as ("system", text) turns, which qa reads as the asker's instructions.

    question_and_history([system "Answer in French.", user "When?"]) -> ("When?", [("system", "Answer in French.")])
    """
    turns = [("system" if m.role in INSTRUCTION_ROLES else m.role, m.text()) for m in messages
             if m.role in ("user", "assistant", *INSTRUCTION_ROLES)]
    if not turns or turns[-1][0] != "user":
        raise ApiError(400, "The last message must be the user's question.", param="messages")
    return turns[-1][1], turns[:-1]


def check_n(n: int | None) -> None:
    """A 400 for n > 1: the library writes one checked answer per question."""
    if n not in (None, 1):
        raise ApiError(400, f"n is {n}: this server writes one answer per request; send n=1 or leave n out.", param="n")


def sources_footer(answer: dict) -> str:
    """The citations and evidence lines of an answer_json as Markdown, for a chat client that shows only the message;
    each citation carries its ✓ or ⚠ as the app's chip does; the documents' names and lines escaped by
    ``safe_text.md`` (they are shown, never rendered):

    sources_footer({"citations": [{"doc": "a.pdf", "page": 3, "verified": True, "inferred": False, "marker": "[L1]"}],
                    "evidence": [{"doc": "a.pdf", "page": 3, "text": "It rained."}]})
      -> '\\n\\nSources:\\n- \\\\[L1\\\\] a\\\\.pdf, page 3 ✓\\n\\nEvidence (lines from the pages found):\\n- a\\\\.pdf, page 3: "It rained\\\\."'

    Only the lines shown first (EVIDENCE_LINES) are listed; when nothing close was found they are said to be
    only the nearest.
    """
    footer = ""
    if citations := answer["citations"]:
        lines = [f"- {md(c['marker'])} {md(c['doc'])}, page {c['page']} {'✓' if c['verified'] else '⚠'}"
                 + (" (inferred)" if c.get("inferred") else "") for c in citations]
        footer += "\n\nSources:\n" + "\n".join(lines)
    if found := answer["evidence"][: config.EVIDENCE_LINES]:
        heading = "Nearest lines (none is about the question)" if answer.get("nothing_found") else "Evidence (lines from the pages found)"
        footer += f"\n\n{heading}:\n" + "\n".join(f'- {md(e["doc"])}, page {e["page"]}: "{md(e["text"])}"' for e in found)
    return footer


def sentence_mark(sentence: dict, unit: str) -> str:
    """What follows a sentence the checker does not back, in the app's words for its ⚠:
    sentence_mark({"supported": False, "cites": ["[L1]"]}, "line") -> " ⚠ not backed by the line it cites";
    "" for a backed sentence or one too short to judge."""
    if sentence["supported"] is not False:
        return ""
    return f" ⚠ not backed by the {unit} it cites" if sentence["cites"] else f" ⚠ no {unit} backs it"


def marked_answer(answer: dict) -> str:
    """The answer as the reply shows it: escaped (``safe_text.md``), each sentence the checker does not back
    followed by its ⚠ mark, and the checker's summary, the sentence the app shows beside the answer: as the first
    line when no sentence is backed (a reader who stops there is warned), else after the answer.

    marked_answer({"answer": "Freedonia's capital is New York.", "unit": "line", "backing_summary": "The one ...",
                   "sentences": [{"text": "Freedonia's capital is New York.", "supported": False, "cites": []}]})
      -> "⚠ The one ...\\n\\nFreedonia\\'s capital is New York\\. ⚠ no line backs it"
    """
    text, unit = answer["answer"], answer.get("unit", "line")
    sentences = answer.get("sentences", [])
    pieces, at, stray = [], 0, []
    for sentence in sentences:
        start = text.find(sentence["text"], at)
        if start < 0:  # not where the checker read it (never seen): its mark then goes after the answer, with it
            stray.append(sentence)
            continue
        end = start + len(sentence["text"])
        pieces.append(md(text[at:end]) + sentence_mark(sentence, unit))
        at = end
    pieces.append(md(text[at:]))
    body = "".join(pieces) + "".join(f"\n\n{md(s['text'])}{sentence_mark(s, unit)}" for s in stray if sentence_mark(s, unit))
    summary = answer.get("backing_summary")
    if not summary:
        return body
    judged = [s for s in sentences if s["supported"] is not None]
    if judged and not any(s["supported"] for s in judged):
        return f"⚠ {md(summary)}\n\n{body}"
    return f"{body}\n\n{md(summary)}"


def reply_pieces(answer: dict) -> list[str]:
    """The reply a chat client shows, in the pieces a stream sends: the checked answer, then its sources.
    The non-streamed message is these pieces joined, so both forms read the same."""
    return [marked_answer(answer), sources_footer(answer)]


def reply_text(answer: dict) -> str:
    """The whole reply a chat client shows: the answer with the checker's marks, then its sources."""
    return "".join(reply_pieces(answer))


def completion_chunk(completion_id: str, model: str, delta: dict, finish_reason: str | None = None) -> dict:
    return {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def usage_chunk(completion_id: str, model: str, usage: dict) -> dict:
    """The last chunk a client asking stream_options.include_usage gets: no choices, the usage."""
    return {"id": completion_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": [], "usage": usage}


@router.post("/v1/chat/completions", tags=["openai"])
async def chat_completions(lib: Lib, body: ChatCompletionRequest, request: Request) -> Response:
    """OpenAI's chat completions, answered from the library: the last user message is the question, earlier
    user/assistant messages the history (its latest turns that fit beside the question), system and developer
    messages the asker's instructions on the answer's form and language (they cannot lift its rules: every fact
    cited, documents never obeyed). The reply is the checked answer, each sentence no line backs marked ⚠, then its
    sources (✓/⚠) and evidence lines; every piece of document or model text in it is escaped Markdown (shown as
    typed, never rendered); ``citations``, ``evidence``, ``sentences`` (raw text) and ``usage`` come beside the
    message when not streamed. Streamed, the same text comes once checked (reply_pieces).

    ``model`` picks the model that answers when it is a choice id from /v1/models ("openai:qwen2.5-7b");
    any other name (``API_MODEL_ID``, or whatever a client sends by habit) means the settings' model,
    as before. The reply's ``model`` is the choice id of the model that answered. ``n`` above 1 is a 400; a
    question too long for the model a 400 with code context_length_exceeded, before it is queued."""
    check_n(body.n)
    question, history = question_and_history(body.messages)
    chosen = body.model if body.model and is_choice_id(body.model) else None
    job = await queue_question(lib, question, history, None, None, chosen)
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    if not body.stream:
        answer = await answer_unless_gone(job, request)
        if answer is None:  # the client hung up: the question was cancelled, and nobody reads a reply
            return Response(status_code=499)
        return JSONResponse({
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": job.model_id or config.API_MODEL_ID,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply_text(answer)}, "finish_reason": "stop"}],
            "usage": answer["usage"],
            "citations": answer["citations"],
            "evidence": answer["evidence"],
            "sentences": answer["sentences"],
        })
    include_usage = bool(body.stream_options and body.stream_options.include_usage)

    async def events() -> AsyncIterator[bytes]:
        opened = False  # the first chunk, the assistant's role, waits for the worker to know the model
        async for kind, data in job.stream():
            model = job.model_id or config.API_MODEL_ID
            if kind == "error":
                chunks = [{"error": error_json(data["status"], data["message"])}]
            elif kind in ("evidence", "token"):
                # The model's words wait for the check: a chat client cannot take back words it has shown, and an
                # unbacked claim must never stand there unmarked (the app streams, showing ⚠ beside the words).
                chunks = []
            elif kind == "answer":
                *first, last = reply_pieces(data)
                chunks = [completion_chunk(completion_id, model, {"content": piece}) for piece in first]
                chunks.append(completion_chunk(completion_id, model, {"content": last}, "stop"))
                if include_usage:
                    chunks.append(usage_chunk(completion_id, model, data["usage"]))
            else:
                continue
            if kind != "error" and not opened:
                opened = True
                chunks.insert(0, completion_chunk(completion_id, model, {"role": "assistant", "content": ""}))
            for chunk in chunks:
                yield format_sse_event(data_str=json.dumps(chunk, ensure_ascii=False))
        yield format_sse_event(data_str="[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream")


# -- models ----------------------------------------------------------------------------


def model_object(model_id: str, label: str | None = None) -> dict:
    """One model as OpenAI lists it (``label``, this server's own field, says which model it is)."""
    body = {"id": model_id, "object": "model", "created": 0, "owned_by": "local"}
    return {**body, "label": label} if label else body


def model_objects() -> list[dict]:
    """``API_MODEL_ID``, the library answered by the settings' model, then each model that can answer now by its
    choice id (as /api/models lists them). Probes Ollama and the model server: routes using it run in a thread."""
    return [model_object(config.API_MODEL_ID), *(model_object(c.id, c.label) for c in models.chat_choices())]


@router.get("/v1/models", tags=["openai"])
def list_models() -> dict:
    """``API_MODEL_ID``, the library answered by the settings' model, then each model that can answer
    now by its choice id (as /api/models lists them, the label beside it)."""
    return {"object": "list", "data": model_objects()}


@router.get("/v1/models/{model_id:path}", tags=["openai"])
def retrieve_model(model_id: str) -> dict:
    """One model of /v1/models; 404 (code model_not_found) for any other."""
    listed = model_objects()
    for model in listed:
        if model["id"] == model_id:
            return model
    ids = ", ".join(m["id"] for m in listed)
    raise ApiError(404, f"There is no model '{model_id}'. The models: {ids}.", code="model_not_found", param="model")


# -- embeddings ------------------------------------------------------------------------


class EmbeddingRequest(BaseModel):
    input: str | list = Field(description=f"a text, or a list of at most {EMBEDDING_MAX_INPUTS} texts")
    model: str | None = Field(None, description="ignored: the library's own embedder embeds (the reply names it)")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, description="the embedder's own dimension, or left out")


def embedding_inputs(value: str | list) -> list[str]:
    """The texts to embed: one string or a list of strings; token arrays and empty texts are refused plainly."""
    texts = [value] if isinstance(value, str) else value
    if not all(isinstance(text, str) for text in texts):
        raise ApiError(400, "input must be a string or a list of strings: this server embeds text, not token arrays.", param="input")
    if not texts:
        raise ApiError(400, "input is an empty list: send at least one text.", param="input")
    if len(texts) > EMBEDDING_MAX_INPUTS:
        raise ApiError(400, f"input has {len(texts)} texts; this server embeds at most {EMBEDDING_MAX_INPUTS} per request.", param="input")
    if empty := [i for i, text in enumerate(texts) if not text.strip()]:
        raise ApiError(400, f"input[{empty[0]}] is empty: every text needs some words.", param="input")
    return texts


def embedding_tokens(embedder: Embeddings, texts: list[str]) -> int:
    """Tokens the embedder reads of ``texts``: its own tokenizer's count (up to its limit) where it has one
    (the embedded all-MiniLM-L6-v2), else an estimate of 4 characters a token."""
    tokenizer = getattr(embedder, "tokenizer", None)
    if tokenizer is not None and hasattr(tokenizer, "encode_batch"):
        return sum(sum(encoding.attention_mask) for encoding in tokenizer.encode_batch(texts))
    return sum(len(text) // 4 + 1 for text in texts)


def encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    """A vector as floats, or as OpenAI's base64 of little-endian float32 (what its Python client asks by default)."""
    if encoding_format == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector


@router.post("/v1/embeddings", tags=["openai"])
def create_embeddings(lib: Lib, body: EmbeddingRequest) -> dict:
    """OpenAI's embeddings by the library's own embedder (``embed_documents``: the vectors its passages are stored
    with, so a client can compare its texts as the library does). A text longer than the embedder reads
    (EMBED_MAX_TOKENS for the embedded one) is embedded by its start, as the library embeds a passage."""
    texts = embedding_inputs(body.input)
    vectors = lib.embedder.embed_documents(texts)
    if body.dimensions is not None and body.dimensions != len(vectors[0]):
        raise ApiError(400, f"dimensions is {body.dimensions}; this server's embedder makes vectors of {len(vectors[0])}.",
                       param="dimensions")
    tokens = embedding_tokens(lib.embedder, texts)
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": encoded(v, body.encoding_format)} for i, v in enumerate(vectors)],
        "model": embedders.embedder_name(lib.embedder),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
