"""Nothing wasted, nothing stalled: the API drops questions whose client has gone, bounds the
waiting line, takes any file name, refuses pages of other sites by their Referer, and never
names the server's paths. Unit tests of each rule first, then the same through a real
`uvicorn api:app` with the small embedded model (and the official `openai` client)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
from conftest import FACT_PAGES, write_text_pdf
from starlette.datastructures import Headers
from test_api import error_of, sse_events, start_server
from test_ingest_limits import write_dense_page_pdf

from evaluation import bench
from server.access import from_another_site, referer_origin
from server.answers import AnswerJob, Question, ServerBusy, WaitingQuestions
from server.errors import ApiError, without_server_path
from server.uploads import NAME_MAX_BYTES, upload_name

QUESTION = "When did the railway reach the town?"

# -----------------------------------------------------------------------------
# The rules, one by one


def new_job() -> AnswerJob:
    return AnswerJob(Question(QUESTION, [], None, None), asyncio.new_event_loop())


def test_the_waiting_line_is_bounded_and_says_when_to_come_back():
    line = WaitingQuestions(limit=2)
    told = []
    line.put(new_job(), lambda: 7, told.append)
    line.put(new_job(), lambda: 7, told.append)
    with pytest.raises(ServerBusy) as busy:
        line.put(new_job(), lambda: 7, told.append)
    assert told == [0, 1]
    assert busy.value.status == 503 and busy.value.headers == {"Retry-After": "7"}
    assert "2 questions are waiting" in busy.value.message and "API_MAX_WAITING" in busy.value.message


def test_a_question_whose_client_has_gone_leaves_the_line_and_is_never_handed_to_the_worker():
    line = WaitingQuestions(limit=2)
    gone, wanted = new_job(), new_job()
    line.put(gone, lambda: 1, lambda ahead: None)
    line.put(wanted, lambda: 1, lambda ahead: None)
    gone.cancelled.set()
    assert len(line) == 1 and line.dropped == 1
    assert line.get() is wanted
    line.put(new_job(), lambda: 1, lambda ahead: None)  # the place it left is free again
    line.put(new_job(), lambda: 1, lambda ahead: None)


def test_a_file_name_is_cut_to_the_file_systems_255_bytes_keeping_its_end():
    for name in ("文" * 90 + ".pdf", "😀" * 70 + ".pdf", "a" * 300 + ".pdf", "é" * 200 + ".pdf"):
        kept = upload_name(name)
        assert len(kept.encode()) <= NAME_MAX_BYTES and kept.endswith(".pdf") and name.endswith(kept)
        assert (Path("/tmp") / kept).name == kept
    assert upload_name("文" * 90 + ".pdf") == "文" * 83 + ".pdf"
    assert upload_name("../../etc/passwd") == "passwd" and upload_name("..") == "upload.pdf" and upload_name(None) == "upload.pdf"


@pytest.mark.parametrize("name", ["a\x00b.pdf", "line\nbreak.pdf", "tab\t.pdf", "del\x7f.pdf", "c1\x85.pdf"])
def test_a_file_name_holding_a_control_character_is_refused_with_a_sentence(name):
    with pytest.raises(ApiError) as refused:
        upload_name(name)
    assert refused.value.status == 400 and "control character" in refused.value.message


def test_a_referer_stands_for_the_origin_a_browser_did_not_send():
    assert referer_origin("http://evil.example/page?q=1") == "http://evil.example"
    assert referer_origin("http://user:pw@127.0.0.1:8765/docs") == "http://127.0.0.1:8765"
    assert referer_origin("not a url") == "null" and referer_origin(None) is None
    scope = {"scheme": "http", "method": "POST"}
    own = {"host": "127.0.0.1:8765"}
    assert from_another_site(scope, Headers({**own, "referer": "http://evil.example/"}))
    assert from_another_site(scope, Headers({**own, "referer": "http://127.0.0.1:9999/"}))
    assert not from_another_site(scope, Headers({**own, "referer": "http://127.0.0.1:8765/docs"}))
    assert not from_another_site(scope, Headers(own))  # a program: neither Origin nor Referer
    # Origin, when present, decides: a Referer cannot make a foreign Origin look like this server's own
    assert from_another_site(scope, Headers({**own, "origin": "http://evil.example", "referer": "http://127.0.0.1:8765/"}))


def test_a_message_about_an_upload_names_the_file_never_where_the_server_keeps_it():
    path = Path("/tmp/pdf-rag-uploads-x1/abc/report.pdf")
    said = without_server_path(f"report.pdf is damaged and cannot be read (Failed to open file '{path}' as type pdf.).", path)
    assert "/tmp" not in said and "pdf-rag-uploads" not in said and "'report.pdf'" in said


# -----------------------------------------------------------------------------
# Through a real server: the small embedded model, a waiting line of one


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server whose waiting line holds one question, with the facts PDF in its library."""
    folder = tmp_path_factory.mktemp("api-reliability")
    proc, url = start_server(folder, API_MAX_WAITING="1")
    with httpx.Client(base_url=url, timeout=300) as http:
        pdf = write_text_pdf(folder / "facts.pdf", FACT_PAGES)
        job = http.post("/api/documents", files={"files": (pdf.name, pdf.read_bytes(), "application/pdf")}).json()["jobs"][0]
        with http.stream("GET", f"/api/jobs/{job['id']}/events") as stream:
            assert list(sse_events(stream))[-1][0] == "done"
        yield url, http, folder
    bench.stop_api_server(proc)


