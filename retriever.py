"""Hybrid retrieval over the whole library: meaning (ChromaDB) + keywords (BM25), fused by RRF.

One question flows like this:

    question -> embed -> cosine top-N from each document's Chroma collection  (semantic leg)
             -> tokenize -> BM25 scores over every chunk's title+keywords+text  (keyword leg)
             -> Reciprocal Rank Fusion of the two rankings
             -> best chunk per (document, page), top-k pages, each with a trace

The keyword leg exists because dense vectors blur exact terms (product codes,
names, numbers) that people search for; the semantic leg finds paraphrases
that share no word with the page. A ``scope`` (a list of collection names)
restricts both legs to chosen documents.

The BM25 index lives in memory and is rebuilt from the store whenever the set
of complete documents (or their page labels) changes, so it never holds a
removed document. Scores are exactly rank-bm25's BM25Okapi (a test checks it),
computed as one sparse matrix product so a query stays in milliseconds at
100k chunks where rank-bm25's Python loop takes hundreds.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy.sparse import csr_matrix

import config
import ingest
import models

log = logging.getLogger(__name__)

_WORD = re.compile(r"\w+", re.UNICODE)
STOPWORDS = frozenset(config.STOPWORDS.split())


def tokenize(text: str) -> list[str]:
    """Lower-cased Unicode words without punctuation or stopwords.

    tokenize("The page. Page 3, Zürich!") -> ["page", "page", "3", "zürich"]
    """
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def rrf(rankings: list[list[str]], k: int | None = None) -> dict[str, float]:
    """Reciprocal Rank Fusion: each list adds 1 / (k + rank) to the ids it ranks (rank from 1).

    rrf([["a", "b"], ["b", "c"]], k=60) -> {"a": 1/61, "b": 1/62 + 1/61, "c": 1/62}
    """
    k = config.RRF_K if k is None else k
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, 1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
    return fused


class SparseBM25:
    """BM25Okapi (rank-bm25's formula, including its idf floor) as a term x chunk sparse matrix."""

    def __init__(self, corpus: list[list[str]], k1: float | None = None, b: float | None = None, epsilon: float = 0.25):
        k1 = config.BM25_K1 if k1 is None else k1
        b = config.BM25_B if b is None else b
        self.vocab: dict[str, int] = {}
        rows, cols, freqs = [], [], []
        for j, tokens in enumerate(corpus):
            for term, count in Counter(tokens).items():
                rows.append(self.vocab.setdefault(term, len(self.vocab)))
                cols.append(j)
                freqs.append(count)
        rows, cols, tf = np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64), np.array(freqs, dtype=np.float64)
        n_docs = len(corpus)
        lengths = np.array([len(t) for t in corpus], dtype=np.float64)
        avgdl = lengths.mean() if n_docs else 0.0
        df = np.bincount(rows, minlength=len(self.vocab)).astype(np.float64)
        idf = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
        if len(idf):
            idf[idf < 0] = epsilon * idf.mean()  # rank-bm25: negative idf -> epsilon * average idf
        norm = k1 * (1 - b + b * lengths[cols] / max(avgdl, 1e-9)) if len(cols) else 0
        weights = idf[rows] * tf * (k1 + 1) / (tf + norm)
        self.matrix = csr_matrix((weights, (rows, cols)), shape=(len(self.vocab), n_docs))

    def get_scores(self, query: list[str]) -> np.ndarray:
        """One score per chunk; a repeated query term counts again, as in rank-bm25."""
        ids = [self.vocab[t] for t in query if t in self.vocab]
        if not ids:
            return np.zeros(self.matrix.shape[1])
        return np.asarray(self.matrix[ids].sum(axis=0)).ravel()


# -----------------------------------------------------------------------------


@dataclass
class Hit:
    """One retrieved passage: where it is, what it says, and why it was chosen."""

    id: str
    collection: str
    doc_name: str
    page: int
    start: int
    end: int
    text: str
    title: str = ""
    keywords: str = ""
    score: float = 0.0  # fused RRF score (or the single leg's score in a one-leg mode)
    trace: dict = field(default_factory=dict)  # semantic_rank/score, bm25_rank/score, rrf


def _bm25_text(text: str, meta: dict) -> str:
    return " ".join((meta.get("title", ""), meta.get("keywords", ""), text))


