"""The HTTP API as a client sees it: a real Uvicorn process serving api.py on a free port,
with its own temp store, the real embedder and the small embedded chat model, reached
through httpx (and, for /v1, the openai client library).

One server per module (starting one loads the models); the tests of the main server run
in file order on one library: upload, search, ask, page image, bad inputs, then delete.
The main server also reaches llama.cpp's own OpenAI-compatible server (conftest.llama_server)
through a TCP proxy the tests can break (port closed, replies cut), so a question can name
that model and its failures be seen as a client sees them. A second server, started with
API_TOKEN, an Ollama that does not answer and a wrong key for the model server, covers the
token check and the 409/503 replies; a third, on a ChromaDB server that then stops, the
503 for a lost store.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
from pathlib import Path

import httpx
import openai
import pymupdf
import pytest

from evaluation import bench
from conftest import FACT_PAGES, SERVER_KEY, SERVER_MODEL, TEST_LLM, shown, write_text_pdf

QUESTION = "When did the railway reach the town?"
ANSWER_LINE = "The railway reached the town in 1889."  # page 3 of facts.pdf
HOSTILE = '<img src="http://127.0.0.1:9/x.png"> **[click](http://127.0.0.1:9)**'  # text in a PDF, nothing more
EMBEDDED_ID, EMBEDDED_LABEL = f"embedded:{TEST_LLM}", "embedded Qwen2.5-Coder-0.5B-Instruct Q4"
SERVER_ID = f"openai:{SERVER_MODEL}"


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


class BreakableProxy:
    """A TCP proxy in front of the model server, broken on purpose the ways a network breaks:
    ``down()`` closes its port until ``up()``; ``cut(n)`` cuts every streamed reply n bytes in.
    Each switch closes the connections open at the time, so none kept alive carries on as before."""

    def __init__(self, upstream_url: str):
        self.upstream_port = httpx.URL(upstream_url).port
        self.cut_after: int | None = None
        self._open: set[socket.socket] = set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def down(self) -> None:
        self.listener.close()
        self._close_open()

    def up(self) -> None:
        if self.listener.fileno() == -1:
            self.listener = socket.create_server(("127.0.0.1", self.port))
            threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()
        self.cut(None)

    def cut(self, after: int | None) -> None:
        self.cut_after = after
        self._close_open()

    def _close_open(self) -> None:
        for sock in list(self._open):
            self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        self._open.discard(sock)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed by down()
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._open.update((client, upstream))
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket, replies: bool) -> None:
        streamed = None  # bytes of a streamed reply passed on so far
        tail = b""
        try:
            while data := source.recv(4096):
                if replies and self.cut_after is not None:
                    if streamed is None and b"text/event-stream" in tail + data:
                        streamed = 0
                    tail = data[-32:]
                    if streamed is not None and streamed + len(data) > self.cut_after:
                        target.sendall(data[: self.cut_after - streamed])
                        break
                    if streamed is not None:
                        streamed += len(data)
                target.sendall(data)
        except OSError:
            pass
        self._close(source)
        self._close(target)


@pytest.fixture(scope="module")
def model_proxy(llama_server):
    proxy = BreakableProxy(llama_server)
    yield proxy
    proxy.down()


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_proxy):
    """The main server: the small embedded model by default; llama.cpp's server, behind the proxy, by name."""
    settings = {"OPENAI_BASE_URL": model_proxy.url, "OPENAI_API_KEY": SERVER_KEY, "MODEL_PROBE_TIMEOUT": "10"}
    proc, url = start_server(tmp_path_factory.mktemp("api"), **settings)
    yield url
    bench.stop_api_server(proc)


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
    cited = next(c for c in answer["citations"] if c["page"] == 3 and c["verified"])
    assert cited["doc"] == "facts.pdf" and "railway reached the town in 1889" in cited["passage"]
    # the cited line itself, and where it stands on its page (what a viewer highlights)
    assert cited["text"] == cited["passage"] == answer["sources"][cited["number"] - 1]["passage"]
    source = answer["sources"][cited["number"] - 1]
    assert 0 <= cited["start"] < cited["end"] and (cited["start"], cited["end"]) == (source["start"], source["end"])
    assert answer["confidence"] is not None and answer["rewritten_query"] is None
    assert answer["evidence"] and (facts_id, 3, ANSWER_LINE) in evidence_pages(answer), answer["evidence"]
    assert all(set(e) == {"document_id", "doc", "page", "text", "score"} for e in answer["evidence"])
    assert (answer["model"], answer["model_id"]) == (EMBEDDED_LABEL, EMBEDDED_ID)  # no model named: the settings' model


