"""End to end in a real browser: `streamlit run app.py` on a free localhost port, driven
by Playwright in Debian's headless Chromium (upload, ask, open a citation, see the page;
the evidence lines on screen while the model has not yet said a word; switch the model
that answers to one on llama.cpp's server), and the same with
documents and answers that carry images, links and HTML aimed at a local listener, which
must hear nothing.

`.ci/run` installs Chromium and sets REQUIRE_BROWSER=1, so there a missing browser
fails the test; on a developer machine without one it is skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import config
import conversations
from conftest import SERVER_KEY, SERVER_MODEL, held_chats, write_text_pdf

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

if not Path(CHROMIUM).exists():
    if os.environ.get("REQUIRE_BROWSER"):
        raise RuntimeError(f"REQUIRE_BROWSER is set but there is no Chromium at {CHROMIUM} (apt-get install chromium)")
    pytest.skip("Chromium is not installed (apt-get install chromium)", allow_module_level=True)

from playwright.sync_api import expect, sync_playwright  # noqa: E402  (only needed when Chromium exists)


class Listener(BaseHTTPRequestHandler):
    """A local web server that records every request: any request means the page leaked."""

    requests: list[str] = []

    def do_GET(self):
        self.requests.append(self.path)
        self.send_response(204)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def listener():
    Listener.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Listener)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_port, Listener.requests
    server.shutdown()


@pytest.fixture
def app_url(serve_app):
    return serve_app()


@contextmanager
def browser_page(tmp_path):
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_FLAGS, viewport={"width": 1400, "height": 1000},
        )
        try:
            yield browser.new_page()
        finally:
            browser.close()


def upload_and_wait(page, app_url: str, pdf: Path) -> None:
    page.goto(app_url)
    expect(page.get_by_text("Chat with your PDFs").first).to_be_visible(timeout=60_000)
    page.locator('input[type="file"]').set_input_files(str(pdf))
    expect(page.get_by_text(f"{pdf.name}: searchable")).to_be_visible(timeout=120_000)


def ask(page, question: str) -> None:
    chat = page.get_by_placeholder("Ask about your documents")
    chat.fill(question)
    chat.press("Enter")


def literally(text: str) -> re.Pattern:
    """``text`` as the page shows it: safe_text puts invisible word joiners into URLs."""
    return re.compile("\u2060?".join(map(re.escape, text)))


def assert_nothing_live(page, port: int, requests: list[str]) -> None:
    """No element of the page points at the listener, and the listener heard nothing."""
    page.wait_for_timeout(1500)  # time for any image the page holds to be fetched
    for selector in ("img", "a", "iframe", "source", "video", "audio", "link", "object"):
        live = page.locator(f'{selector}[src*=":{port}/"], {selector}[href*=":{port}/"]')
        assert live.count() == 0, live.first.evaluate("e => e.parentElement.outerHTML")
    assert requests == []


def harbour_pdf(tmp_path: Path) -> Path:
    """The three-page harbour history the browser tests upload: a keeper, a fleet, and the railway's year on page 3."""
    return write_text_pdf(tmp_path / "harbour.pdf", ["The lighthouse keeper of Port Elwin was Margaret Tolland.",
                                                     "The fishing fleet landed mostly cod and haddock.",
                                                     "The railway reached the town in 1889. Trains to the capital took nine hours."])


def test_upload_ask_and_see_the_cited_page_in_a_real_browser(app_url, tmp_path):
    pdf = harbour_pdf(tmp_path)
    with browser_page(tmp_path) as page:
        upload_and_wait(page, app_url, pdf)
        ask(page, "When did the railway reach the town?")
        chip = page.get_by_role("radio", name=re.compile(r"\] harbour\.pdf · p\. 3"))  # a citation chip ("[1] …"); st.pills are radios
        expect(chip).to_be_visible(timeout=240_000)
        expect(page.get_by_test_id("stChatMessage").last).to_contain_text("1889")

        chip.click()
        image = page.get_by_test_id("stImage").locator("img").last
        expect(image).to_be_visible(timeout=60_000)
        assert image.evaluate("img => img.naturalWidth") > 300  # a real rendered page, not a broken icon
        image.scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / "answer-with-citation.png"))
    assert (tmp_path / "answer-with-citation.png").stat().st_size > 10_000


def hostile_pdf(path: Path, port: int) -> Path:
    """Pages whose text is a Markdown image, a Markdown link and raw HTML, all aimed at the listener."""
    return write_text_pdf(
        path,
        [
            f"The lighthouse keeper of Port Elwin was Margaret Tolland.\n![chart](http://127.0.0.1:{port}/image?q=secret)",
            f"The fishing fleet landed mostly cod and haddock.\n[the full report](http://127.0.0.1:{port}/link)",
            "The railway reached the town in 1889. Trains to the capital took nine hours.\n"
            f'<img src="http://127.0.0.1:{port}/html"> <a href="http://127.0.0.1:{port}/a">more</a>',
        ],
    )


