"""The library as an OpenAI-compatible model: POST /v1/chat/completions and GET /v1/models.

The last user message is the question, earlier turns the history; the reply ends with its sources and
evidence lines as text (and as ``citations`` and ``evidence`` fields when not streamed).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.sse import format_sse_event
from pydantic import BaseModel, Field

import config
import models

from server.errors import ApiError
from server.answers import answer_unless_gone, is_choice_id, queue_question
from server.library import Lib

router = APIRouter()


# -- OpenAI-compatible ---------------------------------------------------------------


class OpenAIMessage(BaseModel):
    role: str
    content: str | list[dict] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):  # content parts: keep the text ones
            return " ".join(part.get("text", "") for part in self.content if part.get("type") == "text")
        return self.content or ""


class ChatCompletionRequest(BaseModel):
    model: str | None = Field(
        None, description=f"an id from /v1/models: {config.API_MODEL_ID} (or any name that is no choice id) for the default model"
    )
    messages: list[OpenAIMessage]
    stream: bool = False


def sources_footer(answer: dict) -> str:
    """The citations and evidence lines of an answer_json as text, for a chat client that shows only the message:

    sources_footer({"citations": [{"doc": "a.pdf", "page": 3, "verified": True, "marker": "[1]"}],
                    "evidence": [{"doc": "a.pdf", "page": 3, "text": "It rained."}]})
      -> '\\n\\nSources:\\n- [1] a.pdf, page 3 (verified)\\n\\nEvidence (lines from the pages found):\\n- a.pdf, page 3: "It rained."'

    Only the lines shown first (EVIDENCE_LINES) are listed; when nothing close was found they are said to be
    only the nearest.
    """
    footer = ""
    if citations := answer["citations"]:
        lines = [f"- {c['marker']} {c['doc']}, page {c['page']} ({'verified' if c['verified'] else 'not backed by the page'})"
                 for c in citations]
        footer += "\n\nSources:\n" + "\n".join(lines)
    if found := answer["evidence"][: config.EVIDENCE_LINES]:
        heading = "Nearest lines (none is about the question)" if answer.get("nothing_found") else "Evidence (lines from the pages found)"
        footer += f"\n\n{heading}:\n" + "\n".join(f'- {e["doc"]}, page {e["page"]}: "{e["text"]}"' for e in found)
    return footer


def completion_chunk(completion_id: str, model: str, delta: dict, finish_reason: str | None = None) -> dict:
    return {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


@router.post("/v1/chat/completions", tags=["openai"])
async def chat_completions(lib: Lib, body: ChatCompletionRequest, request: Request) -> Response:
    """OpenAI's chat completions, answered from the library: the last user message is the
    question, earlier user/assistant messages the history; the reply ends with its sources and
    evidence lines (also as ``citations`` and ``evidence`` beside the message when not streamed).

    ``model`` picks the model that answers when it is a choice id from /v1/models ("openai:qwen2.5-7b");
    any other name (``API_MODEL_ID``, or whatever a client sends by habit) means the settings' model,
    as before. The reply's ``model`` is the choice id of the model that answered."""
    turns = [(m.role, m.text()) for m in body.messages if m.role in ("user", "assistant")]
    if not turns or turns[-1][0] != "user":
        raise ApiError(400, "The last message must be the user's question.")
    chosen = body.model if body.model and is_choice_id(body.model) else None
    job = await queue_question(lib, turns[-1][1], turns[:-1], None, None, chosen)
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    if not body.stream:
        answer = await answer_unless_gone(job, request)
        if answer is None:  # the client hung up: the question was cancelled, and nobody reads a reply
            return Response(status_code=499)
        message = {"role": "assistant", "content": answer["answer"] + sources_footer(answer)}
        return JSONResponse({
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": job.model_id or config.API_MODEL_ID,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "citations": answer["citations"],
            "evidence": answer["evidence"],
        })

    async def events() -> AsyncIterator[bytes]:
        opened = False  # the first chunk, the assistant's role, waits for the worker to know the model
        async for kind, data in job.stream():
            if kind == "error":
                chunk = {"error": {"message": data["message"], "status": data["status"]}}
            elif kind in ("evidence", "token", "answer"):
                model = job.model_id or config.API_MODEL_ID
                if not opened:
                    opened = True
                    yield format_sse_event(data_str=json.dumps(completion_chunk(completion_id, model, {"role": "assistant", "content": ""})))
                if kind == "evidence":
                    continue
                if kind == "token":
                    chunk = completion_chunk(completion_id, model, {"content": data["text"]})
                else:
                    chunk = completion_chunk(completion_id, model, {"content": sources_footer(data)}, "stop")
            else:
                continue
            yield format_sse_event(data_str=json.dumps(chunk, ensure_ascii=False))
        yield format_sse_event(data_str="[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream")


@router.get("/v1/models", tags=["openai"])
def list_models() -> dict:
    """``API_MODEL_ID``, the library answered by the settings' model, then each model that can answer
    now by its choice id (as /api/models lists them, the label beside it)."""
    library = {"id": config.API_MODEL_ID, "object": "model", "created": 0, "owned_by": "local"}
    choices = [{"id": c.id, "object": "model", "created": 0, "owned_by": "local", "label": c.label} for c in models.chat_choices()]
    return {"object": "list", "data": [library, *choices]}