def test_ask_streams_the_evidence_then_tokens_then_one_final_event_with_the_citations(api, facts_id):
    with api.stream("POST", "/api/ask", json={"question": QUESTION, "stream": True}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = list(sse_events(response))
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "queued" and kinds[-1] == "answer" and kinds.count("answer") == 1
    assert kinds.count("evidence") == 1 and kinds.index("evidence") < kinds.index("token"), kinds
    tokens = [data["text"] for kind, data in events if kind == "token"]
    answer = events[-1][1]
    # the shipped model reads lines: its reply shows from its first sentence backed by a line (qa.backed_or_nearest)
    assert tokens and "".join(tokens).strip() == answer["answer"]
    assert (facts_id, 3) in verified_pages(answer), answer
    lines = events[kinds.index("evidence")][1]
    assert lines == answer["evidence"] and (facts_id, 3, ANSWER_LINE) in evidence_pages(answer)


def test_the_outline_of_a_document_and_a_question_about_its_sections(api, facts_id, tmp_path):
    pdf = write_text_pdf(tmp_path / "plan.pdf", ["Background of the plan.", "Budget for the works.", "More on the budget.", "Timetable of the works."])
    doc = pymupdf.open(pdf)
    doc.set_toc([[1, "Background", 1], [1, "Budget", 2], [1, "Timetable", 4]])
    doc.saveIncr()
    doc.close()
    final, _ = upload_and_wait(api, pdf)
    plan = final["document_id"]
    outline = api.get(f"/api/documents/{plan}/outline").json()
    assert outline["source"] == "toc" and outline["pages"] == 4
    assert [(s["title"], s["pages"]) for s in outline["sections"]] == [("Background", "p. 1"), ("Budget", "pp. 2–3"), ("Timetable", "p. 4")]
    answer = api.post("/api/ask", json={"question": "List the sections of this document.", "documents": [plan]}).json()
    assert "2. Budget (pp. 2–3) [2]" in answer["answer"]
    assert {(c["doc"], c["page"]) for c in answer["citations"]} == {("plan.pdf", 1), ("plan.pdf", 2), ("plan.pdf", 4)}
    several = api.post("/api/ask", json={"question": "Summarise the document."}).json()
    assert several["answer"].startswith("Which document should I summarise?") and "plan.pdf" in several["answer"]
    assert api.get("/api/documents/pdf_rag_0000000000000000/outline").status_code == 404
    api.delete(f"/api/documents/{plan}")


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
    evidence = f'\n\nEvidence (lines from the pages found):\n- facts.pdf, page 3: "{ANSWER_LINE}"'
    reply = client.chat.completions.create(model="pdf-library", messages=[{"role": "user", "content": QUESTION}])
    assert reply.model == EMBEDDED_ID  # the library's own name: the settings' model answers
    text = shown(reply.choices[0].message.content)  # /v1 text is escaped Markdown (tests/test_openai_compat.py)
    assert "1889" in text and re.search(r"Sources:\n- \[L\d+\] facts.pdf, page 3 ✓", text)
    assert evidence in text and text.index("Sources:") < text.index("Evidence")
    assert (facts_id, 3, ANSWER_LINE) in evidence_pages(reply.model_extra)
    stream = client.chat.completions.create(model="pdf-library", messages=[{"role": "user", "content": QUESTION}], stream=True)
    chunks = [c.choices[0].delta.content or "" for c in stream]
    assert "".join(chunks) == reply.choices[0].message.content  # checked before it is sent: the same reply streamed
    assert len(chunks) == 3 and chunks[0] == ""  # the role, then the answer, then its sources (with the stop)
    with pytest.raises(openai.BadRequestError, match="last message must be the user's question"):
        client.chat.completions.create(model="pdf-library", messages=[{"role": "system", "content": "Be brief."}])


# -- choosing the model: the embedded ones, and llama.cpp's server behind the proxy


def test_the_models_that_can_answer_are_listed_with_the_default(api, server, model_proxy):
    body = api.get("/api/models").json()
    assert {"id": EMBEDDED_ID, "label": EMBEDDED_LABEL} in body["models"]
    assert {"id": SERVER_ID, "label": f"{SERVER_MODEL} on {model_proxy.url}"} in body["models"]
    assert all(m["id"].startswith(("embedded:", "ollama:", "openai:")) for m in body["models"])
    assert (body["default"], body["answering"]) == (EMBEDDED_ID, None)
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0)
    listed = [m.id for m in client.models.list()]
    assert listed == ["pdf-library"] + [m["id"] for m in body["models"]]  # the library's own name first: the default