def test_markup_in_a_document_is_shown_as_text_and_fetches_nothing(app_url, listener, tmp_path):
    port, requests = listener
    pdf = hostile_pdf(tmp_path / "hostile.pdf", port)
    with browser_page(tmp_path) as page:
        upload_and_wait(page, app_url, pdf)

        ask(page, "How do I configure a Kubernetes ingress controller?")  # off-topic: only the nearest lines, folded
        refusal = page.get_by_test_id("stChatMessage").last
        nearest = refusal.get_by_text("Nearest lines in your documents")
        expect(nearest).to_be_visible(timeout=120_000)
        nearest.click()  # the nearest lines of those pages: inert too
        expect(refusal).to_contain_text(literally(f'<img src="http://127.0.0.1:{port}/html">'))
        assert_nothing_live(page, port, requests)

        ask(page, "When did the railway reach the town?")
        chip = page.get_by_role("radio", name=re.compile(r"\] hostile\.pdf · p\. 3"))
        expect(chip).to_be_visible(timeout=240_000)
        chip.click()
        expect(page.get_by_test_id("stImage").locator("img").last).to_be_visible(timeout=60_000)
        cited = page.get_by_test_id("stChatMessage").last  # the cited line beside its page: the line, as text
        expect(cited).to_contain_text("hostile.pdf, page 3")
        assert_nothing_live(page, port, requests)


def test_an_answer_holding_an_image_is_shown_as_text_and_fetches_nothing(serve_app, listener, ollama_server, monkeypatch, tmp_path):
    port, requests = listener
    image = f"![x](http://127.0.0.1:{port}/answer?q=1889)"
    monkeypatch.setattr(ollama_server, "models", [config.OLLAMA_DEFAULT_LLM])
    monkeypatch.setattr(ollama_server, "reply", f"The railway reached the town in 1889 [1]. {image}")
    app_url = serve_app(LLM_BACKEND="ollama", OLLAMA_BASE_URL=config.OLLAMA_BASE_URL)
    pdf = write_text_pdf(tmp_path / "harbour.pdf", ["The railway reached the town in 1889. Trains took nine hours."])
    with browser_page(tmp_path) as page:
        upload_and_wait(page, app_url, pdf)
        ask(page, "When did the railway reach the town?")
        answer = page.get_by_test_id("stChatMessage").last
        expect(answer).to_contain_text(literally(image), timeout=120_000)
        assert_nothing_live(page, port, requests)


def test_the_evidence_lines_are_on_screen_before_the_first_word_of_the_answer(serve_app, ollama_server, monkeypatch, tmp_path):
    """The model (a stand-in speaking Ollama's protocol) holds back its reply until the test has seen the
    evidence lines in the page: they come from the search alone, the answer streams in under them after."""
    asked, release = held_chats(ollama_server, monkeypatch, timeout=180)
    monkeypatch.setattr(ollama_server, "models", [config.OLLAMA_DEFAULT_LLM])
    monkeypatch.setattr(ollama_server, "reply", "Trains first came to the town in 1889 [1].")
    app_url = serve_app(LLM_BACKEND="ollama", OLLAMA_BASE_URL=config.OLLAMA_BASE_URL)
    pdf = harbour_pdf(tmp_path)
    try:
        with browser_page(tmp_path) as page:
            upload_and_wait(page, app_url, pdf)
            ask(page, "When did the railway reach the town?")
            assert asked.wait(timeout=180)  # the model is asked and has sent nothing back
            message = page.get_by_test_id("stChatMessage").last
            expect(message).to_contain_text("What your documents say", timeout=30_000)
            line = message.locator("blockquote", has_text="The railway reached the town in 1889.")
            expect(line).to_be_visible()
            chips = message.get_by_role("radio", name="harbour.pdf · p. 3", exact=True)
            expect(chips.first).to_be_disabled()  # a click now would rerun the page and stop the answer
            expect(message).not_to_contain_text("Trains first came")

            release.set()
            expect(message).to_contain_text("Trains first came to the town in 1889", timeout=120_000)
            text = message.inner_text()
            assert text.index("The railway reached the town in 1889.") < text.index("Trains first came")  # the lines lead

            chip = chips.first
            expect(chip).to_be_enabled(timeout=30_000)
            chip.click()
            image = page.get_by_test_id("stImage").locator("img").last
            expect(image).to_be_visible(timeout=60_000)
            assert image.evaluate("img => img.naturalWidth") > 300  # the line's page, rendered
    finally:
        release.set()  # never leave the stand-in's request thread waiting


