"""Shared fixtures: real PDFs made with PyMuPDF, a real Chroma store in a temp dir,
and the real embedded models, loaded once per test session."""

from __future__ import annotations

from pathlib import Path

import pymupdf
import pytest

import config
import ingest
import models

BENCH_DIR = Path(__file__).resolve().parents[2] / "shared" / "bench"

# The test suite uses the small embedded chat model: answer quality is not what it tests.
TEST_LLM = "qwen2.5-coder-0.5b"


def write_text_pdf(path: Path, pages: list[str]) -> Path:
    """A PDF with one page of real (selectable) text per entry of ``pages``."""
    doc = pymupdf.open()
    for text in pages:
        page = doc.new_page()
        page.insert_textbox(pymupdf.Rect(50, 50, 545, 800), text, fontsize=11)
    doc.save(path)
    doc.close()
    return path


def image_only_page(doc: pymupdf.Document, text: str) -> None:
    """Append a page that shows ``text`` only as a picture (no text layer), like a scan."""
    scratch = pymupdf.open()
    page = scratch.new_page()
    page.insert_textbox(pymupdf.Rect(50, 50, 545, 800), text, fontsize=16)
    pix = page.get_pixmap(dpi=150)
    target = doc.new_page()
    target.insert_image(target.rect, pixmap=pix)
    scratch.close()


@pytest.fixture(scope="session")
def embedder() -> models.MiniLMEmbeddings:
    return models.MiniLMEmbeddings()


@pytest.fixture(scope="session")
def llm() -> models.EmbeddedChatModel:
    return models.EmbeddedChatModel.load(TEST_LLM)


@pytest.fixture(scope="session")
def default_llm() -> models.EmbeddedChatModel:
    """The app's default embedded model, for the few tests where answer quality is the point."""
    return models.EmbeddedChatModel.load(config.EMBEDDED_LLM)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A real, empty ChromaDB store on disk; config points at it."""
    path = tmp_path / "chroma_store"
    monkeypatch.setattr(config, "CHROMA_PERSIST_DIR", str(path))
    return ingest.get_client(str(path))


@pytest.fixture
def three_page_pdf(tmp_path) -> Path:
    return write_text_pdf(
        tmp_path / "facts.pdf",
        [
            "Chapter 1. The lighthouse keeper of Port Elwin was Margaret Tolland. "
            "She kept the lamp burning for forty-one winters without missing a night.",
            "Chapter 2. The harbour's fishing fleet landed mostly cod and haddock. "
            "In 1911 the catch reached 3,200 tonnes, a record for the coast.",
            "Chapter 3. The railway reached the town in 1889. Trains to the capital "
            "took nine hours and carried mail, fish and passengers.",
        ],
    )
