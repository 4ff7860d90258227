"""The HTTP API as a client sees it: a real Uvicorn process serving api.py on a free port,
with its own temp store, the real embedder and the small embedded chat model, reached
through httpx (and, for /v1, the openai client library).

One server per module (starting one loads the models); the tests of the main server run
in file order on one library: upload, search, ask, page image, bad inputs, then delete.
A second server, started with API_TOKEN and an Ollama that does not answer, covers the
token check and the 409/503 replies; a third, on a ChromaDB server that then stops, the
503 for a lost store.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import openai
import pymupdf
import pytest

import bench
from conftest import FACT_PAGES, TEST_LLM, write_text_pdf

QUESTION = "When did the railway reach the town?"
ANSWER_LINE = "The railway reached the town in 1889."  # page 3 of facts.pdf
HOSTILE = '<img src="http://127.0.0.1:9/x.png"> **[click](http://127.0.0.1:9)**'  # text in a PDF, nothing more


def start_server(folder: Path, **settings: str) -> tuple[subprocess.Popen, str]:
    """``uvicorn api:app`` on a free port with its own store and log; (process, base URL)."""
    env = {
        "CHROMA_PERSIST_DIR": str(folder / "store"),
        "CHROMA_HOST": "",
        "CHROMA_PORT": "8000",
        "LOG_FILE": str(folder / "rag.log"),
        "LLM_BACKEND": "embedded",
        "EMBED_BACKEND": "embedded",
        "EMBEDDED_LLM": TEST_LLM,
        "ENRICH_ENABLED": "false",  # page labels would compete with the answers for the CPU
        "OLLAMA_BASE_URL": f"http://127.0.0.1:{bench.free_port()}",  # nothing listens there
        "MAX_FILE_MB": "1",
        "API_TOKEN": "",
        **settings,
    }
    headers = {"Authorization": f"Bearer {settings['API_TOKEN']}"} if settings.get("API_TOKEN") else None
    return bench.start_api_server(env, folder / "server.out", headers)


def sse_events(response: httpx.Response):
    """(event, parsed data) for each server-sent event of a streamed response."""
    event, data = "message", []
    for line in response.iter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            text = "\n".join(data)
            yield event, (text if text == "[DONE]" else json.loads(text))
            event, data = "message", []


def error_of(response: httpx.Response) -> tuple[int, str]:
    assert response.headers["content-type"].startswith("application/json"), response.text
    body = response.json()
    assert body["error"]["status"] == response.status_code
    return response.status_code, body["error"]["message"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pdfs")
    encrypted = pymupdf.open()
    encrypted.new_page().insert_text((72, 72), "secret")
    encrypted.save(folder / "locked.pdf", encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="pw", owner_pw="pw")
    (folder / "notes.pdf").write_text("just some notes, not a PDF")
    (folder / "huge.pdf").write_bytes(b"%PDF-1.7\n" + b"0" * (2 << 20))  # over MAX_FILE_MB=1
    return {
        "facts": write_text_pdf(folder / "facts.pdf", FACT_PAGES),
        "other": write_text_pdf(folder / "other.pdf", [f"Bees raise a new queen on royal jelly. {HOSTILE}"]),
        "locked": folder / "locked.pdf",
        "notes": folder / "notes.pdf",
        "huge": folder / "huge.pdf",
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc, url = start_server(tmp_path_factory.mktemp("api"))
    yield url
    bench.stop_api_server(proc)


@pytest.fixture(scope="module")
def api(server):
    with httpx.Client(base_url=server, timeout=300) as client:
        yield client


def upload_and_wait(api: httpx.Client, pdf: Path) -> tuple[dict, list[tuple[str, dict]]]:
    """Upload one PDF, follow its job's event stream to the end; (final job, all events)."""
    response = api.post("/api/documents", files={"files": (pdf.name, pdf.read_bytes(), "application/pdf")})
    assert response.status_code == 202, response.text
    [job] = response.json()["jobs"]
    assert job["file"] == pdf.name
    with api.stream("GET", f"/api/jobs/{job['id']}/events") as stream:
        events = list(sse_events(stream))
    final = api.get(f"/api/jobs/{job['id']}").json()
    assert events[-1] == (final["state"], final)
    return final, events


@pytest.fixture(scope="module")
def facts_id(api, files) -> str:
    final, _ = upload_and_wait(api, files["facts"])
    assert final["state"] == "done", final
    return final["document_id"]


# -----------------------------------------------------------------------------
# The main server