def test_the_model_picker_works_in_the_browser(serve_app, llama_server, tmp_path):
    """The model picker works in the browser: switch, ask, the answer names the model that wrote it in its details."""
    app_url = serve_app(OPENAI_BASE_URL=llama_server, OPENAI_API_KEY=SERVER_KEY, LLM_BACKEND="embedded")
    server_label = f"{SERVER_MODEL} on {llama_server}"
    pdf = write_text_pdf(tmp_path / "harbour.pdf", ["The railway reached the town in 1889. Trains to the capital took nine hours."])
    with browser_page(tmp_path) as page:
        upload_and_wait(page, app_url, pdf)
        picker = page.get_by_role("combobox", name="Model that answers")
        expect(picker).to_have_value("embedded Qwen2.5-Coder-0.5B-Instruct Q4")  # the settings' model
        picker.click()
        option = page.get_by_role("option", name=server_label, exact=True)  # an option is plain text: the URL as is
        expect(option).to_be_visible()
        assert option.locator("a").count() == 0
        option.click()
        expect(page.get_by_test_id("stSidebar")).to_contain_text(literally(f"Model: {server_label}"), timeout=60_000)
        expect(picker).to_have_value(server_label)

        ask(page, "When did the railway reach the town?")
        answer = page.get_by_test_id("stChatMessage").last
        expect(answer).to_contain_text(literally(f"Written by {server_label}"), timeout=240_000)