class Retriever:
    """Search the complete documents of one store; see the module docstring for the flow."""

    def __init__(self, client=None, embedder=None):
        self.client = client or ingest.get_client()
        self.embedder = embedder or models.get_embeddings()
        self._signature: tuple | None = None
        self._embed_query = lru_cache(maxsize=1024)(self.embedder.embed_query)  # follow-ups and evals repeat queries
        self._collections: dict[str, object] = {}

    # -- keeping the keyword index in step with the store --------------------

    def _library_signature(self) -> tuple:
        docs = ingest.list_documents(self.client)
        return tuple((d["collection"], d.get("enriched_pages", 0)) for d in docs)

    def refresh(self) -> None:
        """Rebuild the BM25 index if documents were added, removed or labelled since last time."""
        signature = self._library_signature()
        if signature == self._signature:
            return
        self._collections = {
            name: ingest.open_collection(self.client, name, self.embedder) for name, _ in signature
        }
        ids, texts, metas, owners = [], [], [], []
        for name, col in self._collections.items():
            got = col.get(include=["documents", "metadatas"])
            ids += got["ids"]
            texts += got["documents"]
            metas += got["metadatas"]
            owners += [name] * len(got["ids"])
        self._ids, self._texts, self._metas = ids, texts, metas
        self._owners = np.array(owners)
        self._row_of = {chunk_id: i for i, chunk_id in enumerate(ids)}
        self._bm25 = SparseBM25([tokenize(_bm25_text(t, m)) for t, m in zip(texts, metas)])
        self._signature = signature
        log.info("Keyword index rebuilt: %d documents, %d chunks", len(self._collections), len(ids))

    # -- the two legs ---------------------------------------------------------

    def _in_scope(self, scope: list[str] | None) -> list[str]:
        return [c for c in self._collections if scope is None or c in scope]

    def semantic(self, question: str, scope: list[str] | None = None, n: int | None = None) -> list[tuple[str, float]]:
        """(chunk id, cosine similarity) best first, from every in-scope collection."""
        self.refresh()
        n = n or config.CANDIDATES
        vector = self._embed_query(question)
        found = []
        for name in self._in_scope(scope):
            col = self._collections[name]
            got = col.query(query_embeddings=[vector], n_results=min(n, col.count()), include=["distances"])
            found += [(i, 1.0 - d) for i, d in zip(got["ids"][0], got["distances"][0])]
        return sorted(found, key=lambda x: -x[1])[:n]

    def keyword(self, question: str, scope: list[str] | None = None, n: int | None = None) -> list[tuple[str, float]]:
        """(chunk id, BM25 score) best first, only chunks that share a term with the question."""
        self.refresh()
        n = n or config.CANDIDATES
        scores = self._bm25.get_scores(tokenize(question))
        if scope is not None:
            scores = np.where(np.isin(self._owners, list(scope)), scores, 0.0)
        best = np.argsort(-scores)[:n]
        return [(self._ids[i], float(scores[i])) for i in best if scores[i] > 0]

    # -- fusion ---------------------------------------------------------------

    def search(
        self, question: str, k: int | None = None, scope: list[str] | None = None, mode: str = "hybrid"
    ) -> list[Hit]:
        """The ``k`` best pages for ``question`` (one best chunk each), with traces.

        ``mode`` is "hybrid", "semantic" or "bm25"; the single-leg modes exist for
        the evaluation's ablations.
        """
        k = k or config.TOP_K
        semantic = self.semantic(question, scope) if mode in ("hybrid", "semantic") else []
        keyword = self.keyword(question, scope) if mode in ("hybrid", "bm25") else []
        fused = rrf([[i for i, _ in semantic], [i for i, _ in keyword]])
        trace = {i: {"rrf": s} for i, s in fused.items()}
        for leg, ranking in (("semantic", semantic), ("bm25", keyword)):
            for rank, (chunk_id, score) in enumerate(ranking, 1):
                trace[chunk_id].update({f"{leg}_rank": rank, f"{leg}_score": round(score, 4)})
        hits, seen_pages = [], set()
        for chunk_id in sorted(fused, key=lambda i: -fused[i]):
            hit = self._hit(chunk_id, fused[chunk_id], trace[chunk_id])
            if (hit.collection, hit.page) in seen_pages:
                continue
            seen_pages.add((hit.collection, hit.page))
            hits.append(hit)
            if len(hits) == k:
                break
        return hits

    def _hit(self, chunk_id: str, score: float, trace: dict) -> Hit:
        row = self._row_of[chunk_id]
        meta = self._metas[row]
        return Hit(
            id=chunk_id,
            collection=str(self._owners[row]),
            doc_name=meta["doc_name"],
            page=meta["page"],
            start=meta["start"],
            end=meta["end"],
            text=self._texts[row],
            title=meta.get("title", ""),
            keywords=meta.get("keywords", ""),
            score=score,
            trace=trace,
        )