def test_an_upload_reports_its_progress_until_it_is_searchable(api, files, facts_id):
    final, events = upload_and_wait(api, files["other"])
    assert final["state"] == "done" and final["pages"] == 1 and final["cached"] is False
    assert all(kind == "progress" for kind, _ in events[:-1])
    assert final["current"] == final["total"] == 1 and final["progress"] == 1.0

    docs = {d["name"]: d for d in api.get("/api/documents").json()["documents"]}
    assert set(docs) == {"facts.pdf", "other.pdf"}
    facts = api.get(f"/api/documents/{facts_id}").json()
    assert (facts["pages"], facts["passages"], facts["ocr_pages"], facts["labels"]["state"]) == (3, 3, [], "off")
    response = api.post("/api/search", json={"query": "royal jelly queen"})
    hits = response.json()["results"]
    assert (hits[0]["doc"], hits[0]["page"]) == ("other.pdf", 1)
    assert response.headers["content-type"] == "application/json"  # untrusted text travels as plain JSON strings
    assert HOSTILE in " ".join(hits[0]["passage"].split())


def test_the_same_file_again_is_recognised_by_its_hash(api, files, facts_id):
    final, _ = upload_and_wait(api, files["facts"])
    assert final["state"] == "done" and final["cached"] is True and final["document_id"] == facts_id
    assert [d["name"] for d in api.get("/api/documents").json()["documents"]].count("facts.pdf") == 1


def test_search_ranks_pages_with_their_trace_within_a_scope(api, facts_id):
    body = api.post("/api/search", json={"query": QUESTION, "documents": [facts_id], "k": 2}).json()
    assert len(body["results"]) == 2
    top = body["results"][0]
    assert (top["document_id"], top["page"]) == (facts_id, 3)
    assert "railway reached the town in 1889" in top["passage"]
    assert top["trace"]["semantic_rank"] == 1 and top["trace"]["bm25_rank"] == 1
    assert {h["document_id"] for h in body["results"]} == {facts_id}


def test_search_by_line_returns_the_lines_that_answer(api, facts_id):
    body = api.post("/api/search", json={"query": QUESTION, "unit": "line", "k": 2}).json()
    assert body["unit"] == "line" and len(body["results"]) == 2
    top = body["results"][0]
    assert (top["document_id"], top["doc"], top["page"]) == (facts_id, "facts.pdf", 3)
    assert top["text"] == ANSWER_LINE and top["trace"]["page_rank"] == 1
    assert {"document_id", "doc", "page", "text", "score", "start", "end", "trace"} <= set(top)
    assert "passage_id" not in top  # a line is no stored passage
    default = api.post("/api/search", json={"query": QUESTION, "unit": "line"}).json()["results"]
    assert len(default) == 3 and default[0]["text"] == ANSWER_LINE  # EVIDENCE_LINES, the best page's best line first
    pages = api.post("/api/search", json={"query": QUESTION, "k": 2}).json()
    assert pages["unit"] == "page" and "passage" in pages["results"][0]  # pages stay the default


def verified_pages(answer: dict) -> set[tuple[str, int]]:
    return {(c["document_id"], c["page"]) for c in answer["citations"] if c["verified"]}


def evidence_pages(answer: dict) -> set[tuple[str, int, str]]:
    return {(e["document_id"], e["page"], e["text"]) for e in answer["evidence"]}


def test_ask_answers_as_json_with_a_verified_page_citation_and_the_evidence_lines(api, facts_id):
    answer = api.post("/api/ask", json={"question": QUESTION}).json()
    assert "1889" in answer["answer"] and answer["refused"] is False
    assert (facts_id, 3) in verified_pages(answer), answer
    cited = next(c for c in answer["citations"] if c["page"] == 3)
    assert cited["doc"] == "facts.pdf" and "railway reached the town in 1889" in cited["passage"]
    assert answer["confidence"] is not None and answer["rewritten_query"] is None
    assert answer["evidence"] and (facts_id, 3, ANSWER_LINE) in evidence_pages(answer), answer["evidence"]
    assert all(set(e) == {"document_id", "doc", "page", "text", "score"} for e in answer["evidence"])