def test_ask_names_the_server_model_and_it_writes_the_answer(api, facts_id, model_proxy):
    answer = api.post("/api/ask", json={"question": QUESTION, "model": SERVER_ID}).json()
    assert "1889" in answer["answer"] and (facts_id, 3) in verified_pages(answer), answer
    assert (answer["model"], answer["model_id"]) == (f"{SERVER_MODEL} on {model_proxy.url}", SERVER_ID)

    with api.stream("POST", "/api/ask", json={"question": QUESTION, "model": SERVER_ID, "stream": True}) as response:
        events = []
        for kind, data in sse_events(response):
            events.append((kind, data))
            if kind == "evidence":  # the worker is on it now, and says with which model
                assert api.get("/api/models").json()["answering"] == SERVER_ID
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "queued" and kinds[-1] == "answer" and kinds.index("evidence") < kinds.index("token"), kinds
    streamed = events[-1][1]
    assert "".join(data["text"] for kind, data in events if kind == "token").strip() == streamed["answer"]
    assert "1889" in streamed["answer"] and (facts_id, 3) in verified_pages(streamed), streamed
    assert streamed["model_id"] == SERVER_ID
    assert api.get("/api/models").json()["answering"] is None
    assert api.get("/api/health").json()["chat_model"]["id"] == EMBEDDED_ID  # the default stays the default


def test_the_openai_client_picks_the_server_model_by_its_id(server, facts_id):
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model=SERVER_ID, messages=[{"role": "user", "content": QUESTION}])
    assert reply.model == SERVER_ID
    assert "1889" in reply.choices[0].message.content and "facts.pdf, page 3 ✓" in shown(reply.choices[0].message.content)
    chunks = list(client.chat.completions.create(model=SERVER_ID, messages=[{"role": "user", "content": QUESTION}], stream=True))
    assert {c.model for c in chunks} == {SERVER_ID}
    assert "facts.pdf, page 3 ✓" in shown("".join(c.choices[0].delta.content or "" for c in chunks))


def test_an_unknown_model_is_400_naming_the_ones_that_can_answer_and_the_next_question_is_answered(api, server, facts_id):
    for name in ("openai:gpt-9", "embedded:llama-70b", "pdf-library", "llama3.2:3b"):
        for stream in (False, True):
            status, message = error_of(api.post("/api/ask", json={"question": QUESTION, "model": name, "stream": stream}))
            assert status == 400 and message.startswith(f"There is no model '{name}' to answer with. The models that can answer now: ")
            assert EMBEDDED_ID in message and SERVER_ID in message
    status, message = error_of(api.post("/api/ask", json={"question": QUESTION, "model": "ollama:llama3.2:3b"}))
    assert status == 503 and message.startswith("Ollama is not answering at http://127.0.0.1:")  # a known kind, down
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="There is no model 'openai:gpt-9' to answer with") as refused:
        client.chat.completions.create(model="openai:gpt-9", messages=[{"role": "user", "content": QUESTION}])
    assert (refused.value.code, refused.value.param) == ("model_not_found", "model")
    # a name that is no model id (what clients send by habit) is the library's default, as it always was
    reply = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": QUESTION}])
    assert reply.model == EMBEDDED_ID and "facts.pdf, page 3 ✓" in shown(reply.choices[0].message.content)


