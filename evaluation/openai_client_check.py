"""The official ``openai`` client against this server's /v1, the way client code calls it: what each call got.

    python -m evaluation.openai_client_check --url http://127.0.0.1:8765 [--token API_TOKEN] [--question ...]
    python -m evaluation.openai_client_check            # starts its own server on a temp store, adds one small PDF

Five calls that should succeed (models.list, models.retrieve, chat non-streamed and streamed with
include_usage, embeddings of two texts) and three that should fail (a missing model, n=2, a question too
long for the model). Each prints one line: OK and what came back, or the exception the client raised with
the error's status, type, code and message (OpenAI's shape). Its own server uses the embedded embedder and
``--model`` (the small embedded model by default), with page labels off, as tests/test_openai_compat.py does.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
import openai
import pymupdf

from evaluation import bench

log = logging.getLogger("openai_client_check")

PAGES = ["The lighthouse keeper of Port Elwin was Margaret Tolland. She kept the lamp burning for forty-one winters.",
         "The railway reached the town in 1889. Trains to the capital took nine hours and carried mail and fish."]
QUESTION = "When did the railway reach the town?"


def small_pdf(path: Path) -> Path:
    """A two-page PDF with real text, the library the check asks when it starts its own server."""
    doc = pymupdf.open()
    for text in PAGES:
        doc.new_page().insert_textbox(pymupdf.Rect(50, 50, 545, 800), text, fontsize=11)
    doc.save(path)
    doc.close()
    return path


@contextmanager
def own_server(model: str) -> Iterator[str]:
    """``uvicorn api:app`` on a temp store with one small PDF added; its base URL."""
    with tempfile.TemporaryDirectory(prefix="openai-check-") as folder:
        root = Path(folder)
        settings = {"CHROMA_PERSIST_DIR": str(root / "store"), "CHROMA_HOST": "", "LOG_FILE": str(root / "rag.log"),
                    "LLM_BACKEND": "embedded", "EMBED_BACKEND": "embedded", "EMBEDDED_LLM": model,
                    "ENRICH_ENABLED": "false", "OPENAI_BASE_URL": "", "API_TOKEN": ""}
        proc, url = bench.start_api_server(settings, root / "server.out")
        try:
            pdf = small_pdf(root / "port-elwin.pdf")
            with httpx.Client(base_url=url, timeout=300) as api:
                [job] = api.post("/api/documents", files={"files": (pdf.name, pdf.read_bytes(), "application/pdf")}).json()["jobs"]
                while api.get(f"/api/jobs/{job['id']}").json()["state"] not in ("done", "failed"):
                    time.sleep(0.5)
            yield url
        finally:
            bench.stop_api_server(proc)


def outcome(call: Callable[[], str]) -> str:
    """OK and what the call returned, or the client's exception with the error body's fields."""
    started = time.monotonic()
    try:
        result = call()
        return f"OK    ({time.monotonic() - started:5.1f} s) {result}"
    except openai.APIStatusError as err:
        body = err.body if isinstance(err.body, dict) else {}
        return (f"ERROR ({time.monotonic() - started:5.1f} s) {type(err).__name__} status={err.status_code} "
                f"type={body.get('type')} code={body.get('code')} param={body.get('param')}: {body.get('message')}")
    except openai.APIError as err:
        return f"ERROR ({time.monotonic() - started:5.1f} s) {type(err).__name__}: {err.message}"


def short(text: str, limit: int = 110) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def checks(client: openai.OpenAI, question: str) -> list[tuple[str, Callable[[], str]]]:
    """(name, call) for each call, in the order they run."""
    ask = [{"role": "user", "content": question}]

    def chat() -> str:
        reply = client.chat.completions.create(model="pdf-library", messages=ask)
        return f"model={reply.model} usage={reply.usage.model_dump()} content={short(reply.choices[0].message.content)!r}"

    def chat_stream() -> str:
        chunks = list(client.chat.completions.create(model="pdf-library", messages=ask, stream=True,
                                                     stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        usage = chunks[-1].usage.model_dump() if chunks[-1].usage else None
        return f"{len(chunks)} chunks, last usage={usage} content={short(text)!r}"

    def embeddings() -> str:
        got = client.embeddings.create(model="any", input=["The railway reached the town.", "Bees make honey."])
        return f"model={got.model} vectors={len(got.data)}x{len(got.data[0].embedding)} usage={got.usage.model_dump()}"

    return [
        ("models.list", lambda: f"{[m.id for m in client.models.list()]}"),
        ("models.retrieve pdf-library", lambda: f"{client.models.retrieve('pdf-library').model_dump()}"),
        ("chat.completions (non-streamed)", chat),
        ("chat.completions (stream, include_usage)", chat_stream),
        ("embeddings (2 texts)", embeddings),
        ("models.retrieve gpt-9 (missing)", lambda: f"{client.models.retrieve('gpt-9')}"),
        ("chat.completions n=2", lambda: f"{client.chat.completions.create(model='pdf-library', n=2, messages=ask)}"),
        ("chat.completions, a 6,000-word question",
         lambda: f"{client.chat.completions.create(model='pdf-library', messages=[{'role': 'user', 'content': 'lighthouse ' * 6000 + '?'}])}"),
    ]


def run(url: str, token: str, question: str) -> int:
    """Run every check against ``url``, print one line each; 0 when each call ended as expected."""
    client = openai.OpenAI(base_url=f"{url.rstrip('/')}/v1", api_key=token or "unused", max_retries=0, timeout=600)
    print(f"openai {openai.__version__} against {url}/v1\n")
    expected_ok, ok = 5, True
    for number, (name, call) in enumerate(checks(client, question)):
        line = outcome(call)
        ok &= line.startswith("OK") == (number < expected_ok)
        print(f"{name:42} {line}")
    print("\nevery call ended as expected" if ok else "\nSOME CALL DID NOT END AS EXPECTED")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server's base URL (default: start one on a temp store)")
    parser.add_argument("--token", default="", help="its API_TOKEN, if it has one")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="the embedded model of the server it starts")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.url:
        return run(args.url, args.token, args.question)
    with own_server(args.model) as url:
        return run(url, "", args.question)


if __name__ == "__main__":
    sys.exit(main())