def questions(http: httpx.Client) -> dict:
    return http.get("/api/health").json()["questions"]


ENDED = ("answered", "failed", "stopped_when_client_left", "left_the_line")


def wait_idle(http: httpx.Client, since: dict | None = None, ended: int = 0, timeout: float = 300) -> dict:
    """The questions' state once none waits, none is being answered and, counted from ``since``,
    ``ended`` more questions have ended (a request abandoned early may reach the line late)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = questions(http)
        done = sum(state[k] - since[k] for k in ENDED) if since else 0
        if not state["waiting"] and not state["answering"] and done >= ended:
            return state
        time.sleep(0.2)
    raise AssertionError(f"the answer worker was still busy after {timeout} s: {state}")


@pytest.mark.slow  # starts a server
def test_questions_abandoned_by_the_openai_clients_timeout_and_retries_are_never_answered(served):
    url, http, _ = served
    before = wait_idle(http)
    impatient = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=0.2, max_retries=2)  # its defaults: 3 requests
    with pytest.raises(openai.APITimeoutError):
        impatient.chat.completions.create(model="pdf-library", messages=[{"role": "user", "content": QUESTION}])
    with pytest.raises(httpx.ReadTimeout):  # /api/ask's JSON reply too
        httpx.post(f"{url}/api/ask", json={"question": QUESTION}, timeout=0.2)
    after = wait_idle(http, since=before, ended=4)
    assert after["answered"] == before["answered"] and after["failed"] == before["failed"], after  # not one of the four was answered
    gone = (after["stopped_when_client_left"] - before["stopped_when_client_left"]) + (after["left_the_line"] - before["left_the_line"])
    assert gone == 4, after
    with http.stream("POST", "/api/ask", json={"question": QUESTION, "stream": True}) as reply:
        events = list(sse_events(reply))
    assert events[0] == ("queued", {"ahead": 0}) and events[-1][0] == "answer"
    assert "1889" in events[-1][1]["answer"]


@pytest.mark.slow  # starts a server
def test_a_full_waiting_line_is_a_503_with_retry_after_and_both_waiting_questions_are_answered(served):
    url, http, _ = served
    wait_idle(http)
    firsts: dict[int, list] = {0: [], 1: []}
    ready = [threading.Event(), threading.Event()]

    def ask(n: int) -> None:
        with httpx.Client(base_url=url, timeout=300) as own, own.stream("POST", "/api/ask", json={"question": QUESTION, "stream": True}) as reply:
            for event in sse_events(reply):
                firsts[n].append(event)
                if event[0] == "evidence" or (event[0] == "queued" and event[1]["ahead"] == 1):
                    ready[n].set()  # answering, or waiting behind the one answering

    first = threading.Thread(target=ask, args=(0,))
    first.start()
    assert ready[0].wait(120)
    second = threading.Thread(target=ask, args=(1,))
    second.start()
    assert ready[1].wait(120)
    refused = http.post("/api/ask", json={"question": QUESTION})
    status, message = error_of(refused)
    assert status == 503 and "API_MAX_WAITING" in message
    assert int(refused.headers["Retry-After"]) >= 1
    first.join(300)
    second.join(300)
    assert firsts[0][-1][0] == "answer" and firsts[1][-1][0] == "answer"


BOUNDARY = "reliability-boundary"


def raw_upload(filename: bytes, pdf: bytes) -> bytes:
    """A multipart body with one file part whose name is ``filename`` byte for byte (no escaping)."""
    return (f"--{BOUNDARY}\r\n".encode() + b'Content-Disposition: form-data; name="files"; filename="' + filename + b'"\r\n'
            + b"Content-Type: application/pdf\r\n\r\n" + pdf + f"\r\n--{BOUNDARY}--\r\n".encode())


@pytest.mark.slow  # starts a server
def test_any_file_name_is_taken_or_refused_with_a_400_never_a_500(served):
    _, http, folder = served
    pdf = write_text_pdf(folder / "named.pdf", ["A page about naming files."]).read_bytes()
    for name in ("文" * 84 + ".pdf", "😀" * 70 + ".pdf", "文" * 300 + ".pdf", "x" * 251 + ".pdf"):
        accepted = http.post("/api/documents", files={"files": (name, pdf, "application/pdf")})
        assert accepted.status_code == 202, accepted.text
        [job] = accepted.json()["jobs"]
        assert len(job["file"].encode()) <= 255 and name.endswith(job["file"])
    for name in ("nul\x00.pdf", "bell\x07.pdf"):  # sent raw: httpx would escape them as %00, %07
        refused = http.post("/api/documents", content=raw_upload(name.encode(), pdf),
                            headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
        status, message = error_of(refused)
        assert status == 400 and "control character" in message
    assert http.get("/api/health").status_code == 200  # the server is still there


@pytest.mark.slow  # starts a server
def test_a_referer_of_another_site_cannot_upload_or_delete_and_errors_name_no_server_path(served):
    url, http, folder = served
    pdf = write_text_pdf(folder / "planted.pdf", ["Planted by another site."])
    foreign = {"Referer": "http://evil.example/page.html"}
    status, _ = error_of(http.post("/api/documents", headers=foreign, files={"files": (pdf.name, pdf.read_bytes(), "application/pdf")}))
    assert status == 403
    [doc, *_] = http.get("/api/documents").json()["documents"]
    assert error_of(http.delete(f"/api/documents/{doc['id']}", headers=foreign))[0] == 403
    assert doc["id"] in [d["id"] for d in http.get("/api/documents").json()["documents"]]
    own = http.post("/api/ask", headers={"Referer": f"{url}/docs"}, json={"question": ""})
    assert error_of(own) == (400, "The question is empty.")  # this server's own page is served
    damaged = http.post("/api/documents", files={"files": ("damaged.pdf", b"%PDF-1.7\ngarbage", "application/pdf")})
    status, message = error_of(damaged)
    assert status == 400 and "damaged.pdf" in message
    assert "/tmp" not in message and "pdf-rag-uploads" not in message and str(folder) not in message


@pytest.mark.slow  # starts a server
def test_uploads_waiting_behind_another_are_told_their_place_and_whom_they_wait_for(served):
    _, http, folder = served
    pdfs = [write_text_pdf(folder / f"queued{n}.pdf", [f"Queued upload {n}, page {p}." for p in range(1, 4)]) for n in range(3)]
    reply = http.post("/api/documents", files=[("files", (p.name, p.read_bytes(), "application/pdf")) for p in pdfs])
    assert reply.status_code == 202, reply.text
    first, second, third = reply.json()["jobs"]
    assert second["message"].startswith("Waiting for its turn: 1 upload ahead")
    assert third["message"].startswith("Waiting for its turn: 2 uploads ahead")
    for job in (first, second, third):
        with http.stream("GET", job["url"] + "/events") as stream:
            events = list(sse_events(stream))
        assert events[-1][0] == "done", events[-1]


@pytest.mark.slow  # starts a server
def test_a_page_with_megabytes_of_text_is_cut_said_per_page_and_does_not_hold_up_the_next_upload(served):
    _, http, folder = served
    dense = write_dense_page_pdf(folder / "dense.pdf", 5_000_000)
    small = write_text_pdf(folder / "after-dense.pdf", ["A small upload queued behind the dense one."])
    reply = http.post("/api/documents", files=[("files", (p.name, p.read_bytes(), "application/pdf")) for p in (dense, small)])
    assert reply.status_code == 202, reply.text
    dense_job, small_job = reply.json()["jobs"]
    assert small_job["message"].startswith("Waiting for its turn: 1 upload ahead")
    for job in (dense_job, small_job):
        with http.stream("GET", job["url"] + "/events") as stream:
            events = list(sse_events(stream))
        assert events[-1][0] == "done", events[-1]
    final = http.get(dense_job["url"]).json()
    [cut] = final["cut_pages"]
    assert cut["page"] == 1 and cut["kept"] <= 50_000 and cut["kept"] + cut["dropped"] > 4_000_000  # the text PyMuPDF reads back
    assert "Page 1: kept the first" in final["message"] and "MAX_PAGE_CHARS" in final["message"]
    assert http.get(f"/api/documents/{dense_job['document_id']}").json()["cut_pages"] == [cut]