def test_ask_streams_the_evidence_then_tokens_then_one_final_event_with_the_citations(api, facts_id):
    with api.stream("POST", "/api/ask", json={"question": QUESTION, "stream": True}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = list(sse_events(response))
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "queued" and kinds[-1] == "answer" and kinds.count("answer") == 1
    assert kinds.count("evidence") == 1 and kinds.index("evidence") < kinds.index("token"), kinds
    tokens = [data["text"] for kind, data in events if kind == "token"]
    answer = events[-1][1]
    assert len(tokens) >= 2 and "".join(tokens).strip() == answer["answer"]
    assert (facts_id, 3) in verified_pages(answer), answer
    lines = events[kinds.index("evidence")][1]
    assert lines == answer["evidence"] and (facts_id, 3, ANSWER_LINE) in evidence_pages(answer)


def test_a_follow_up_with_history_is_rewritten(api, facts_id):
    history = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": "In 1889 [1]."}]
    answer = api.post("/api/ask", json={"question": "And how long did the trains take?", "history": history, "k": 2}).json()
    assert answer["rewritten_query"]


def png_pixels(data: bytes) -> pymupdf.Pixmap:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return pymupdf.Pixmap(data)


def yellow_pixels(pix: pymupdf.Pixmap) -> int:
    samples, n = pix.samples, pix.n
    return sum(1 for i in range(0, len(samples), n) if samples[i] > 200 and samples[i + 1] > 180 and samples[i + 2] < 120)


def test_a_page_image_with_and_without_the_passage_highlighted(api, facts_id):
    top = api.post("/api/search", json={"query": QUESTION, "documents": [facts_id]}).json()["results"][0]
    plain = api.get(f"/api/documents/{facts_id}/pages/3.png", params={"width": 300})
    assert plain.status_code == 200 and plain.headers["content-type"] == "image/png"
    lit = api.get(f"/api/documents/{facts_id}/pages/3.png", params={"width": 300, "passage": top["passage_id"]})
    plain_pix, lit_pix = png_pixels(plain.content), png_pixels(lit.content)
    assert plain_pix.width == lit_pix.width == 300
    assert yellow_pixels(plain_pix) == 0 and yellow_pixels(lit_pix) > 100


def test_the_openai_client_gets_an_answer_with_its_sources_and_evidence_lines(server, facts_id):
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list()] == ["pdf-library"]
    evidence = f'\n\nEvidence (lines from the pages found):\n- facts.pdf, page 3: "{ANSWER_LINE}"'
    reply = client.chat.completions.create(model="pdf-library", messages=[{"role": "user", "content": QUESTION}])
    text = reply.choices[0].message.content
    assert "1889" in text and "Sources:\n- facts.pdf, page 3 (verified)" in text
    assert evidence in text and text.index("Sources:") < text.index("Evidence")
    assert (facts_id, 3, ANSWER_LINE) in evidence_pages(reply.model_extra)
    stream = client.chat.completions.create(model="pdf-library", messages=[{"role": "user", "content": QUESTION}], stream=True)
    chunks = [c.choices[0].delta.content or "" for c in stream]
    assert len(chunks) > 3 and "facts.pdf, page 3 (verified)" in "".join(chunks) and evidence in "".join(chunks)
    with pytest.raises(openai.BadRequestError, match="last message must be the user's question"):
        client.chat.completions.create(model="pdf-library", messages=[{"role": "system", "content": "Be brief."}])


def test_bad_uploads_get_their_status_and_plain_message_and_add_nothing(api, files, facts_id):
    before = api.get("/api/documents").json()

    def upload(*names: str) -> tuple[int, str]:
        return error_of(api.post("/api/documents", files=[("files", (files[n].name, files[n].read_bytes())) for n in names]))

    assert upload("notes") == (415, "notes.pdf is not a PDF file (it does not start like one).")
    status, message = upload("huge")
    assert status == 413 and message.startswith("huge.pdf is 2 MB; the limit is 1 MB")
    status, message = upload("locked")
    assert status == 400 and "password-protected" in message
    status, message = upload("other", "notes")  # one bad file: nothing of the request is queued
    assert status == 415 and message.endswith("Nothing was added.")
    assert error_of(api.post("/api/documents"))[0] == 400
    assert api.get("/api/documents").json() == before


def test_bad_requests_get_their_status_and_plain_message(api, facts_id):
    cases = [
        (api.post("/api/ask", json={"question": "  "}), 400, "The question is empty."),
        (api.post("/api/ask", json={"question": QUESTION, "k": 99}), 400, "k: Input should be less than or equal to 20"),
        (api.post("/api/ask", content=b"{not json", headers={"content-type": "application/json"}), 400, "The request body is not valid JSON."),
        (api.post("/api/ask", json={"question": QUESTION, "documents": ["pdf_rag_nope"]}), 404, "There is no document 'pdf_rag_nope' in the library."),
        (api.post("/api/search", json={"query": ""}), 400, "The query is empty."),
        (api.post("/api/search", json={"query": QUESTION, "unit": "bogus"}), 400, "unit: Input should be 'page' or 'line'"),
        (api.get("/api/documents/pdf_rag_nope"), 404, "There is no document 'pdf_rag_nope' in the library."),
        (api.get("/api/jobs/nope"), 404, "There is no job 'nope' (jobs are forgotten when the server restarts)."),
        (api.get(f"/api/documents/{facts_id}/pages/9.png"), 404, "facts.pdf has 3 pages; there is no page 9."),
        (api.get(f"/api/documents/{facts_id}/pages/1.png", params={"passage": "x"}), 404, "There is no passage 'x' on page 1 of facts.pdf."),
        (api.get("/api/nowhere"), 404, "Not Found: GET /api/nowhere. The endpoints are listed at /docs."),
    ]
    for response, status, message in cases:
        assert error_of(response) == (status, message)


