"""Rerankers: a second reading of the evidence lines, the question and each line read together.

The first search (keywords + meaning, retriever.py) finds the pages; evidence.py ranks their lines by
keywords and meaning. A reranker, when the setting names one, adds its own ranking of those lines:

    setting   RERANKER (config.py): "none" (the default), "local:<folder or .onnx file>", "ollama:<model>"
    -> kind   ``reranker_choice``: ("none", ""), ("local", the path), ("ollama", the model)
    -> read   local: ``local_reranker`` reads the folder's files, no weights loaded yet:
                a sentence-transformers CrossEncoder folder (config.json, weights, tokenizer), read by that
                package when it is installed; else the folder's ONNX export (model.onnx or onnx/model.onnx),
                or the .onnx file named, with its tokenizer.json beside it or one folder up
              a path that is missing or of neither kind: a ModelUnavailableError, one sentence, never a download
              ollama: the model is asked of Ollama (``embedders.ollama_embeddings``: the same sentence when
              Ollama is down or lacks it)
    -> loaded once per process under a lock (``get_reranker``), like the embedders; a load that fails is not
              kept, so it is tried again. ``check_reranker`` loads it when the app opens, so what is wrong is
              said then, and the first question does not pay for the load
    -> scores ``Reranker.scores(question, texts)``: one float per text, higher is more relevant
    -> used   ``rerank_lines``, evidence.best_lines' one hook: the candidate lines (those of the pages that
              show some, before any is chosen) get one more ranking in the lines' Reciprocal Rank Fusion,
              the reranker's order, with weight RERANK_WEIGHT (1: a vote equal to keywords' and meaning's),
              of all of them or of the RERANK_MAX_LINES best by the other two;
              each page then shows its quota of its best lines, as without a reranker

The three kinds:
    CrossEncoderReranker  sentence-transformers' CrossEncoder.predict over (question, line) pairs
    OnnxReranker          onnxruntime + tokenizers: each pair encoded as the model was trained
                          ([CLS] question [SEP] line [SEP], segment ids 0 then 1, by tokenizer.json's own
                          template), its one logit through a sigmoid, as CrossEncoder.predict gives it
    OllamaReranker        Ollama has no rerank endpoint (ollama/ollama#3368: "reranker" models there are chat
                          models with a prompt), so an Ollama embedding model reads the question and the lines
                          in one /api/embed request and the score is their cosine: a second, stronger opinion
                          on meaning (bge-m3, mxbai-embed-large, embeddinggemma), not a cross-encoder. A chat
                          model asked for a score per line was not chosen: one generation per line is seconds
                          of CPU per question, and its numbers are coarse ties

No reranker ships with the app: no PyPI package carries a cross-encoder's weights that loads without a
download (docs/experiments/2026-11-28-reranker.md).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import numpy as np

import config
import embedders
from models import ModelUnavailableError
from retriever import rrf

log = logging.getLogger(__name__)

# How a person gets a local reranker: said whenever a folder or file cannot be used.
LOCAL_RERANKER_HELP = (
    "A local reranker is a cross-encoder folder (config.json, its weights and tokenizer; e.g. `hf download "
    "cross-encoder/ms-marco-MiniLM-L6-v2 --local-dir DIR` on a machine with internet), read by sentence-transformers, "
    "or its ONNX export with tokenizer.json beside it (`optimum-cli export onnx --model DIR --task text-classification "
    "OUT`), which needs nothing more. See docs/settings.md."
)
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class Reranker:
    """What every reranker does: ``scores(question, texts)``, one float per text, higher for a text that
    answers the question better. ``name`` says which model, for the log."""

    name: str = ""

    def scores(self, question: str, texts: list[str]) -> list[float]:
        raise NotImplementedError


# -----------------------------------------------------------------------------
# Local rerankers: a CrossEncoder folder or an ONNX export


def _onnx_file(path: Path, setting: str) -> tuple[Path, Path]:
    """(the .onnx file, the folder of its tokenizer.json: beside it or one folder up)."""
    folder = next((f for f in (path.parent, path.parent.parent) if (f / "tokenizer.json").is_file()), None)
    if folder is None:
        raise ModelUnavailableError(
            f"{setting}: the ONNX model {path} has no tokenizer.json beside it (nor one folder up), and it needs its own "
            f"tokenizer. Copy the model's tokenizer.json there. {LOCAL_RERANKER_HELP}")
    return path, folder


def local_reranker(value: str, setting: str = "RERANKER") -> tuple[str, Path, Path]:
    """What the folder or .onnx file ``value`` holds, read from its files (no weights loaded): ("cross-encoder",
    folder, folder) or ("onnx", the .onnx file, the folder of its tokenizer.json); ModelUnavailableError with one
    plain sentence when it is missing, of neither kind, or a CrossEncoder folder without the package to read it
    and no export beside it.

    local_reranker("/models/ms-marco") -> ("onnx", Path("/models/ms-marco/onnx/model.onnx"), Path("/models/ms-marco"))
    (sentence-transformers not installed; with it: ("cross-encoder", Path("/models/ms-marco"), Path("/models/ms-marco")))
    """
    path = Path(value).expanduser().absolute()
    where = f"{setting}=local:{value}"
    if not value.strip() or not path.exists():
        raise ModelUnavailableError(f"{where} names no folder or file on this machine. {LOCAL_RERANKER_HELP}")
    if path.is_file():
        if path.suffix != ".onnx":
            raise ModelUnavailableError(f"{where} names a file that is not an ONNX model (.onnx). {LOCAL_RERANKER_HELP}")
        return ("onnx", *_onnx_file(path, where))
    cross_encoder = (path / "config.json").is_file() and any((path / name).is_file() for name in WEIGHT_FILES)
    export = next((p for p in (path / "model.onnx", path / "onnx" / "model.onnx") if p.is_file()), None)
    if cross_encoder and embedders._installed("sentence_transformers"):
        return "cross-encoder", path, path
    if export is not None:
        return ("onnx", *_onnx_file(export, where))
    if cross_encoder:
        raise ModelUnavailableError(
            f"{where} is a cross-encoder folder, and reading it needs the sentence-transformers package, which is not "
            "installed. Run: pip install sentence-transformers, or name its ONNX export (model.onnx), which needs nothing more.")
    raise ModelUnavailableError(
        f"{where} names a folder that is neither a cross-encoder (config.json with model.safetensors or "
        f"pytorch_model.bin) nor an ONNX export (model.onnx). {LOCAL_RERANKER_HELP}")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


class OnnxReranker(Reranker):
    """A cross-encoder's ONNX export run by onnxruntime with its tokenizer.json: nothing beyond what the
    app installs anyway. The graph takes ``input_ids``, ``attention_mask`` and (BERT-like models)
    ``token_type_ids``, and gives one logit per pair (its first output, (pairs, 1) or (pairs,))."""

    def __init__(self, path: Path, folder: Path) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = config.EMBED_THREADS, 1
        try:
            self.session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime raises its own errors for a damaged or foreign file
            raise ModelUnavailableError(f"RERANKER: onnxruntime cannot load {path}: {err}") from err
        self.inputs = {i.name: (np.int32 if "int32" in i.type else np.int64) for i in self.session.get_inputs()}
        if "input_ids" not in self.inputs or set(self.inputs) - {"input_ids", "attention_mask", "token_type_ids"}:
            raise ModelUnavailableError(
                f"RERANKER: {path} asks for inputs {', '.join(sorted(self.inputs))}; a cross-encoder's export takes "
                "input_ids, attention_mask and token_type_ids (export it with --task text-classification).")
        output = self.session.get_outputs()[0]
        if len(output.shape) == 2 and isinstance(output.shape[1], int) and output.shape[1] != 1:
            raise ModelUnavailableError(
                f"RERANKER: {path} gives {output.shape[1]} scores per pair; a reranker gives one (a cross-encoder "
                "trained to rank, such as ms-marco-MiniLM-L6-v2).")
        self.output = output.name
        positions = json.loads((folder / "config.json").read_text()).get("max_position_embeddings") \
            if (folder / "config.json").is_file() else None
        self.max_tokens = min(config.RERANK_MAX_TOKENS, positions or config.RERANK_MAX_TOKENS)
        self.tokenizer = embedders.prepared_tokenizer(Tokenizer.from_file(str(folder / "tokenizer.json")), self.max_tokens)
        self.name = f"local:{folder.name}/{path.relative_to(folder)}"

    def _logits(self, question: str, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch([(question, text) for text in texts])
        given = {"input_ids": np.array([e.ids for e in encodings]), "attention_mask": np.array([e.attention_mask for e in encodings]),
                 "token_type_ids": np.array([e.type_ids for e in encodings])}
        feed = {name: given[name].astype(kind) for name, kind in self.inputs.items()}
        return np.asarray(self.session.run([self.output], feed)[0], dtype=np.float64).reshape(len(texts), -1)[:, 0]

    def scores(self, question: str, texts: list[str]) -> list[float]:
        # shortest first, so that a batch pads only to its own longest pair
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        scores = np.zeros(len(texts))
        for start in range(0, len(order), config.RERANK_BATCH_SIZE):
            batch = order[start : start + config.RERANK_BATCH_SIZE]
            scores[batch] = _sigmoid(self._logits(question, [texts[i] for i in batch]))
        return scores.tolist()


class CrossEncoderReranker(Reranker):
    """A sentence-transformers CrossEncoder folder, loaded by that package (installed separately:
    ``pip install sentence-transformers``), offline: HF_HUB_OFFLINE and ``local_files_only`` make a
    folder that lacks a file fail at once instead of trying to download it."""

    def __init__(self, folder: Path) -> None:
        os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"  # before the import: read at import
        import torch
        from sentence_transformers import CrossEncoder

        torch.set_num_threads(config.EMBED_THREADS)
        try:
            self.model = CrossEncoder(str(folder), device="cpu", local_files_only=True, max_length=config.RERANK_MAX_TOKENS)
        except Exception as err:  # a missing file, a model class this transformers lacks...
            raise ModelUnavailableError(f"RERANKER: sentence-transformers cannot load {folder}: {err}") from err
        self.name = f"local:{folder.name}"

    def scores(self, question: str, texts: list[str]) -> list[float]:
        scores = self.model.predict([(question, text) for text in texts], batch_size=config.RERANK_BATCH_SIZE,
                                    show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(scores, dtype=np.float64).reshape(len(texts), -1)[:, 0].tolist()


# -----------------------------------------------------------------------------
# Ollama: an embedding model's cosine (Ollama has no rerank endpoint)


class OllamaReranker(Reranker):
    """The cosine of the question's and each text's vectors from Ollama's embedding model ``model``, with the
    model's prompts when the app knows them (``embedders.ollama_embeddings``): one /api/embed request for the
    texts, one for the question."""

    def __init__(self, model: str) -> None:
        try:
            self.embedder = embedders.ollama_embeddings(model)
        except ModelUnavailableError as err:
            raise ModelUnavailableError(f"RERANKER=ollama:{model}: {err}") from err
        self.name = f"ollama:{model}"

    def scores(self, question: str, texts: list[str]) -> list[float]:
        query = embedders.unit_length(np.array([self.embedder.embed_query(question)]))[0]
        return (embedders.unit_length(np.array(self.embedder.embed_documents(texts))) @ query).astype(np.float64).tolist()


# -----------------------------------------------------------------------------
# Choosing and keeping the reranker


def reranker_choice(setting: str) -> tuple[str, str]:
    """RERANKER split into (kind, what):

    "none"            -> ("none", "")
    "local:/models/m" -> ("local", "/models/m")
    "ollama:bge-m3"   -> ("ollama", "bge-m3")
    """
    kind, _, what = setting.partition(":")
    return kind, what


def load_reranker(setting: str) -> Reranker | None:
    """The reranker ``setting`` names, loaded (None for "none")."""
    kind, what = reranker_choice(setting)
    if kind == "local":
        kind, path, folder = local_reranker(what)
        reranker = CrossEncoderReranker(path) if kind == "cross-encoder" else OnnxReranker(path, folder)
    elif kind == "ollama":
        reranker = OllamaReranker(what)
    else:
        return None
    log.info("Reranker: %s (%s)", reranker.name, type(reranker).__name__)
    return reranker


_RERANKERS: dict[str, Reranker | None] = {}  # by setting, once loaded
_LOADING = threading.Lock()


def get_reranker(setting: str | None = None) -> Reranker | None:
    """The reranker ``setting`` (default: RERANKER) names, loaded once per process; None for "none".
    One lock around loading, as for the embedders; a load that fails is not kept, so it is tried again."""
    setting = config.RERANKER if setting is None else setting
    with _LOADING:
        if setting not in _RERANKERS:
            _RERANKERS[setting] = load_reranker(setting)
        return _RERANKERS[setting]


def forget_rerankers() -> None:
    """Drop the loaded rerankers (tests change the setting between runs)."""
    with _LOADING:
        _RERANKERS.clear()


def check_reranker() -> None:
    """Load the reranker RERANKER names now: ModelUnavailableError with its sentence when it cannot be had
    (the app calls this when it opens, so the first question does not pay for the load either)."""
    get_reranker()


def rerank_lines(question: str, texts: list[str], fused: np.ndarray, setting: str | None = None) -> np.ndarray:
    """``fused`` (the lines' fused scores, evidence.fuse_lines) with the ranking of ``texts`` by the reranker
    ``setting`` names (default: RERANKER; a benchmark hands in its own) added as one more ranking of the
    Reciprocal Rank Fusion, weight RERANK_WEIGHT; ``fused`` as it is for "none".

    With the keyword and meaning rankings each adding 1 / (RRF_K + rank), the line the reranker puts first
    gains RERANK_WEIGHT / (RRF_K + 1), its second RERANK_WEIGHT / (RRF_K + 2), and so on. With
    RERANK_MAX_LINES, only that many lines, the best by ``fused``, are read by the reranker (its time grows with
    the lines it reads); the others gain nothing.
    """
    reranker = get_reranker(setting)
    if reranker is None or not texts:
        return fused
    read = [int(i) for i in np.argsort(-fused, kind="stable")]
    read = sorted(read[: config.RERANK_MAX_LINES] if config.RERANK_MAX_LINES > 0 else read)
    scores = np.asarray(reranker.scores(question, [texts[i] for i in read]), dtype=np.float64)
    added = rrf([[read[i] for i in np.argsort(-scores, kind="stable")]], weights=[config.RERANK_WEIGHT])
    return fused + np.array([added.get(i, 0.0) for i in range(len(texts))])