def stop_app(url: str) -> None:
    """Stop the `streamlit run` that serve_app started for ``url`` (a child of this test process), as a
    restart stops it; serve_app's teardown then finds it stopped."""
    port = url.rsplit(":", 1)[1].encode()
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and b"--server.port" in args and args[args.index(b"--server.port") + 1] == port:
            os.kill(int(proc.name), signal.SIGTERM)
            break
    else:
        raise AssertionError(f"no app of this test serves {url}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
        except OSError:
            return  # nothing answers there any more
        time.sleep(0.3)
    raise AssertionError(f"the app at {url} did not stop")


def files_holding(folder: Path, text: str) -> list[str]:
    return [str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_a_conversation_comes_back_after_a_reload_and_a_restart_and_leaves_nothing_when_deleted(serve_app, tmp_path):
    marker = "qv7lighthouse"  # in the question only: nowhere in the PDF
    question = f"When did the railway reach the town? ({marker})"
    store = tmp_path / "store"  # serve_app's store, the same for every start
    pdf = harbour_pdf(tmp_path)
    app_url = serve_app()

    def the_conversation_is_back(page) -> None:
        messages = page.get_by_test_id("stChatMessage")
        expect(messages.first).to_contain_text(question, timeout=60_000)
        expect(messages.nth(1)).to_contain_text(answer)
        expect(messages.nth(1)).to_contain_text("What your documents say")
        expect(page.get_by_test_id("stSidebar").get_by_role("button", name=question)).to_be_visible()  # listed, titled by it
        chip = messages.nth(1).get_by_role("radio", name=re.compile(r"harbour\.pdf · p\. 3")).first
        expect(chip).to_be_visible()
        chip.click()
        image = page.get_by_test_id("stImage").locator("img").last
        expect(image).to_be_visible(timeout=60_000)  # the cited page, drawn from the kept offsets
        assert image.evaluate("img => img.naturalWidth") > 300

    with browser_page(tmp_path) as page:
        upload_and_wait(page, app_url, pdf)
        ask(page, question)
        expect(page.get_by_test_id("stChatMessage").last).to_contain_text("Written by", timeout=240_000)  # answered, and kept
        # a chip of page 3: the citation's, or (the small model may refuse) the evidence line's
        chip = page.get_by_role("radio", name=re.compile(r"harbour\.pdf · p\. 3")).first
        expect(chip).to_be_visible()
        expect(page).to_have_url(re.compile(r"[?&]c=[0-9a-f]{32}$"))  # the address names the conversation
        conversation = page.url.rsplit("c=", 1)[1]
        kept = conversations.get(conversation, path=store / "conversations.sqlite3")
        assert [m["role"] for m in kept.messages] == ["user", "assistant"] and kept.title == question
        answer = kept.messages[1]["content"].strip().split("\n")[0]  # its first line, as saved
        assert kept.messages[1]["content"].strip()  # the answer (the small model may refuse; its lines stay beside it)
        expect(page.get_by_test_id("stChatMessage").nth(1)).to_contain_text(answer)

        page.reload()  # a new session of the same address
        the_conversation_is_back(page)

        stop_app(app_url)  # the app restarts: every session and cache is gone, the store stays
        app_url = serve_app()
        page.goto(f"{app_url}/?c={conversation}")
        the_conversation_is_back(page)

        assert files_holding(store, marker) == ["conversations.sqlite3"]  # kept there, and only there
        expect(page.get_by_test_id("stStatusWidget")).to_be_hidden(timeout=60_000)  # the run that opened the page is over
        page.locator(".st-key-delete-conversation").get_by_role("button", name="Delete").click()
        expect(page.get_by_test_id("stChatMessage")).to_have_count(0, timeout=30_000)
        expect(page.get_by_test_id("stSidebar")).not_to_contain_text(marker)
        expect(page).not_to_have_url(re.compile(r"c="))
    assert files_holding(store, marker) == [] and files_holding(store, conversation) == []  # its text is nowhere under the store


def test_a_question_typed_while_a_follow_up_is_answered_waits_its_turn_and_every_answer_is_kept(serve_app, ollama_server, monkeypatch, tmp_path):
    """The defect: a follow-up was being rewritten by the model (no status line said so) when the next question
    was typed; Streamlit stopped the run that was answering it, and the follow-up was saved with no answer.
    Here the model (a stand-in speaking Ollama's protocol) holds the follow-up's rewrite while the next
    question is typed 3 s after the follow-up was sent: the page says what is going on, the new question
    waits its turn, the follow-up is answered, then the new question; a reload of the conversation's
    address shows every question with its answer."""
    store = tmp_path / "store"
    first, follow_up, then = ("When did the railway reach the town?", "And how long did the trains to the capital take?",
                              "Who was the lighthouse keeper of Port Elwin?")
    answers = ["The railway reached the town in 1889 [1].", "Trains to the capital took nine hours [1].",
               "Margaret Tolland kept the lighthouse [1]."]
    rewriting, release = threading.Event(), threading.Event()
    reply_now = ollama_server.do_POST
    chats = []

    def hold_the_rewrite(handler):
        if handler.path == "/api/chat":
            chats.append(handler.path)
            if len(chats) == 2:  # the second model call: the follow-up rewritten before its search
                rewriting.set()
                release.wait(timeout=180)
        reply_now(handler)

    monkeypatch.setattr(ollama_server, "do_POST", hold_the_rewrite)
    monkeypatch.setattr(ollama_server, "models", [config.OLLAMA_DEFAULT_LLM])
    monkeypatch.setattr(ollama_server, "replies", [answers[0], "How long did the trains to the capital take?", *answers[1:]])
    app_url = serve_app(LLM_BACKEND="ollama", OLLAMA_BASE_URL=config.OLLAMA_BASE_URL)
    pdf = harbour_pdf(tmp_path)
    messages = None
    try:
        with browser_page(tmp_path) as page:
            upload_and_wait(page, app_url, pdf)
            messages = page.get_by_test_id("stChatMessage")
            ask(page, first)
            expect(messages.nth(1)).to_contain_text(answers[0], timeout=120_000)
            expect(messages.nth(1)).to_contain_text("Written by", timeout=60_000)  # done and saved

            ask(page, follow_up)
            sent = time.monotonic()
            assert rewriting.wait(timeout=120)  # the model is rewriting the follow-up
            expect(messages.nth(3)).to_contain_text("Reading your follow-up with the conversation…", timeout=30_000)
            page.wait_for_timeout(max(0, 3000 - (time.monotonic() - sent) * 1000))
            ask(page, then)  # 3 s after the follow-up was sent, while it is being answered
            expect(messages.nth(4)).to_contain_text(then, timeout=30_000)
            expect(messages.nth(4)).to_contain_text("answered next")  # it waits its turn
            expect(messages.nth(3)).to_contain_text("Reading your follow-up with the conversation…")  # not stopped
            release.set()

            expect(messages.nth(5)).to_contain_text(answers[2], timeout=120_000)
            expect(messages.nth(5)).to_contain_text("Written by", timeout=60_000)
            expect(messages).to_have_count(6)
            expect(messages.nth(3)).to_contain_text(answers[1])  # both answers on screen
            expect(messages.nth(4)).not_to_contain_text("answered next")

            conversation = page.url.rsplit("c=", 1)[1]
            page.reload()  # the conversation's address, in a new session
            expect(messages).to_have_count(6, timeout=60_000)
            for number, (question, answer) in enumerate(zip([first, follow_up, then], answers)):
                expect(messages.nth(2 * number)).to_contain_text(question)
                expect(messages.nth(2 * number + 1)).to_contain_text(answer)
    finally:
        release.set()  # never leave the stand-in's request thread waiting
    kept = conversations.get(conversation, path=store / "conversations.sqlite3")
    assert [(m["role"], m["content"]) for m in kept.messages] == [
        ("user", first), ("assistant", answers[0]), ("user", follow_up), ("assistant", answers[1]), ("user", then), ("assistant", answers[2])]