def test_only_local_host_headers_are_served_without_a_token(api):
    status, message = error_of(api.get("/api/health", headers={"Host": "attacker.example:8765"}))
    assert status == 403 and "API_TOKEN" in message
    assert api.get("/api/health", headers={"Host": "localhost:8765"}).status_code == 200


def test_health_names_the_store_models_and_ollama(api):
    health = api.get("/api/health").json()
    assert health["ok"] and health["store"]["ok"] and health["store"]["documents"] == 2
    assert health["chat_model"] == {"name": "embedded Qwen2.5-Coder-0.5B-Instruct Q4", "ok": True}
    assert health["embedder"] == "all-MiniLM-L6-v2" and health["ollama"]["reachable"] is False


def test_openapi_page_lists_the_endpoints(api):
    paths = api.get("/openapi.json").json()["paths"]
    assert {"/api/documents", "/api/ask", "/api/search", "/v1/chat/completions", "/api/health"} <= set(paths)
    assert api.get("/docs").status_code == 200


def test_a_deleted_document_leaves_no_trace_in_the_list_search_or_pages(api, facts_id):
    assert api.delete(f"/api/documents/{facts_id}").status_code == 204
    assert facts_id not in {d["id"] for d in api.get("/api/documents").json()["documents"]}
    hits = api.post("/api/search", json={"query": QUESTION, "k": 10}).json()["results"]
    assert hits and all(h["document_id"] != facts_id and "railway" not in h["passage"] for h in hits)
    assert error_of(api.get(f"/api/documents/{facts_id}"))[0] == 404
    assert error_of(api.get(f"/api/documents/{facts_id}/pages/3.png"))[0] == 404
    assert error_of(api.delete(f"/api/documents/{facts_id}"))[0] == 404


# -----------------------------------------------------------------------------
# A server with a token and no chat model (Ollama chosen, not answering)


@pytest.fixture(scope="module")
def locked_server(tmp_path_factory):
    proc, url = start_server(tmp_path_factory.mktemp("api-token"), API_TOKEN="s3cret", LLM_BACKEND="ollama")
    yield url
    bench.stop_api_server(proc)


def test_with_api_token_every_request_needs_it(locked_server):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
        response = httpx.get(f"{locked_server}/api/documents", headers=headers)
        assert error_of(response) == (401, "This server needs its token: send the header 'Authorization: Bearer <API_TOKEN>'.")
        assert response.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{locked_server}/api/documents", headers={"Authorization": "Bearer s3cret"}).json() == {"documents": []}
    assert httpx.get(f"{locked_server}/docs").status_code == 401


def test_an_empty_library_is_409_and_a_model_that_does_not_answer_is_503(locked_server, files):
    with httpx.Client(base_url=locked_server, headers={"Authorization": "Bearer s3cret"}, timeout=120) as api:
        assert error_of(api.post("/api/ask", json={"question": QUESTION})) == (409, "Your library is empty: add a PDF first.")
        final, _ = upload_and_wait(api, files["facts"])
        assert final["state"] == "done"
        health = api.get("/api/health").json()
        assert health["chat_model"]["ok"] is False and "Ollama is not answering" in health["chat_model"]["message"]
        status, message = error_of(api.post("/api/ask", json={"question": QUESTION}))
        assert status == 503 and message.startswith("Ollama is not answering at http://127.0.0.1:")
        with api.stream("POST", "/api/ask", json={"question": QUESTION, "stream": True}) as response:
            events = list(sse_events(response))
        assert events[-1][0] == "error" and events[-1][1]["status"] == 503
        assert api.post("/api/search", json={"query": QUESTION}).json()["results"][0]["page"] == 3  # search needs no chat model


# -----------------------------------------------------------------------------
# A server whose ChromaDB server goes away


def test_a_lost_chromadb_server_is_503_with_a_plain_message(tmp_path):
    from test_chroma_server import running_chroma

    with running_chroma(tmp_path) as port:
        settings = {"CHROMA_HOST": "127.0.0.1", "CHROMA_PORT": str(port), "LLM_BACKEND": "ollama", "INDEX_CHECK_SECONDS": "0"}
        proc, url = start_server(tmp_path / "api", **settings)
        assert httpx.get(f"{url}/api/documents").json() == {"documents": []}
    try:
        for response in (httpx.get(f"{url}/api/documents"), httpx.post(f"{url}/api/search", json={"query": QUESTION})):
            status, message = error_of(response)
            assert status == 503 and message.startswith(f"The ChromaDB server at 127.0.0.1:{port} does not answer.")
        health = httpx.get(f"{url}/api/health")
        assert health.status_code == 503 and health.json()["store"]["ok"] is False
    finally:
        bench.stop_api_server(proc)