def test_a_model_server_that_is_down_is_503_with_a_sentence_and_the_next_question_is_answered(api, server, facts_id, model_proxy):
    model_proxy.down()
    try:
        status, sentence = error_of(api.post("/api/ask", json={"question": QUESTION, "model": SERVER_ID}))
        assert status == 503 and f"model server at {model_proxy.url}" in sentence, sentence  # models.explain_failure's words
        with api.stream("POST", "/api/ask", json={"question": QUESTION, "model": SERVER_ID, "stream": True}) as response:
            assert list(sse_events(response))[-1] == ("error", {"status": 503, "message": sentence})
        client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.APIStatusError) as raised:
            client.chat.completions.create(model=SERVER_ID, messages=[{"role": "user", "content": QUESTION}])
        assert raised.value.status_code == 503 and raised.value.body["message"] == sentence
        with pytest.raises(openai.APIError) as raised:
            list(client.chat.completions.create(model=SERVER_ID, messages=[{"role": "user", "content": QUESTION}], stream=True))
        assert raised.value.message == sentence
        assert SERVER_ID not in [m["id"] for m in api.get("/api/models").json()["models"]]
        assert api.get("/api/health").json()["chat_model"]["ok"] is True  # the default still answers
    finally:
        model_proxy.up()
    answer = api.post("/api/ask", json={"question": QUESTION, "model": SERVER_ID}).json()
    assert "1889" in answer["answer"] and answer["model_id"] == SERVER_ID, answer


def test_a_connection_cut_mid_answer_is_a_sentence_and_the_next_question_is_answered(api, facts_id, model_proxy):
    model_proxy.cut(1500)  # the reply's headers and a few tokens, then nothing
    try:
        with api.stream("POST", "/api/ask", json={"question": QUESTION, "model": SERVER_ID, "stream": True}) as response:
            events = list(sse_events(response))
    finally:
        model_proxy.up()
    kinds = [kind for kind, _ in events]
    assert "evidence" in kinds and kinds[-1] == "error" and "answer" not in kinds, kinds
    assert events[-1][1]["status"] == 503 and f"model server at {model_proxy.url}" in events[-1][1]["message"], events[-1]
    answer = api.post("/api/ask", json={"question": QUESTION, "model": SERVER_ID, "stream": False}).json()
    assert "1889" in answer["answer"] and answer["model_id"] == SERVER_ID, answer


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
    assert health["chat_model"] == {"id": EMBEDDED_ID, "name": EMBEDDED_LABEL, "ok": True}  # the default, whoever answered last
    assert health["embedder"] == "all-MiniLM-L6-v2" and health["ollama"]["reachable"] is False
    assert health["multilingual_embedder"] == "use-multilingual-v3-int8"


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
# A server with a token, no default chat model (Ollama chosen, not answering) and a key the model server refuses


@pytest.fixture(scope="module")
def locked_server(tmp_path_factory, llama_server):
    settings = {"API_TOKEN": "s3cret", "LLM_BACKEND": "ollama", "OPENAI_BASE_URL": llama_server, "OPENAI_API_KEY": "wrong-key"}
    proc, url = start_server(tmp_path_factory.mktemp("api-token"), **settings)
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


def test_a_key_the_model_server_refuses_is_a_sentence_and_another_model_answers_next(locked_server, llama_server, files):
    refused = f"The model server at {llama_server} refused the key (401). Set OPENAI_API_KEY to a key it accepts."
    with httpx.Client(base_url=locked_server, headers={"Authorization": "Bearer s3cret"}, timeout=300) as api:
        assert upload_and_wait(api, files["facts"])[0]["state"] == "done"
        listed = api.get("/api/models").json()
        assert EMBEDDED_ID in [m["id"] for m in listed["models"]] and SERVER_ID not in [m["id"] for m in listed["models"]]
        assert listed["default"] is None and listed["default_error"].startswith("Ollama is not answering")
        assert error_of(api.post("/api/ask", json={"question": QUESTION, "model": SERVER_ID})) == (503, refused)
        with api.stream("POST", "/api/ask", json={"question": QUESTION, "model": SERVER_ID, "stream": True}) as response:
            assert list(sse_events(response))[-1] == ("error", {"status": 503, "message": refused})
        client = openai.OpenAI(base_url=f"{locked_server}/v1", api_key="s3cret", max_retries=0)
        with pytest.raises(openai.APIStatusError, match=r"refused the key \(401\)"):
            client.chat.completions.create(model=SERVER_ID, messages=[{"role": "user", "content": QUESTION}])
        answer = api.post("/api/ask", json={"question": QUESTION, "model": EMBEDDED_ID}).json()
        assert "1889" in answer["answer"] and (answer["model"], answer["model_id"]) == (EMBEDDED_LABEL, EMBEDDED_ID), answer
        chat = api.get("/api/health").json()["chat_model"]
        assert chat["ok"] is False and "Ollama is not answering" in chat["message"]  # the default is still the one that is down


# -----------------------------------------------------------------------------
# A server whose ChromaDB server goes away


@pytest.mark.slow  # starts another process
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
