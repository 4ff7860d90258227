"""Hybrid retrieval over the whole library: meaning (vectors from ChromaDB) + keywords (BM25), fused.

One question flows like this:

    question -> question.parse_question() (once, by the caller): the question apart from
                answer-form instructions (units, persona, "relying on ...") and the years it names
             -> spelled_out(): each acronym followed by the name it stands for on the page
                that shares the question's words ("MD" -> "MD (Model Debate)"; routing.py)
             -> embed (once per way the library's documents write years) -> cosine top-N chunks
                of the in-scope documents -> pages                                  (semantic leg)
             -> keyword_tokens -> BM25 over every page's title + keywords + text     (keyword leg)
                (English words matched by their singular; less the searched documents' own names where
                printed on most of their pages, or as their file names give them)
             -> pages the question names outright ("page 14", "cover page")         (page leg)
             -> pages a domain marked with one of the question's hints (domains.py)  (hint leg)
             -> fusion (RRF, with a seat for each leg's best page by default, and for each
                hint its best page in a document already found; that page then leads; the
                keyword leg's vote weighted by its page's document: KEYWORD_WEIGHT for English,
                MULTILINGUAL_KEYWORD_WEIGHT for documents the multilingual embedder made)
             -> routing: documents the question names are searched first; the library fills the rest
             -> top-k pages, each shown as its best passage, with a trace
    hits     -> load_pages(): each page once, with its text, chunks, lines and sentence spans,
                for the evidence lines, the model's context and a domain's worked-out answer
    lines    -> line_scores(): keyword and meaning scores of candidate evidence lines

The keyword leg exists because dense vectors blur exact terms (product codes,
names, numbers) that people search for; the semantic leg finds paraphrases
that share no word with the page. A ``scope`` (a list of collection names)
restricts every leg to chosen documents. Results are one per (document, page).

Each document's vectors come from the embedder for its language (embedders.embedder_for:
the app's embedder for English, MULTILINGUAL_EMBEDDER's for others), and its pages' keyword
tokens are split by its language's rules (stems, stopwords; text_utils). The question
is embedded once per embedder the library uses, each embedder's chunks compared with
it, and tokenised once per language in scope.

A document whose vectors another embedder made (its collection records which)
is left out of every search, with a warning in the log, until it is re-embedded
(``ingest.reembed_document``); ``other_embedder_documents()`` says which, and a
search scoped to such documents only says so instead of finding nothing.

ChromaDB is the store of record; the retriever keeps an in-memory copy of each
document's chunks, vectors and page tokens, read once per document and dropped
when the document goes, and re-stacks its matrices whenever the set of complete
documents (or their page labels) changes, so it never holds a removed document.
Semantic search is then one exact matrix-vector product, and BM25 scores are
exactly rank-bm25's BM25Okapi over the same terms (a test checks it) computed as one sparse matrix
product: a query stays in milliseconds at 100k chunks, where one ChromaDB query
per document took 580 ms and rank-bm25's Python loop hundreds more.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from scipy.sparse import csr_matrix

import config
import domains
import embedders
import ingest
import rules
from pages import Page, page_text
from records import Hit
from question import ParsedQuestion, as_read, parse_question
from routing import (
    DocumentProfile,
    distinctive_words,
    document_profile,
    acronyms_asked,
    expand_acronyms,
    expansion_here,
    file_named_runs,
    name_runs_in_question,
    names_in_question,
    row_labels_with_initials,
    route,
)
from text_utils import STOPWORDS, acronym_tokens, acronyms_written, keyword_tokens, names_with_initials, singular, tokenize, years_named

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Steps:
    """The optional steps of a search; the defaults are the product. Not user settings: the lab
    (eval_retrieval.ABLATIONS) passes other values, one object per variant, to measure what each adds.

    mode            "hybrid", or one leg alone: "semantic", "bm25"
    question_parsing  search the question without its instructions about the answer's form (question.py)
    page_refs       the pages a question names outright ("page 14") as a ranking of their own
    keyword_seat    the keyword leg's best page stays in the top k whatever fusion ranks it
    domain_hints    the pages a domain says the question points at (domains.py) as a ranking, with seats
    acronyms        each acronym also searched as the name it abbreviates on the page (``spelled_out``)
    routing         the documents a question names searched first, the library filling the rest
    fusion          "seats": RRF plus the semantic leg's best page; "rrf": RRF alone
    keyword_weight  the keyword leg's vote in the fusion, each other leg's being 1; None: each document's
                    own, by the embedder that made it (``Retriever.keyword_weight``)
    """

    mode: str = "hybrid"
    question_parsing: bool = True
    page_refs: bool = True
    keyword_seat: bool = True
    domain_hints: bool = True
    acronyms: bool = True
    routing: bool = True
    fusion: str = "seats"
    keyword_weight: float | None = None


PRODUCT = Steps()

_ORDINALS = {w: i for i, w in enumerate(
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth".split(), 1)}
_NUMBER_WORDS = {w: i for i, w in enumerate(
    "one two three four five six seven eight nine ten eleven twelve".split(), 1)}


def page_references(question: str, page_count: int) -> set[int]:
    """Pages a question names outright, for a document of ``page_count`` pages.

    page_references("On page 14 and the cover page, and the second last page?", 20) -> {1, 14, 19}
    """
    q = question.lower()
    pages = {int(n) for n in re.findall(r"\b(?:pages?|slides?|p\.|pp\.)\s*(\d{1,4})\b", q)}
    pages |= {int(n) for n in re.findall(r"\bpages?\s+\d{1,4}\s*(?:and|,|-|to)\s*(\d{1,4})", q)}
    pages |= {_NUMBER_WORDS[w] for w in re.findall(r"\bpage\s+(" + "|".join(_NUMBER_WORDS) + r")\b", q)}
    pages |= {_ORDINALS[w] for w in re.findall(r"\b(" + "|".join(_ORDINALS) + r")\s+page\b", q)}
    if re.search(r"\b(cover|front|title|first)\s+page\b", q):
        pages.add(1)
    if re.search(r"\b(second|2nd)[\s-]+(to[\s-]+)?last\s+page\b", q):
        pages.add(page_count - 1)
    elif re.search(r"\blast\s+page\b", q):
        pages.add(page_count)
    return {p for p in pages if 1 <= p <= page_count}


Weight = float | Callable[[object], float]  # one list's vote: the same for every id, or per id


def rrf(rankings: list[list], k: int | None = None, weights: list[Weight] | None = None) -> dict:
    """Reciprocal Rank Fusion: each list adds weight / (k + rank) to the ids it ranks (rank from 1); a list's
    weight is 1 unless given, a number, or a function of the id.

    rrf([["a", "b"], ["b", "c"]], k=60) -> {"a": 1/61, "b": 1/62 + 1/61, "c": 1/62}
    rrf([["a"], ["b"]], k=60, weights=[1, 0.5]) -> {"a": 1/61, "b": 0.5/61}
    """
    k = config.RRF_K if k is None else k
    weights = weights or [1.0] * len(rankings)
    fused: dict = {}
    for ranking, weight in zip(rankings, weights):
        for rank, item in enumerate(ranking, 1):
            fused[item] = fused.get(item, 0.0) + (weight(item) if callable(weight) else weight) / (k + rank)
    return fused


class SparseBM25:
    """BM25Okapi (rank-bm25's formula, including its idf floor) as a term x chunk sparse matrix."""

    def __init__(self, corpus: list[list[str]], k1: float | None = None, b: float | None = None, epsilon: float = 0.25):
        k1 = config.BM25_K1 if k1 is None else k1
        b = config.BM25_B if b is None else b
        self.vocab: dict[str, int] = {}
        self.forms = rules.on("plural_matches_singular")  # fixed for the index's life: its terms and its queries read alike
        rows, cols, freqs = [], [], []
        for j, tokens in enumerate(corpus):
            for term, count in Counter([self.term(token) for token in tokens]).items():
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
        self.idf = idf
        self.matrix = csr_matrix((weights, (rows, cols)), shape=(len(self.vocab), n_docs))

    rules.register("plural_matches_singular", "a keyword matches its plural and its singular (inventory, inventories)",
                   "tests/test_retriever.py::test_rule_a_keyword_matches_its_plural_and_its_singular",
                   pays_on="docs/experiments/2026-11-29-plurals.md: states@3 88 -> 94 of 177 over six sets none was read for it "
                           "(6 won, none lost), page hit@5 151 -> 152")

    def term(self, word: str) -> str:
        """Rule: a keyword matches its plural and its singular (inventory, inventories).
        The index term of a keyword token: an English word's singular (text_utils.singular), any other token as it
        is (a figure, an acronym token "^pss", a page of another language, whose tokens its own stemmer made).
        Only the plural: a stemmer's "oper" would make "operating income" match every row of a "Statement of Operations"."""
        return singular(word) if self.forms and word.isascii() and word.isalpha() else word

    def term_ids(self, words: list[str]) -> dict[str, int]:
        """{word: the row of its term} for those of ``words`` the index holds."""
        return {word: self.vocab[term] for word in words if (term := self.term(word)) in self.vocab}

    def get_scores(self, query: list[str]) -> np.ndarray:
        """One score per chunk; a repeated query term counts again, as in rank-bm25."""
        ids = [self.vocab[term] for word in query if (term := self.term(word)) in self.vocab]
        if not ids:
            return np.zeros(self.matrix.shape[1])
        return np.asarray(self.matrix[ids].sum(axis=0)).ravel()


PageKey = tuple[str, int]  # (collection name, 1-based page number)
def fuse(rankings: dict[str, list[tuple[PageKey, float]]], weights: dict[str, Weight] | None = None) -> dict[PageKey, float]:
    """One fused score per page: Reciprocal Rank Fusion of each leg's (page, score) ranking, best first,
    each leg's vote weighted by ``weights`` (1 for a leg not named; a function of the page for a vote that
    depends on its document).

    fuse({"a": [(p, 0.9), (q, 0.3)], "b": [(q, 5.0)]}) -> {p: 1/61, q: 1/62 + 1/61}
    """
    weights = weights or {}
    return rrf([[key for key, _ in ranking] for ranking in rankings.values()],
               weights=[weights.get(leg, 1.0) for leg in rankings])


def with_seats(top: list[PageKey], seated: list[PageKey]) -> list[PageKey]:
    """``top`` with every seated page in it, each taking the place of the lowest-ranked page not seated.

    with_seats([a, b, c], [d]) -> [a, b, d];  with_seats([a, b, c], [d, c]) -> [a, d, c]
    """
    top = list(top)
    for page in seated:
        if page in top:
            continue
        free = [i for i in range(len(top) - 1, -1, -1) if top[i] not in seated]
        if free:
            top[free[0]] = page
    return top


def ranked(keys: list[PageKey]) -> list[tuple[PageKey, float]]:
    """Scores for a ranking that has none: ranked([a, b]) -> [(a, 1.0), (b, 0.5)]"""
    return [(key, 1.0 - i / len(keys)) for i, key in enumerate(keys)]


# -----------------------------------------------------------------------------


def _top_indices(scores: np.ndarray, n: int) -> list[int]:
    """Indices of the ``n`` largest scores, largest first (argpartition: no full sort)."""
    if len(scores) > n:
        candidates = np.argpartition(-scores, n)[:n]
    else:
        candidates = np.arange(len(scores))
    return sorted(candidates.tolist(), key=lambda i: -scores[i])


rules.register("meaning_where_a_word_is_asked", "a line is read for its meaning only when it holds a word the question asks (or when no "
               "line does): embedding every line of the pages shown is most of the time to evidence on pages never read, and the "
               "line that answers holds a word asked", "tests/test_retriever.py::test_rule_a_line_is_read_for_its_meaning_only_when_it_holds_a_word_asked",
               pays_on="docs/experiments/2026-11-28-lines-as-the-page-prints-them.md: time to evidence on first-seen 10-K pages p50 "
                       "2.79 -> 1.96 s; states@3 unchanged on FinanceBench, fresh3, fresh4 and fresh4_mm, mmlongbench 7 -> 8 of 25")


def meaning_read(keyword: np.ndarray) -> np.ndarray:
    """Rule: a line is read for its meaning only when it holds a word the question asks (or when no line does):
    embedding every line of the pages shown is most of the time to evidence on pages never read, and the line that
    answers holds a word asked. The indices of the lines to embed, given their ``keyword`` scores.

    meaning_read(np.array([0.0, 1.2, 0.0, 0.4])) -> [1, 3];  meaning_read(np.zeros(3)) -> [0, 1, 2]
    """
    holding = np.flatnonzero(keyword > 0)
    return holding if len(holding) and rules.on("meaning_where_a_word_is_asked") else np.arange(len(keyword))


class Retriever:
    """Search the complete documents of one store; see the module docstring for the flow.

    Every leg ranks *pages* (what people cite and what the evaluation scores):
    the semantic leg keeps each page's best chunk, the keyword leg scores whole
    pages (title + keywords + all their text), which measured better than
    scoring chunks, and fusion happens between page rankings.
    """

    def __init__(self, client=None, embedder=None):
        self.client = client or ingest.get_client()
        self.embedder = embedder or embedders.get_embeddings()
        self._signature: tuple | None = None
        self._checked_at = 0.0
        self._loaded: dict[tuple, dict] = {}  # (collection, enriched pages) -> its chunks, vectors, pages
        self._query_embedders: dict[str, Callable[[str], list[float]]] = {}  # embedder name -> its embed_query, cached
        self._line_vectors: dict[tuple[str, str], np.ndarray] = {}  # (embedder, text) -> unit vector, for evidence lines
        self._lock = threading.RLock()
        self._embedder_name = embedders.embedder_name(self.embedder)
        self._other_embedder: list[dict] = []  # complete documents left out: another embedder made their vectors
        self._warned: set[tuple[str, str]] = set()  # (collection, its embedder) already warned about
        self._collections: dict = {}

    # -- keeping the in-memory index in step with the store ------------------

    @staticmethod
    def _key(doc: dict) -> tuple:
        """What a document's part of the index is made from: its name, labelled pages, and how it was built
        (a re-embedded document keeps its name, not its vectors)."""
        return (doc["collection"], doc.get("enriched_pages", 0), doc.get("embedder"), doc.get("extractor"), doc.get("created_at"))

    def _load_collection(self, name: str) -> dict:
        """One document's chunks, vectors and per-page BM25 tokens, read from the store."""
        col = ingest.open_collection(self.client, name, self.embedder)
        language = col.metadata.get("language") or "en"
        got = col.get(include=["documents", "metadatas", "embeddings"])
        pages: dict[int, list[int]] = {}
        for row, meta in enumerate(got["metadatas"]):
            pages.setdefault(meta["page"], []).append(row)
        page_tokens, page_texts = {}, {}
        for page, rows in pages.items():
            meta = got["metadatas"][rows[0]]
            page_texts[page] = " ".join([meta.get("title", "")] + [got["documents"][r] for r in rows])
            page_tokens[page] = keyword_tokens(" ".join([meta.get("title", ""), meta.get("keywords", "")] + [got["documents"][r] for r in rows]), language)
        text = " ".join(page_texts.values())
        first_pages = [page_texts[page] for page in sorted(page_texts)[: config.PROFILE_PAGES]]
        return {
            "profile": document_profile(col.metadata.get("doc_name", name), first_pages, text, language),
            "page_names": {page: set(names_with_initials(text) + row_labels_with_initials(text)) for page, text in page_texts.items()},
            "page_written": {page: acronyms_written(text) for page, text in page_texts.items()},
            "marks": {page: marks for page, text in page_texts.items() if (marks := domains.page_marks(text))},
            "collection": col,
            "language": language,
            "embedder": col.metadata.get("embedder"),
            "ids": got["ids"],
            "texts": got["documents"],
            "metas": got["metadatas"],
            "vectors": np.asarray(got["embeddings"], dtype=np.float32),
            "page_tokens": page_tokens,
        }

    def _refresh_if_stale(self) -> None:
        """Look at the store at most every INDEX_CHECK_SECONDS: listing 200 collections costs ~100 ms."""
        if time.monotonic() - self._checked_at >= config.INDEX_CHECK_SECONDS:
            self.refresh()

    def refresh(self) -> None:
        """Bring the index up to date if documents were added, removed or labelled since last time.

        Call it after changing the store in this process; changes made by other
        processes are picked up within INDEX_CHECK_SECONDS. Only new or relabelled
        documents are read from the store; the BM25 matrix and the vector matrix
        are then re-stacked from what is cached.
        """
        with self._lock:  # one rebuild at a time; searches wait for it
            self._checked_at = time.monotonic()
            docs = ingest.list_documents(self.client)
            signature = tuple(self._key(d) for d in docs)
            if signature == self._signature:
                return
            self._other_embedder = [d for d in docs if ingest.made_with_other_embedder(d, self._embedder_name)]
            for doc in self._other_embedder:
                if (doc["collection"], str(doc.get("embedder"))) not in self._warned:
                    self._warned.add((doc["collection"], str(doc.get("embedder"))))
                    log.warning("%s (%s) was embedded with %s, not %s: left out of searches until it is re-embedded",
                                doc.get("doc_name"), doc["collection"], doc.get("embedder"), self._embedder_name)
            skipped = {d["collection"] for d in self._other_embedder}
            loaded, missed = {}, False
            for key in signature:
                if key[0] in skipped:
                    continue
                try:
                    loaded[key] = self._loaded.get(key) or self._load_collection(key[0])
                except ingest.StoreUnavailableError:
                    raise
                except ingest.IngestError as err:  # removed or rebuilt since it was listed: seen next time
                    log.info("Left %s out of this index: %s", key[0], err)
                    missed = True
            self._loaded = loaded
            self._collections = {key[0]: part["collection"] for key, part in self._loaded.items()}
            self._chunks: dict[str, tuple[str, dict, str]] = {}  # chunk id -> (text, metadata, collection)
            self._page_chunks: dict[PageKey, list[str]] = {}
            self._owner_code = {name: code for code, (name, *_) in enumerate(self._loaded)}
            ids, page_tokens, row_owner = [], [], []
            groups: dict[str, tuple[list, list]] = {}  # embedder -> (row numbers, vectors) of its documents
            for (name, *_), part in self._loaded.items():
                for chunk_id, text, meta in zip(part["ids"], part["texts"], part["metas"]):
                    self._chunks[chunk_id] = (text, meta, name)
                    self._page_chunks.setdefault((name, meta["page"]), []).append(chunk_id)
                rows, vectors = groups.setdefault(part["embedder"], ([], []))
                rows.append(np.arange(len(ids), len(ids) + len(part["ids"])))
                vectors.append(part["vectors"].reshape(len(part["ids"]), -1))
                row_owner += [self._owner_code[name]] * len(part["ids"])
                ids += part["ids"]
                page_tokens += [((name, page), tokens) for page, tokens in part["page_tokens"].items()]
            self._ids = ids
            self._languages = {name: part["language"] for (name, *_), part in self._loaded.items()}
            self._embedder_of = {name: part["embedder"] for (name, *_), part in self._loaded.items()}
            # one matrix per embedder: a question is embedded by each, and their widths differ (384, 512)
            self._vector_groups = {name: (np.concatenate(rows), np.concatenate(vectors)) for name, (rows, vectors) in groups.items()}
            self._pages = [key for key, _ in page_tokens]
            self._row_owner = np.array(row_owner, dtype=np.int32)
            self._page_owner = np.array([self._owner_code[name] for name, _ in self._pages], dtype=np.int32)
            self._bm25 = SparseBM25([tokens for _, tokens in page_tokens])
            self._profiles = {name: part["profile"] for (name, *_), part in self._loaded.items()}
            self._route_weights = distinctive_words(self._profiles)
            self._index_acronyms()
            self._page_marks = {
                (name, page): marks for (name, *_), part in self._loaded.items() for page, marks in part["marks"].items()
            }
            self._wordings = domains.wordings()
            owner_wording = np.array([self._wordings.index(part["profile"].wording) for part in self._loaded.values()], dtype=np.int8)
            self._row_wording = owner_wording[self._row_owner] if len(row_owner) else np.zeros(0, dtype=np.int8)
            self._signature = None if missed else signature  # None: look again at the next refresh
            log.info("Index rebuilt: %d documents, %d pages, %d chunks (%d documents of another embedder left out)",
                     len(self._collections), len(self._pages), len(ids), len(self._other_embedder))

    def _in_scope(self, scope: list[str] | None) -> list[str]:
        return [c for c in self._collections if scope is None or c in scope]

    def other_embedder_documents(self, scope: list[str] | None = None) -> list[dict]:
        """The complete documents searches leave out because another embedder than this retriever's
        made their vectors (entries of ``ingest.list_documents``), those in ``scope`` when given;
        ``ingest.reembed_document`` makes them searchable again."""
        with self._lock:
            self._refresh_if_stale()
            return [d for d in self._other_embedder if scope is None or d["collection"] in scope]

    def _check_scope(self, scope: list[str] | None) -> None:
        """A scope of documents none of which can be searched, because another embedder made them,
        is an error that says so (an empty result would say nothing); with some searchable, those are searched."""
        if scope is None or any(c in self._collections for c in scope):
            return
        others = [d for d in self._other_embedder if d["collection"] in scope]
        if others:
            raise ingest.EmbedderMismatchError(ingest.other_embedder_message(others, self._embedder_name))

    # -- the legs -------------------------------------------------------------

    def semantic(self, question: str | ParsedQuestion, scope: list[str] | None = None, n: int | None = None) -> list[tuple[PageKey, float, str]]:
        """(page, cosine similarity of its best chunk, that chunk's id), best first, over in-scope documents.

        Exact cosine over the stored vectors held in memory (they are unit length,
        so a dot product): one matrix-vector product instead of one ChromaDB query
        per document, which measured 580 ms at 100k chunks in 200 documents.
        """
        self._refresh_if_stale()
        if not self._ids:
            return []
        n = n or config.CANDIDATES
        similarity = self._similarity(as_read(question))
        if scope is not None:
            similarity[~self._scope_mask(self._row_owner, scope)] = -np.inf
        best = _top_indices(similarity, n)
        pages: dict[PageKey, tuple[PageKey, float, str]] = {}
        for i in best:
            if similarity[i] == -np.inf:  # out of scope: fewer than n chunks were in scope
                break
            chunk_id = self._ids[i]
            _, meta, owner = self._chunks[chunk_id]
            pages.setdefault((owner, meta["page"]), ((owner, meta["page"]), float(similarity[i]), chunk_id))
        return list(pages.values())

    def _model(self, embedder: str):
        """The embedder named ``embedder``: this retriever's own, or the multilingual one (the only other
        a searchable document can have been made with: see ``ingest.made_with_other_embedder``)."""
        return self.embedder if embedder == self._embedder_name else embedders.get_multilingual_embeddings()

    def _embed_query(self, embedder: str, text: str) -> np.ndarray:
        """``text`` embedded by the embedder named ``embedder``, remembered: follow-ups and evals repeat queries."""
        if embedder not in self._query_embedders:
            self._query_embedders[embedder] = lru_cache(maxsize=1024)(self._model(embedder).embed_query)
        return np.asarray(self._query_embedders[embedder](text), dtype=np.float32)

    def _similarity(self, question: ParsedQuestion) -> np.ndarray:
        """Cosine of the question with every chunk, each embedder's chunks with the question as that
        embedder reads it; a question naming a year is embedded once per way the library's documents
        write years (domains.wording_of), and each chunk is compared with its document's wording."""
        similarity = np.empty(len(self._ids), dtype=np.float32)
        query = question.query
        for embedder, (rows, vectors) in self._vector_groups.items():
            if not question.years:
                similarity[rows] = vectors @ self._embed_query(embedder, query)
                continue
            wordings = self._row_wording[rows]
            for code, wording in enumerate(self._wordings):
                if (wordings == code).any():
                    similarity[rows[wordings == code]] = vectors[wordings == code] @ self._embed_query(embedder, domains.in_wording(query, wording))
        return similarity

    def similarities(self, question: str, texts: list[str], collections: list[str]) -> np.ndarray:
        """Cosine of ``question`` with each of ``texts`` (evidence lines, evidence.py), each read by
        the embedder of the document it comes from (``collections``, one per text).

        Vectors of texts seen before are reused: people ask several questions of the same pages,
        and embedding a page's lines is most of the time evidence takes.
        """
        keys = [(self._embedder_of.get(c, self._embedder_name), t) for c, t in zip(collections, texts)]
        for embedder in dict.fromkeys(name for name, _ in keys):
            missing = list(dict.fromkeys(t for name, t in keys if name == embedder and (name, t) not in self._line_vectors))
            if missing:
                for text, vector in zip(missing, self._model(embedder).embed_documents(missing)):
                    self._line_vectors[embedder, text] = np.asarray(vector, dtype=np.float32)
        if not texts:
            return np.zeros(0, dtype=np.float32)
        similarity = np.array([float(self._line_vectors[key] @ self._embed_query(key[0], question)) for key in keys], dtype=np.float32)
        while len(self._line_vectors) > config.EVIDENCE_CACHE_LINES:  # oldest first out
            del self._line_vectors[next(iter(self._line_vectors))]
        return similarity

    def words_on_most_pages(self, collection: str, words: list[str], share: float) -> set[str]:
        """Those of ``words`` (keyword tokens) printed on more than ``share`` of the document's pages:
        a company's own name in its 10-K tells no page, and no line, apart from another."""
        with self._lock:
            self._refresh_if_stale()
            if collection not in self._owner_code:
                return set()
            columns = np.flatnonzero(self._page_owner == self._owner_code[collection])
            rows = self._bm25.term_ids(sorted(set(words)))
            known = list(rows)
            if not known or not len(columns):
                return set()
            # a stored entry is a page holding the word (its BM25 weight may be zero or negative: count entries, not weights)
            held = self._bm25.matrix[list(rows.values())][:, columns].getnnz(axis=1)
            return {word for word, pages in zip(known, np.asarray(held).ravel()) if pages > share * len(columns)}

    def keyword(self, question: str | ParsedQuestion, scope: list[str] | None = None, n: int | None = None) -> list[tuple[PageKey, float]]:
        """(page, BM25 score) best first, only pages that share a term with the question."""
        self._refresh_if_stale()
        n = n or config.CANDIDATES
        words = self.query_tokens(question, scope)
        own_names = self.own_names_everywhere(words, scope) | self.file_names_everywhere(question, scope)
        scores = self._bm25.get_scores([word for word in words if word not in own_names])
        if scope is not None:
            scores[~self._scope_mask(self._page_owner, scope)] = 0.0
        return [(self._pages[i], float(scores[i])) for i in _top_indices(scores, n) if scores[i] > 0]

    rules.register("own_name_no_keyword", "a document's own name tells none of its pages apart",
                   "tests/test_retriever.py::test_a_documents_own_name_is_no_keyword_within_it_but_still_tells_documents_apart",
                   pays_on='docs/experiments/2026-11-26-a-fresh-set-of-analyst-questions.md: second fresh set (held out), hit@5 doc 0.826 -> 0.870, library 0.761 -> 0.804 (4 won / 0 lost); mmlongbench held-out half unchanged')

    def own_names_everywhere(self, words: list[str], scope: list[str] | None) -> set[str]:
        """Rule: a document's own name tells none of its pages apart.
        Those of ``words`` that are names in the profile of every searched document (``routing.py``:
        "coca", "cola") and printed on most of its pages (its running heads). Kept as keywords, the
        name makes an exhibit index that repeats it forty times outrank the page that answers; across
        documents that do not all carry it, it still tells them apart and stays."""
        if not rules.on("own_name_no_keyword"):
            return set()
        self._refresh_if_stale()
        searched = self._in_scope(scope)
        candidates = set(words) if searched else set()
        for collection in searched:
            profile = self._profiles.get(collection)
            names = profile.names | profile.acronyms if profile else set()
            candidates = {word for word in candidates if word.lstrip("^") in names}  # "^mgm": MGM written in capitals
            if candidates:
                candidates &= self.words_on_most_pages(collection, sorted(candidates), config.EVIDENCE_COMMON_SHARE)
            if not candidates:
                break
        return candidates

    def file_names_everywhere(self, question: str | ParsedQuestion, scope: list[str] | None) -> set[str]:
        """Rule: a document's own name, as its file name gives it, tells none of its pages apart.
        The words the question writes as the file name of every searched document names it (file_names_asked),
        wherever they are printed: "General Mills'" would find the auditor's consent that repeats "General Mills, Inc."."""
        names: set[str] | None = None  # the words named so far by every searched document's file
        for collection in self._in_scope(scope) if rules.on("file_name_no_keyword") else []:
            asked = self.file_names_asked(collection, question)
            names = asked if names is None else names & asked
            if not names:
                break  # one document's file names none of them: the question names no file of them all
        return names or set()

    rules.register("file_name_no_keyword", "a document's own name, as its file name gives it, tells none of its pages apart",
                   "tests/test_retriever.py::test_rule_the_name_a_file_gives_its_document_is_no_keyword_within_it",
                   pays_on="docs/experiments/2026-11-29-the-name-a-file-gives.md: states@1 fresh3 (held out) 17 -> 18 of 30, a cell 2 -> 3; "
                           "states@3 FinanceBench 36 -> 37 of 65, fresh4 6 -> 7 of 22; nothing lost at @3, page hit@5 unchanged")

    def query_tokens(self, question: str | ParsedQuestion, scope: list[str] | None = None) -> list[str]:
        """The question's keyword tokens as each language of the in-scope documents writes its pages
        (a German page's words are stemmed German words): English's, then each other language's new ones;
        a ``ParsedQuestion`` is tokenised once per language, however often it is searched."""
        question = as_read(question)
        tokens = list(question.keywords())
        for language in sorted({self._languages[c] for c in self._in_scope(scope)} - {"en"}):
            tokens += [t for t in dict.fromkeys(question.keywords(language)) if t not in tokens]
        return tokens

    def _scope_mask(self, owner_codes: np.ndarray, scope: list[str]) -> np.ndarray:
        """Which rows belong to the documents in ``scope`` (owners stored as small ints)."""
        codes = [self._owner_code[c] for c in scope if c in self._owner_code]
        return np.isin(owner_codes, codes)

    def named_pages(self, question: str, scope: list[str] | None, semantic: list[tuple[PageKey, float, str]]) -> list[PageKey]:
        """Pages the question names ("page 14", "cover page") in each in-scope document, best semantic match first."""
        self._refresh_if_stale()
        sem_rank = {key: rank for rank, (key, _, _) in enumerate(semantic)}
        named = [
            (name, page)
            for name in self._in_scope(scope)
            for page in page_references(question, self._collections[name].metadata["pages"])
            if (name, page) in self._page_chunks
        ]
        return sorted(named, key=lambda key: sem_rank.get(key, len(sem_rank)))

    def hinted_pages(self, hints: list[str], scope: list[str] | None, semantic: list[tuple[PageKey, float, str]]) -> list[PageKey]:
        """Pages a domain marked with one of the question's ``hints`` (ParsedQuestion.hints), best semantic match first."""
        in_scope = set(self._in_scope(scope))
        sem_rank = {key: rank for rank, (key, _, _) in enumerate(semantic)}
        pages = [key for key, marks in self._page_marks.items() if key[0] in in_scope and set(marks) & set(hints)]
        return sorted(pages, key=lambda key: (sem_rank.get(key, len(sem_rank)), key))[: config.CANDIDATES]

    def hint_seats(self, hints: list[str], hinted: list[PageKey], fused: dict[PageKey, float], top: list[PageKey]) -> list[PageKey]:
        """For each of the question's ``hints``, its best-fused marked page in a document already among the
        ``top`` results: a question pointing at a kind of page needs it in the top k, however its words
        score, but only in documents the search already found."""
        documents = {collection for collection, _ in top}
        seats = []
        for hint in hints:
            pages = [key for key in hinted if key[0] in documents and hint in self._page_marks.get(key, [])]
            if pages:
                seats.append(max(pages, key=lambda key: fused.get(key, 0.0)))
        return seats

    def named_documents(self, query: str, scope: list[str] | None) -> dict[str, float]:
        """{collection: routing score} of the in-scope documents the question names (see routing.py)."""
        profiles = {name: self._profiles[name] for name in self._in_scope(scope)}
        return route(names_in_question(query, STOPWORDS), acronyms_asked(query), years_named(query), profiles, self._route_weights)

    def _index_acronyms(self) -> None:
        """Which pages carry a name with given initials and which write them as an acronym."""
        self._named_pages: dict[str, list[tuple[PageKey, str]]] = {}
        self._written_pages: dict[str, list[PageKey]] = {}
        self._name_uses: Counter = Counter()
        for (name, *_), part in self._loaded.items():
            for page, pairs in part["page_names"].items():
                for letters, full in pairs:
                    self._named_pages.setdefault(letters, []).append(((name, page), full))
                    self._name_uses[letters, full] += 1
            for page, written in part["page_written"].items():
                for letters in written:
                    self._written_pages.setdefault(letters, []).append((name, page))
        self._page_column = {key: column for column, key in enumerate(self._pages)}

    def _shared_weight(self, words: list[str]) -> np.ndarray:
        """Per page (a column of the keyword index): the idf summed over the distinct ``words`` it holds."""
        ids = sorted(set(self._bm25.term_ids(words).values()))
        if not ids:
            return np.zeros(len(self._pages))
        held = (self._bm25.matrix[ids] > 0).astype(np.float64)
        return np.asarray(held.T @ self._bm25.idf[ids]).ravel()

    def spelled_out(self, query: str, scope: list[str] | None = None) -> str:
        """``query`` with each acronym followed by the name it abbreviates on the in-scope page
        that shares most of the question's words (by idf), unless a page writing the acronym
        itself shares as much (routing.expansion_here)."""
        self._refresh_if_stale()
        in_scope = set(self._in_scope(scope))
        expansions = {}
        for letters in acronyms_asked(query):
            shared = self._shared_weight([word for word in tokenize(query) if word != letters])
            named = [(full, shared[self._page_column[key]], self._name_uses[letters, full])
                     for key, full in self._named_pages.get(letters, []) if key[0] in in_scope]
            written = [shared[self._page_column[key]] for key in self._written_pages.get(letters, []) if key[0] in in_scope]
            expansions[letters] = expansion_here(named, written)
        return expand_acronyms(query, {letters: full for letters, full in expansions.items() if full})

    def language(self, collection: str) -> str:
        """The language a document's pages are written in ("en" when unknown), as ingest detected it."""
        self._refresh_if_stale()
        return self._languages.get(collection, "en")

    # registered only: the weight is a measured setting, not on or off (eval_retrieval.py sets it with Steps(keyword_weight=))
    rules.register("keyword_weight_by_embedder", "a leg's vote on a document's pages is what it was measured to be worth there",
                   "tests/test_retriever.py::test_a_keyword_match_votes_by_the_weight_of_its_document_s_embedder", switchable=False,
                   pays_on='docs/experiments/2026-11-27-embedders-in-every-language.md: multilingual bench, documents not in English, held-out hit@5 0.663 -> 0.732 (MiniLM) with no keyword vote; English keeps its equal vote')

    def keyword_weight(self, collection: str) -> float:
        """Rule: a leg's vote on a document's pages is what it was measured to be worth there. The keyword
        leg's vote, against 1 for the meaning leg's: KEYWORD_WEIGHT for documents the main embedder made,
        MULTILINGUAL_KEYWORD_WEIGHT for those the multilingual one made (config says what each was measured on)."""
        self._refresh_if_stale()
        if self._embedder_of.get(collection, self._embedder_name) == self._embedder_name:
            return config.KEYWORD_WEIGHT
        return config.MULTILINGUAL_KEYWORD_WEIGHT

    def page_titles(self, collection: str) -> dict[int, str]:
        """{page: the label (title) the app gave it} for a document's labelled pages."""
        with self._lock:
            self._refresh_if_stale()
            return {page: self._chunks[ids[0]][1].get("title", "") for (name, page), ids in self._page_chunks.items()
                    if name == collection and self._chunks[ids[0]][1].get("title")}

    def profile(self, collection: str) -> DocumentProfile:
        """The document's profile (title, names, years, type) as routing sees it."""
        self._refresh_if_stale()
        return self._profiles[collection]

    # -- fusion ---------------------------------------------------------------

    def search(self, question: str | ParsedQuestion, k: int | None = None, scope: list[str] | None = None,
               steps: Steps = PRODUCT) -> list[Hit]:
        """The ``k`` best pages for ``question``, each as its best passage, with traces.

        ``question`` is the text or, read once by the caller, its ``ParsedQuestion``. ``steps`` says
        which optional steps run (``Steps``; the product runs them all).

        Documents made with another embedder are left out (``other_embedder_documents``); a ``scope``
        naming only such documents raises ``ingest.EmbedderMismatchError`` saying so.
        """
        k = k or config.TOP_K
        parsed = question if isinstance(question, ParsedQuestion) else parse_question(question) if steps.question_parsing else None
        query = parsed.query if parsed and steps.question_parsing else parsed.text if parsed else question
        hints = parsed.hints if parsed and steps.question_parsing and steps.domain_hints else []
        mode = steps.mode
        with self._lock:  # browser tabs share one retriever
            self._refresh_if_stale()
            self._check_scope(scope)
            query = self.spelled_out(query, scope) if steps.acronyms else query
            searched = parsed.searching(query) if parsed and steps.question_parsing else query  # read once, however often searched
            semantic = self.semantic(searched, scope) if mode != "bm25" or steps.page_refs or hints else []
            keyword = self.keyword(searched, scope) if mode != "semantic" else []
            named = self.named_pages(query, scope, semantic) if steps.page_refs else []
            hinted = self.hinted_pages(hints, scope, semantic) if hints else []
            if mode == "bm25":
                semantic = []
            legs = {"semantic": [(key, sim) for key, sim, _ in semantic], "bm25": keyword,
                    "page_ref": ranked(named), "hint": ranked(hinted)}
            by_document = lambda key: self.keyword_weight(key[0])  # noqa: E731
            fused = fuse(legs, {"bm25": by_document if steps.keyword_weight is None else steps.keyword_weight})
            trace: dict[PageKey, dict] = {key: {"fused": score} for key, score in fused.items()}
            for leg, ranking in legs.items():
                for rank, (key, score) in enumerate(ranking, 1):
                    trace[key][f"{leg}_rank"] = rank
                    if leg in ("semantic", "bm25"):
                        trace[key][f"{leg}_score"] = round(score, 4)
            named_docs = self.named_documents(query, scope) if steps.routing and mode == "hybrid" else {}
            top = by_fusion = sorted(fused, key=lambda key: -fused[key])[:k]
            if mode == "hybrid":
                seats = [legs["bm25"][:1]] * steps.keyword_seat + [legs["semantic"][:1]] * (steps.fusion == "seats")
                seated = [leg_best[0][0] for leg_best in seats if leg_best]
                hint_seats = self.hint_seats(hints, hinted, fused, by_fusion)
                top = with_seats(by_fusion, seated + hint_seats)
                for key in set(top) - set(by_fusion):
                    trace[key]["seat"] = True
                # the page a hint points at is where the answer is printed: it leads
                top = [key for key in hint_seats if key in top] + [key for key in top if key not in hint_seats]
            best_chunk = {key: chunk_id for key, _, chunk_id in semantic}
            hits = [self._hit(best_chunk.get(key) or self._best_keyword_chunk(key, query), fused[key], trace[key]) for key in top]
            if named_docs and len(named_docs) < len(self._in_scope(scope)) and rules.on("named_documents_answered_first"):
                hits = self._named_first(named_docs, hits, k, lambda named: self.search(
                    parsed or question, k, named, replace(steps, routing=False)))
            return hits

    rules.register("named_documents_answered_first",
                   "a question that names documents is answered from them first; the library's best fill what is left",
                   "tests/test_retriever.py::test_a_question_naming_a_document_is_answered_from_it_first_and_the_library_fills_the_rest",
                   pays_on="docs/experiments/2026-11-26-a-fresh-set-of-analyst-questions.md: second fresh set (held out), 4 won / 0 lost (library hit@5 0.717 -> 0.804); it loses 2 on mmlongbench's held-out half")

    @staticmethod
    def _named_first(named_docs: dict[str, float], library_hits: list[Hit], k: int,
                     search_named: Callable[[list[str]], list[Hit]]) -> list[Hit]:
        """Rule: a question that names documents is answered from them first; the library's best fill what is left.
        "What were Best Buy's FY2019 inventories?" across 47 filings: Best Buy's FY2019 pages, whatever
        other filings' inventory pages score (routing.py says which documents a question names)."""
        first = search_named(list(named_docs))
        for hit in first:
            hit.trace["routed"] = round(named_docs[hit.collection], 2)
        shown = {(hit.collection, hit.page) for hit in first}
        return (first + [hit for hit in library_hits if (hit.collection, hit.page) not in shown])[:k]

    def load_pages(self, hits: list[Hit]) -> list[Page]:
        """Each hit's page, whole, in one visit: what the evidence lines, the model's context and a domain's
        worked-out answer read, so no step rebuilds a page from its chunks again."""
        with self._lock:
            self._refresh_if_stale()
            chunks = {(h.collection, h.page): [self._hit(i, 0.0, {}) for i in self._page_chunks.get((h.collection, h.page), [])]
                      for h in hits}
        pages = []
        for hit in hits:
            found = sorted(chunks[hit.collection, hit.page], key=lambda c: c.start) or [hit]
            pages.append(Page(hit, page_text(found), found))
        return pages

    def line_scores(self, query: str | ParsedQuestion, texts: list[str], collections: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Keyword and meaning scores of candidate lines (``texts``, of documents ``collections``) for ``query``.

        Keyword: BM25 over these lines for the query's words, leaving out, for each document, the words
        printed on most of its pages (its own name, say), which tell no line apart. Meaning: the cosine
        of query and line (``similarities``), read only for the lines that hold a word asked (``meaning_read``).
        """
        words = self.query_tokens(query, sorted(set(collections)))
        index = SparseBM25([keyword_tokens(t, self.language(c)) for c, t in zip(collections, texts)])
        keyword = np.zeros(len(texts))
        for collection in set(collections):
            common = self.words_on_most_pages(collection, words, config.EVIDENCE_COMMON_SHARE) | self.own_names_asked(collection, query)
            rows = np.array([c == collection for c in collections])
            keyword[rows] = index.get_scores([w for w in words if w not in common])[rows]
        read = meaning_read(keyword)
        meaning = np.full(len(texts), -1.0, dtype=np.float32)  # a line not read ranks last by meaning
        meaning[read] = self.similarities(as_read(query).query, [texts[i] for i in read], [collections[i] for i in read])
        return keyword, meaning

    rules.register("own_name_tells_no_line", "a name the question gives the document itself tells none of its lines apart",
                   "tests/test_evidence.py::test_rule_a_line_that_only_names_the_company_takes_no_place_from_the_line_that_answers",
                   pays_on="docs/experiments/2026-11-28-the-line-that-answers-first.md: states@1 FinanceBench 29 -> 31 of 63 (fitted), fresh3 16 -> 17 of 30, fresh4 3 -> 4 of 18 (held out)")

    def own_names_asked(self, collection: str, query: str | ParsedQuestion) -> set[str]:
        """Rule: a name the question gives the document itself tells none of its lines apart.
        The words the question writes as names ("Harbor Lane Outfitters'") that the document's profile names
        (routing.py: capitalised on its first pages, or in its file name): "Harbor Lane Outfitters, Inc." on the
        release's first page shares them all with the question and answers nothing."""
        profile = self._profiles.get(collection)
        if profile is None or not rules.on("own_name_tells_no_line"):
            return set()
        runs = name_runs_in_question(as_read(query).query)
        names = ({word.lower() for run in runs for word in run} & profile.names) | self.file_names_asked(collection, query)
        # and the initials of a name all of whose words are its own, which keyword tokens carry ("^hlo")
        return names | {token for run in runs if all(word.lower() in names for word in run) for token in acronym_tokens(" ".join(run))}

    def file_names_asked(self, collection: str, query: str | ParsedQuestion) -> set[str]:
        """The words of the name the question gives the document as its file name does (routing.file_named_runs):
        "General Mills'" for GENERALMILLS_2020_10K.pdf, though "general" is printed in lower case inside it."""
        self._refresh_if_stale()
        profile = self._profiles.get(collection)
        return {word.lower() for run in file_named_runs(as_read(query).query, profile.file_words) for word in run} if profile else set()

    def page_passages(self, collection: str, page: int) -> list[Hit]:
        """Every stored chunk of one page, in reading order (``context.py`` picks what the model reads)."""
        with self._lock:
            self._refresh_if_stale()
            hits = [self._hit(chunk_id, 0.0, {}) for chunk_id in self._page_chunks.get((collection, page), [])]
        return sorted(hits, key=lambda h: h.start)

    def _best_keyword_chunk(self, key: PageKey, question: str) -> str:
        """The chunk of a page that shares the most question terms (for pages found by keywords only)."""
        terms = set(tokenize(question))
        return max(self._page_chunks[key], key=lambda i: len(terms & set(tokenize(self._chunks[i][0]))))

    def _hit(self, chunk_id: str, score: float, trace: dict) -> Hit:
        text, meta, owner = self._chunks[chunk_id]
        return Hit(
            id=chunk_id,
            collection=owner,
            doc_name=meta["doc_name"],
            page=meta["page"],
            start=meta["start"],
            end=meta["end"],
            text=text,
            title=meta.get("title", ""),
            keywords=meta.get("keywords", ""),
            ocr_boxes=meta.get("ocr_boxes", ""),
            score=score,
            trace=trace,
        )
