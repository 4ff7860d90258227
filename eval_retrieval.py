"""Score retrieval against questions whose answer pages are known.

    python eval_retrieval.py [--questions FILE] [--pdf-dir DIR] [--scope doc|library|type|both|all]
                             [--k 5] [--json OUT] [--report OUT.md] [--store DIR] [--stored-only] [--limit N]
                             [--perturb] [--split all|fit|held-out] [--seed 18]
                             [--chunk-size CHARS --chunk-overlap CHARS] [--extractor NAME] [--rules-off NAME,NAME]

Data flow: questions (JSON list or JSONL: question, doc, pages 1-based, optional
category, answer, evidence quotes) -> ingest each needed PDF once into an evaluation
store (cached by content hash) -> for every ablation (semantic only, BM25 only,
hybrid) and scope (the question's own document, or the library: every document of the question file) run the
retriever -> page-level metrics, and for hybrid the evidence lines and evidence@3 ->
a table on screen, a Markdown report and a JSON file.

A retrieved page counts when it is in the question's document and among its
gold pages. Questions with ``pages: []`` are not answerable from the document:
they are left out of hit/recall/precision/MRR and reported separately (the top
semantic similarity they get is what a refusal threshold must beat).

Metrics at k: hit@k (a gold page is in the top k), recall@k (share of gold pages
found), precision@k (share of the k pages that are gold), MRR (1 / rank of the
first gold page, 0 if none in the top k).

evidence@3 (hybrid only, per scope): ``evidence.best_lines(n=3, more=7)`` on the hybrid hits ->
the three lines the app shows -> the share of answerable questions with a gold
evidence line among them; evidence@8 the same over the first eight of the lines the model
reads. Only lines in the question's own document count, and a line counts (the "overlap"
judge) by one of two rules:
  - the question carries evidence quotes (FinanceBench's ``evidence``: [{"page", "text"}]):
    the line as its page prints it (``evidence.span_text``), cut into lower-cased ``\\w+``
    words, has at least half of its word 6-grams in one of the quotes, or (6 words or more) all
    its letters and digits in one quote, contiguous, spaces ignored (6 FinanceBench quotes lost
    their spaces: "Costofsales"); a line of fewer than 6 words, its whole word sequence in one
    quote, contiguous (``line_in_quotes``);
  - no quotes (MMLongBench, input_data): the gold answer string, lower-cased with
    whitespace collapsed, is in the line's as-read text or its printed text, as a whole
    word or figure (not inside a longer one: a gold "12" is not in "1250"), within one
    line (``answer_in_texts``). Such a question is counted only when its answer is
    printed on a gold page by the same rule; how many qualify is reported.
The "states" judge (states@3, states@8) wants more: the line must also state something of
the answer, i.e. where the gold answer holds a figure, print one of the answer's or the
quotes' figures (``states_answer``): a label such as "Cash flows from operating activities:"
overlaps the quote without stating anything. Both judges are reported side by side, overall,
per category, per document type and per ``split`` (the fresh questions' held-out "fresh2").
Questions neither rule can judge are left out of the evidence figures (``evidence_n`` says how
many were counted). ``evaluation/eval_answers.py`` scores the lines shown with its answers by the
same functions.

Robustness (--perturb): each question is also asked reworded in seeded ways
(PERTURBATIONS: an instruction sentence about the answer's form appended or
prepended, company and product names abbreviated, years written FY2019 /
fiscal 2019 / 2019) and hit@k of each leg and of hybrid is reported per
wording beside the plain run. --split fit|held-out keeps rules honest: decide
on the seeded fit half, report the held-out half apart. --scope type searches
the library of the question's own document type (``doc_type``); per-type
figures are reported whenever questions carry one.

Chunking policies (``extract.chunk_page``'s size and overlap) are compared by
running once per policy with --chunk-size/--chunk-overlap: each policy gets its
own store beside the default one, since a PDF's collection name is its hash.
Page-text extractors (setting EXTRACTOR) are compared the same way with --extractor.
A registered rule (``rules.REGISTRY``) is measured by switching it off by name for the whole run
(--rules-off NAME[,NAME]: ``rules.off``), against the same command without it.
Either is an ``ingest.IngestProfile`` handed to the ingest (``ingest_profile``), and the store is the
client handed in: the settings themselves are never changed.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from tqdm import tqdm

import config
import embedders
import evidence
import ingest
import rules
from pages import page_text
from records import Hit
from retriever import PRODUCT, Retriever, Steps
from text_utils import LEGAL_SUFFIX, NAME_RUN, YEAR, tokenize

log = logging.getLogger(__name__)

# name -> the search's Steps; "hybrid" is the configuration the app uses (retriever.PRODUCT)
BEFORE_ISSUE_18 = {"question_parsing": False, "fusion": "rrf", "routing": False, "domain_hints": False, "acronyms": False}
ABLATIONS = {
    "semantic": Steps(mode="semantic", page_refs=False, domain_hints=False),
    "bm25": Steps(mode="bm25", page_refs=False, domain_hints=False),
    "hybrid-plain": Steps(page_refs=False, keyword_seat=False, **BEFORE_ISSUE_18),
    "hybrid-no-page-refs": Steps(page_refs=False, keyword_seat=True, **BEFORE_ISSUE_18),
    "hybrid-no-keyword-seat": Steps(page_refs=True, keyword_seat=False, **BEFORE_ISSUE_18),
    "hybrid-main": Steps(page_refs=True, keyword_seat=True, **BEFORE_ISSUE_18),  # before issue 18
    "hybrid-no-parsing": Steps(question_parsing=False),
    "hybrid-no-routing": Steps(routing=False),
    "hybrid-no-acronyms": Steps(acronyms=False),
    "hybrid-no-statement-hints": Steps(domain_hints=False),
    "hybrid-no-page-refs-now": Steps(page_refs=False),
    "hybrid-no-keyword-seat-now": Steps(keyword_seat=False),
    "hybrid-rrf": Steps(fusion="rrf"),
    "hybrid-keyword-equal": Steps(keyword_weight=1.0),  # every document's keyword vote equal, as before 2026-11-27
    "hybrid-keyword-half": Steps(keyword_weight=0.5),
    "hybrid-keyword-quarter": Steps(keyword_weight=0.25),
    "hybrid-keyword-seat-only": Steps(keyword_weight=0.0),
    "hybrid-no-keyword": Steps(keyword_weight=0.0, keyword_seat=False),
    "hybrid": PRODUCT,
}
PERTURB_ABLATIONS = ("semantic", "bm25", "hybrid-main", "hybrid")
DEFAULT_QUESTIONS = Path(config.INPUT_DATA_DIR) / "eval_questions.json"
EXTRACTORS = ["text", "layout"]  # values of the EXTRACTOR setting
DEFAULT_STORE = config.BASE_DIR / "chroma_store_eval"
EVIDENCE_FIRST = 1  # evidence@1: the first line shown is a gold evidence line
EVIDENCE_AT = 3  # evidence@3: a gold evidence line among the first three lines shown
EVIDENCE_READ = 8  # evidence@8: among the first eight of the lines the model reads (best_lines(n=3, more=7))
EVIDENCE_CUTS = (EVIDENCE_FIRST, EVIDENCE_AT, EVIDENCE_READ)
JUDGES = ("overlap", "states")  # the line overlaps the gold; the line also states a figure of it (``states_answer``)
NGRAM = 6  # words per n-gram when a line is matched against an evidence quote


def load_questions(path: Path) -> list[dict]:
    """Questions from a JSON list (or {"questions": [...]}) or a JSONL file, normalised.

    Each gets ``category``: its own, else its languages ("de question, de document": the multilingual
    bench), else its first evidence source (MMLongBench), else "uncategorised".
    """
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
        rows = data["questions"] if isinstance(data, dict) else data
    except json.JSONDecodeError:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    for row in rows:
        sources = row.get("evidence_sources") or []
        languages = f"{row['lang']} question, {row['doc_lang']} document" if row.get("lang") and row.get("doc_lang") else None
        row["category"] = row.get("category") or languages or (sources[0] if sources else "uncategorised")
        row["pages"] = [int(p) for p in row.get("pages", [])]
    return rows


def ingest_profile(extractor: str | None = None, chunk_size: int | None = None,
                   chunk_overlap: int | None = None) -> ingest.IngestProfile:
    """The ingest the flags ask for: each one not given (None; a chunk size of 0) keeps the setting."""
    return ingest.IngestProfile(extractor=extractor or config.EXTRACTOR, chunk_size=chunk_size or config.CHUNK_SIZE,
                                chunk_overlap=config.CHUNK_OVERLAP if chunk_overlap is None else chunk_overlap)


def extractor_store(name: str | None, store: Path) -> Path:
    """Extractor ``name``'s own evaluation store beside ``store`` (``store`` itself when no extractor is named)."""
    return store.with_name(f"{store.name}-extract-{name}") if name else store


def default_pdf_dir(questions_path: Path) -> Path:
    """``pdfs/`` beside the questions file."""
    return Path(questions_path).resolve().parent / "pdfs"


def ingest_needed(questions: list[dict], pdf_dir: Path, client, embedder,
                  profile: ingest.IngestProfile | None = None) -> dict[str, str]:
    """Ingest every PDF the questions name (cached by hash) into ``client``'s store, read and chunked as
    ``profile`` says (default: the settings); {doc file name: collection}."""
    collections = {}
    for doc in tqdm(sorted({q["doc"] for q in questions}), desc="ingest", unit="pdf"):
        result = ingest.ingest_pdf(pdf_dir / doc, client, embedder, doc_name=doc, profile=profile)
        collections[doc] = result.collection
    return collections


# -----------------------------------------------------------------------------
# Perturbations: the same question in the wordings real users add (--perturb).
# The rules come from issue 18's description of analysts' questions on financial
# filings (instructions about the answer's form around the question, abbreviated
# company names, fiscal-year wording), not from which bench questions fail.

INSTRUCTIONS_AFTER = [
    "Give a response to the question by relying on the details shown in the {statement}.",
    "Please state answer in USD millions.",
    "If this is not a useful metric for a company like this, then please state that and explain why.",
    "Round your answer to two decimal places.",
    "Answer in one sentence and show your calculation.",
    "Base your answer only on the {statement}.",
]
INSTRUCTIONS_BEFORE = [
    "Answer the following question as if you are an equity research analyst.",
    "You are a financial analyst reviewing this document.",
    "Using the details shown in the {statement}, answer the question.",
    "Please answer concisely and state any assumptions you make.",
]
STATEMENTS = ["cash flow statement", "income statement", "balance sheet", "statement of financial position"]
PERTURBATIONS = ("instruction-after", "instruction-before", "abbreviated-names", "year-wording")

_YEAR = re.compile(rf"\b(?:FY\s?|fiscal(?:\s+year)?\s+)?({YEAR})\b", re.IGNORECASE)


def abbreviate_names(question: str, rng: random.Random) -> str:
    """Legal suffixes dropped; a run of capitalised words becomes its initials or its first word.

    (A name is what routing.py calls one, so routing's acronyms meet this rule by construction: real
    abbreviations such as stock tickers are not covered.)

    abbreviate_names("What did Costco Wholesale Corporation report?", rng) -> "What did CW report?" (or "... Costco report?")
    """
    text = LEGAL_SUFFIX.sub("", question)

    def shorten(match: re.Match) -> str:
        words = [w for w in match.group(0).split() if w[0].isupper()]
        if match.start() == 0:  # the question's first word is capitalised anyway
            return match.group(0) if len(words) < 3 else words[0] + " " + shorten_words(words[1:])
        return shorten_words(words)

    def shorten_words(words: list[str]) -> str:
        return "".join(w[0] for w in words).upper() if rng.random() < 0.5 else words[0]

    return NAME_RUN.sub(shorten, text)


def reword_years(question: str, rng: random.Random) -> str:
    """Each year in another of the wordings "FY2019", "fiscal 2019", "2019".

    reword_years("Revenue in 2019?", rng) -> "Revenue in FY2019?" (or "... fiscal 2019?")
    """
    def reword(match: re.Match) -> str:
        year, current = match.group(1), match.group(0)
        forms = [form for form in (f"FY{year}", f"fiscal {year}", year) if form.lower() != current.lower()]
        return rng.choice(forms)

    return _YEAR.sub(reword, question)


def perturb(question: str, kind: str, rng: random.Random) -> str:
    """``question`` rewritten one way (a name from PERTURBATIONS); unchanged when the rule finds nothing to change."""
    statement = rng.choice(STATEMENTS)
    if kind == "instruction-after":
        return f"{question.strip()} {rng.choice(INSTRUCTIONS_AFTER).format(statement=statement)}"
    if kind == "instruction-before":
        return f"{rng.choice(INSTRUCTIONS_BEFORE).format(statement=statement)} {question.strip()}"
    if kind == "abbreviated-names":
        return abbreviate_names(question, rng)
    if kind == "year-wording":
        return reword_years(question, rng)
    raise ValueError(f"unknown perturbation {kind!r}; choose from {', '.join(PERTURBATIONS)}")


def perturbed_questions(questions: list[dict], kind: str, seed: int) -> list[dict]:
    """Copies of ``questions`` rewritten by ``kind``, each with its own seeded generator (stable per question)."""
    out = []
    for q in questions:
        rng = random.Random(f"{seed}:{kind}:{q['question']}")
        out.append({**q, "question": perturb(q["question"], kind, rng), "plain_question": q["question"]})
    return out


def split_questions(questions: list[dict], part: str, seed: int) -> list[dict]:
    """A seeded half of the questions: "fit" (rules were decided on it), "held-out" (the other half) or "all"."""
    if part == "all":
        return questions
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    fit = set(order[: len(order) // 2])
    return [q for i, q in enumerate(questions) if (i in fit) == (part == "fit")]


# -----------------------------------------------------------------------------
# Metrics


def page_metrics(retrieved: list[tuple[str, int]], gold: set[tuple[str, int]], k: int) -> dict:
    """Page-level metrics for one question.

    page_metrics([("a", 3), ("a", 7)], {("a", 7), ("a", 8)}, k=5)
      -> {"hit": 1, "recall": 0.5, "precision": 0.2, "rr": 0.5}
    """
    top = retrieved[:k]
    ranks = [i for i, page in enumerate(top, 1) if page in gold]
    return {
        "hit": 1 if ranks else 0,
        "recall": len(set(top) & gold) / len(gold),
        "precision": len(ranks) / k,
        "rr": 1 / ranks[0] if ranks else 0.0,
    }


def summarise(rows: list[dict], k: int) -> dict:
    """Mean page metrics; and evidence@3 over the rows that judged the evidence (hybrid rows carry "evidence":
    1, 0, or None when the question cannot be judged), with ``evidence_n`` the questions counted."""
    n = len(rows)
    mean = lambda key: round(sum(r[key] for r in rows) / n, 3) if n else 0.0  # noqa: E731
    out = {f"hit@{k}": mean("hit"), f"recall@{k}": mean("recall"), f"precision@{k}": mean("precision"), "mrr": mean("rr"), "n": n}
    if any("evidence" in r for r in rows):
        for key in evidence_keys():
            judged = [r[key] for r in rows if r.get(key) is not None]
            out[key] = round(sum(judged) / len(judged), 3) if judged else None
        out["evidence_n"] = sum(r.get("evidence") is not None for r in rows)
    return out


def evidence_key(judge: str, at: int) -> str:
    """The name of a figure: "evidence@3" (the overlap judge, the figure reported since issue 40), "states@8"."""
    return f"{'evidence' if judge == 'overlap' else judge}@{at}"


def evidence_keys() -> list[str]:
    """Every evidence figure a hybrid row carries: each judge at 1 (the first line), 3 (shown) and 8 (read)."""
    return [evidence_key(judge, at) for judge in JUDGES for at in EVIDENCE_CUTS]


def words(text: str) -> list[str]:
    """words("Purchases of PP&E (1,577)") -> ["purchases", "of", "pp", "e", "1", "577"]"""
    return re.findall(r"\w+", text.lower())


def line_in_quotes(line: str, quotes: list[str]) -> bool:
    """Is ``line`` (as its page prints it) in one of the evidence ``quotes``: at least half of its word
    6-grams occur in one quote; a line of fewer than 6 words, its whole word sequence occurs in one, contiguous;
    or a whole quote of more than 6 words occurs in the line, contiguous.

    line_in_quotes("Net income was 5,363 in 2018.", ["Net income was 5,363 in 2018, up 10%"]) -> True
    line_in_quotes("Total 5,363", ["Net income 5,363"]) -> False (short: "total 5 363" is not in the quote)
    line_in_quotes("Cost of sales 9,019 7,772", ["Netsales 14,082\nCostofsales\n9,019 \n7,772"]) -> True
    (a line of 6 words or more whose letters and digits all occur, in order and contiguous, in a quote
    whose spaces were lost when the benchmark extracted it: 6 of FinanceBench's 88 questions)
    line_in_quotes("As of 2022, we had 76.7 million cards-in-force worldwide.", ["we had 76.7 million cards-in-force worldwide"]) -> True
    (a whole quote of more than 6 words, in order and contiguous, in a longer line: a quote cut from the
    sentence that states it, as the fresh sets' quotes are)
    """
    tokens = words(line)
    if not tokens:
        return False
    grams = [tuple(tokens[i : i + NGRAM]) for i in range(len(tokens) - NGRAM + 1)]
    for quote in quotes:
        if grams and "".join(tokens) in "".join(words(quote)):
            return True  # the whole line, letters and digits in order: a quote extracted with its spaces lost
        quoted = words(quote)
        if len(quoted) > NGRAM and f" {' '.join(quoted)} " in f" {' '.join(tokens)} ":
            return True  # the whole quote, in a longer line: a quote cut from the sentence that states it
        if not grams:
            if f" {' '.join(tokens)} " in f" {' '.join(quoted)} ":
                return True
            continue
        quoted_grams = {tuple(quoted[i : i + NGRAM]) for i in range(len(quoted) - NGRAM + 1)}
        if 2 * sum(g in quoted_grams for g in grams) >= len(grams):
            return True
    return False


def answer_in_texts(answer: str, texts: list[str]) -> bool:
    """Is the gold ``answer`` printed in one of ``texts``: both lower-cased, whitespace collapsed, the answer a
    whole word or figure there (not inside a longer word or number).

    answer_in_texts("Less  well-off", ["They expect to be less\\nWell-off."]) -> True
    answer_in_texts("12", ["Revenue was 1250."]) -> False
    """
    wanted = " ".join(str(answer).lower().split())
    if not wanted:
        return False
    pattern = re.compile(rf"(?<![\w.]){re.escape(wanted)}(?!\w|\.\d)")
    return any(pattern.search(" ".join(text.lower().split())) for text in texts)


# a figure as printed: "7,802", "(1,670)", "$6,132", "37%", "8.70"; a bare year ("2022") is a period, no figure
_FIGURE = re.compile(r"(?<![\w.])\$?\(?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?\)?%?(?![\w])")


def figures(text: str) -> set[str]:
    """The figures ``text`` prints, normalised (no "$", "," or brackets; "150.0" -> "150"), years and single digits
    left out: a year names the period a label covers, and a lone digit is a footnote or a count as often as a figure.

    figures("Net cash 7,802 (1,670) in 2022; 37% of $150.0 billion") -> {"7802", "1670", "37", "150"}
    """
    out = set()
    for whole, decimals in _FIGURE.findall(text):
        digits = whole.replace(",", "")
        if "," not in whole and not decimals and (len(digits) < 2 or (len(digits) == 4 and 1900 <= int(digits) <= 2100)):
            continue
        value = f"{digits}{decimals}".rstrip("0").rstrip(".") if decimals else digits
        out.add(value)
    return out


def states_answer(printed: str, quotes: list[str], answer: str) -> bool:
    """A line is evidence only if it states something of the answer, not only the words that label it.

    ``printed`` (the line as its page prints it) must overlap a gold quote (``line_in_quotes``), or print the
    gold ``answer`` (``answer_in_texts``) when there are no quotes; and where the gold holds figures (its answer
    or quotes print one), the line must print one of them: "Cash flows from operating activities:" labels
    the figure without stating it.

    states_answer("Net cash provided by operating activities 7,802 9,221", [quote], "$7,802 million") -> True
    states_answer("Cash flows from operating activities:", [quote], "$7,802 million") -> False
    """
    if not (line_in_quotes(printed, quotes) if quotes else answer_in_texts(answer, [printed])):
        return False
    wanted = figures(answer) | {f for quote in quotes for f in figures(quote)} if figures(answer) else set()
    return not wanted or bool(figures(printed) & wanted)


def evidence_quotes(q: dict) -> list[str]:
    """The question's evidence quotes (FinanceBench), else []."""
    return [e["text"] for e in q.get("evidence") or [] if e.get("text")]


def gold_page_texts(q: dict, collection: str, retriever: Retriever) -> list[str]:
    """The whole stored text of the question's gold pages."""
    return [page_text(retriever.page_passages(collection, p)) for p in q["pages"]]


def evidence_countable(q: dict, gold_texts: list[str]) -> bool:
    """Can evidence@3 judge ``q``: it carries evidence quotes, or its gold answer is printed on a gold page
    (``gold_texts``, by ``answer_in_texts``)."""
    return bool(q["pages"]) and (bool(evidence_quotes(q)) or answer_in_texts(q.get("answer") or "", gold_texts))


def evidence_shown(q: dict, lines: list[Hit], collection: str, retriever: Retriever, at: int = EVIDENCE_AT,
                   judge: str = "overlap") -> bool:
    """Is a gold evidence line among the first ``at`` ``lines`` (only lines of the question's document,
    ``collection``, count). The "overlap" judge: by ``line_in_quotes`` when ``q`` carries quotes, else by
    ``answer_in_texts`` on each line's as-read and printed text. The "states" judge: by ``states_answer``
    (the overlap, and a figure of the gold where it has one). See the module docstring."""
    own = [line for line in lines[:at] if line.collection == collection]
    printed = [evidence.span_text(line, retriever) for line in own]
    quotes, answer = evidence_quotes(q), str(q.get("answer") or "")
    if judge == "states":
        # the as-read text too, as the overlap judge reads it when there are no quotes (a row's heads name its answer)
        texts = printed if quotes else printed + [line.text for line in own]
        return any(states_answer(text, quotes, answer) for text in texts)
    if quotes:
        return any(line_in_quotes(text, quotes) for text in printed)
    return answer_in_texts(answer, [line.text for line in own] + printed)


def first_gold_rank(ranking: list[tuple[str, int]], gold: set[tuple[str, int]]) -> int | None:
    """1-based rank of the first gold page in a page ranking (pages deduplicated), else None."""
    seen: list[tuple[str, int]] = []
    for page in ranking:
        if page not in seen:
            seen.append(page)
            if page in gold:
                return len(seen)
    return None


# -----------------------------------------------------------------------------
# One evaluation run


def diagnose(retriever: Retriever, q: dict, scope: list[str] | None, gold: set, hits, page_texts) -> dict:
    """Why a question was or was not answered: each leg's rank of the gold page, overlap, near misses."""
    sem_rank = first_gold_rank([key for key, _, _ in retriever.semantic(q["question"], scope)], gold)
    bm25_rank = first_gold_rank([key for key, _ in retriever.keyword(q["question"], scope)], gold)
    query_terms = set(tokenize(q["question"]))
    gold_terms = set(tokenize(" ".join(page_texts.get(p, "") for _, p in gold)))
    gold_pages = {p for _, p in gold}
    near = sorted({h.page for h in hits if h.page not in gold_pages and any(abs(h.page - p) == 1 for p in gold_pages)})
    found = [h for h in hits if (h.collection, h.page) in gold]
    carried = "-"
    if found:
        t = found[0].trace
        carried = "+".join(leg for leg in ("semantic", "bm25", "page_ref") if f"{leg}_rank" in t)
    return {
        "semantic_rank": sem_rank,
        "bm25_rank": bm25_rank,
        "token_overlap": round(len(query_terms & gold_terms) / max(len(query_terms), 1), 2),
        "near_misses": near,
        "carried_by": carried,
        "fusion_table": [
            {"doc": h.doc_name, "page": h.page, "fused": round(h.score, 4), **{k: v for k, v in h.trace.items() if k != "fused"}}
            for h in hits
        ],
    }


def question_scope(q: dict, scope_name: str, collections: dict[str, str], doc_types: dict[str, str]) -> list[str]:
    """The documents searched for ``q``: its own ("doc"), every document of the question file ("library"), or
    those of its type ("type"). The library is the benchmark's documents, not whatever else the store holds,
    so a store shared by several benchmarks gives each its own figure."""
    if scope_name == "doc":
        return [collections[q["doc"]]]
    if scope_name == "type":
        return [col for doc, col in collections.items() if doc_types.get(doc) == doc_types.get(q["doc"])]
    return list(collections.values())


def run_ablation(retriever: Retriever, questions: list[dict], collections: dict[str, str], doc_types: dict[str, str],
                 scope_name: str, steps: Steps, k: int, desc: str) -> list[tuple[dict, list, dict]]:
    """(question, hits, metrics row) for every answerable question under one ablation and scope."""
    out = []
    for q in tqdm(questions, desc=desc, unit="q", leave=False):
        scope = question_scope(q, scope_name, collections, doc_types)
        gold = {(collections[q["doc"]], p) for p in q["pages"]}
        hits = retriever.search(q["question"], k=k, scope=scope, steps=steps)
        row = {"category": q["category"], "doc_type": doc_types.get(q["doc"], "unknown"), "split": q.get("split") or "-",
               **page_metrics([(h.collection, h.page) for h in hits], gold, k)}
        out.append((q, hits, row))
    return out


def summary_with_breakdowns(rows: list[dict], k: int) -> dict:
    """Overall metrics plus the same per evidence category, per document type, per ``split`` field (the
    fresh questions' held-out "fresh2", the multilingual bench's dev and heldout) and per split and category
    (a choice made on "dev" is reported on "heldout", language by language)."""
    breakdowns = {}
    for field_name in ("category", "doc_type", "split", "split_category"):
        groups = defaultdict(list)
        for row in rows:
            groups[f"{row['split']} · {row['category']}" if field_name == "split_category" else row[field_name]].append(row)
        breakdowns[f"by_{field_name}"] = {name: summarise(group, k) for name, group in sorted(groups.items())}
    return {**summarise(rows, k), **breakdowns}


def evaluate(retriever: Retriever, questions: list[dict], collections: dict[str, str], scopes: list[str], k: int,
             doc_types: dict[str, str] | None = None, ablations: dict | None = None, with_evidence: bool = True) -> dict:
    """Run every ablation in every scope; returns metrics (evidence@3 for hybrid, unless not ``with_evidence``),
    breakdowns and per-question rows."""
    doc_types = doc_types or {}
    answerable = [q for q in questions if q["pages"]]
    unanswerable = [q for q in questions if not q["pages"]]
    texts_by_doc = {doc: ingest.page_texts(ingest.open_collection(retriever.client, col, retriever.embedder)) for doc, col in collections.items()}
    countable = {id(q): evidence_countable(q, gold_page_texts(q, collections[q["doc"]], retriever)) for q in answerable}
    quoted = sum(bool(evidence_quotes(q)) for q in answerable)  # always countable
    results: dict = {"k": k, "ablations": {}, "per_question": [], "unanswerable": {},
                     "evidence": {"lines": EVIDENCE_AT, "answerable": len(answerable), "quoted": quoted,
                                  "answer_on_gold_page": sum(countable.values()) - quoted}}
    log.info("evidence@%d judges %d of %d answerable questions (%d by quotes)", EVIDENCE_AT, sum(countable.values()), len(answerable), quoted)
    for scope_name in scopes:
        for ablation, steps in (ablations or ABLATIONS).items():
            runs = run_ablation(retriever, answerable, collections, doc_types, scope_name, steps, k, f"{scope_name}/{ablation}")
            if ablation == "hybrid":
                for q, hits, row in tqdm(runs, desc=f"{scope_name}/evidence", unit="q", leave=False):
                    scope = question_scope(q, scope_name, collections, doc_types)
                    gold = {(collections[q["doc"]], p) for p in q["pages"]}
                    lines = evidence.best_lines(q["question"], retriever.load_pages(hits), retriever, n=EVIDENCE_AT,
                                                more=EVIDENCE_READ - EVIDENCE_AT) if with_evidence else []  # the first 3 are those shown
                    for judge in JUDGES:
                        for at in EVIDENCE_CUTS:
                            row[evidence_key(judge, at)] = (int(evidence_shown(q, lines, collections[q["doc"]], retriever, at, judge))
                                                            if countable[id(q)] and with_evidence else None)
                    row["evidence"] = row[evidence_key("overlap", EVIDENCE_AT)]  # the figure's name before both judges
                    results["per_question"].append(
                        {"scope": scope_name, "question": q["question"], "doc": q["doc"], "gold_pages": q["pages"],
                         "retrieved": [h.page for h in hits], **row,
                         "evidence_lines": [{"doc": h.doc_name, "page": h.page, "text": h.text,
                                             "printed": evidence.span_text(h, retriever)} for h in lines],
                         **diagnose(retriever, q, scope, gold, hits, texts_by_doc[q["doc"]])}
                    )
            results["ablations"][f"{scope_name}/{ablation}"] = summary_with_breakdowns([row for _, _, row in runs], k)
        if scope_name != "type":
            results["unanswerable"][scope_name] = top_similarity_gap(retriever, answerable, unanswerable, collections, scope_name)
    return results


def evaluate_perturbed(retriever: Retriever, questions: list[dict], collections: dict[str, str], scopes: list[str],
                       k: int, seed: int, doc_types: dict[str, str] | None = None) -> dict:
    """hit@k of each leg and of hybrid for the plain questions and each perturbation, per scope.

    Besides the figure over all questions, each perturbation reports how many
    questions it changed and the plain vs perturbed hit@k on just those.
    """
    doc_types = doc_types or {}
    answerable = [q for q in questions if q["pages"]]
    variants = {"plain": answerable} | {kind: perturbed_questions(answerable, kind, seed) for kind in PERTURBATIONS}
    results: dict = {"k": k, "seed": seed, "runs": {}}
    for scope_name in scopes:
        for ablation in PERTURB_ABLATIONS:
            plain_hits = None
            for kind, variant in variants.items():
                runs = run_ablation(retriever, variant, collections, doc_types, scope_name, ABLATIONS[ablation], k,
                                    f"{scope_name}/{ablation}/{kind}")
                hits = [row["hit"] for _, _, row in runs]
                plain_hits = plain_hits or hits
                changed = [i for i, q in enumerate(variant) if q["question"] != q.get("plain_question", q["question"])]
                results["runs"][f"{scope_name}/{ablation}/{kind}"] = {
                    **summary_with_breakdowns([row for _, _, row in runs], k),
                    "changed": len(changed),
                    "changed_plain_hit": round(sum(plain_hits[i] for i in changed) / len(changed), 3) if changed else None,
                    "changed_hit": round(sum(hits[i] for i in changed) / len(changed), 3) if changed else None,
                }
    return results


def top_similarity_gap(retriever, answerable, unanswerable, collections, scope_name) -> dict:
    """Median best cosine similarity for answerable vs unanswerable questions (refusal threshold input)."""
    def best(q):
        scope = [collections[q["doc"]]] if scope_name == "doc" else list(collections.values())
        top = retriever.semantic(q["question"], scope, n=1)  # [(page, similarity, chunk id)]
        return top[0][1] if top else 0.0

    return {
        "n": len(unanswerable),
        "median_top_similarity_answerable": round(statistics.median(best(q) for q in answerable), 3) if answerable else None,
        "median_top_similarity_unanswerable": round(statistics.median(best(q) for q in unanswerable), 3) if unanswerable else None,
    }


# -----------------------------------------------------------------------------
# Reporting


def metrics_table(results: dict) -> str:
    """One row per scope/ablation; the evidence figures (hybrid only, "-" elsewhere) beside hit@k: evidence@3 and @8
    by the overlap judge, states@3 and @8 by the judge that wants a figure of the gold stated."""
    k = results["k"]
    keys = [f"hit@{k}", *evidence_keys(), f"recall@{k}", f"precision@{k}", "mrr", "n", "evidence_n"]
    lines = ["| run | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for name, m in results["ablations"].items():
        lines.append(f"| {name} | " + " | ".join(str(m.get(key, "-")) for key in keys) + " |")
    return "\n".join(lines)


def evidence_note(results: dict) -> str:
    """How many questions evidence@3 judges, and by which rule."""
    e = results["evidence"]
    return (f"evidence@{e['lines']} judges {e['quoted'] + e['answer_on_gold_page']} of {e['answerable']} answerable questions: "
            f"{e['quoted']} by their evidence quotes, {e['answer_on_gold_page']} by their answer printed on a gold page "
            f"(the rest carry no quote and their answer is printed on no gold page)")


def category_table(results: dict) -> str:
    """hit@k of hybrid retrieval per question category (rows) and scope (columns)."""
    k = results["k"]
    runs = {name.split("/")[0]: m["by_category"] for name, m in results["ablations"].items() if name.endswith("/hybrid")}
    categories = sorted({c for by in runs.values() for c in by})
    lines = ["| category | " + " | ".join(f"{scope} hit@{k}" for scope in runs) + " | n |", "|---" * (len(runs) + 2) + "|"]
    for c in categories:
        n = next(by[c]["n"] for by in runs.values() if c in by)
        lines.append(f"| {c} | " + " | ".join(str(by.get(c, {}).get(f"hit@{k}", "-")) for by in runs.values()) + f" | {n} |")
    return "\n".join(lines)


def markdown_report(results: dict, questions_path: Path) -> str:
    k = results["k"]
    evs = evidence_keys()
    parts = [f"# Retrieval evaluation: {questions_path.name}", "", metrics_table(results), "", evidence_note(results), ""]
    for name, m in results["ablations"].items():
        if name.endswith("/hybrid"):
            for by in ("category", "split"):
                parts += [f"## {name} by {by}", "", f"| {by} | hit@{k} | " + " | ".join(evs) + f" | recall@{k} | mrr | n | evidence_n |",
                          "|---" * (len(evs) + 6) + "|"]
                parts += [f"| {c} | {v[f'hit@{k}']} | " + " | ".join(str(v[e]) for e in evs)
                          + f" | {v[f'recall@{k}']} | {v['mrr']} | {v['n']} | {v['evidence_n']} |" for c, v in m[f"by_{by}"].items()]
                parts.append("")
    parts += ["## Unanswerable questions", "", "```", json.dumps(results["unanswerable"], indent=2), "```", ""]
    misses = [r for r in results["per_question"] if not r["hit"]]
    parts += [f"## Misses (hybrid): {len(misses)}", "", "| scope | doc | question | gold | got | sem rank | bm25 rank | overlap | near |", "|---|---|---|---|---|---|---|---|---|"]
    for r in misses:
        question = r["question"].replace("|", "/")[:90]
        parts.append(
            f"| {r['scope']} | {r['doc'][:25]} | {question} | {r['gold_pages']} | {r['retrieved']} | "
            f"{r['semantic_rank']} | {r['bm25_rank']} | {r['token_overlap']} | {r['near_misses']} |"
        )
    unshown = [r for r in results["per_question"] if r["hit"] and r["evidence"] == 0]
    parts += ["", f"## Evidence misses (hybrid, a gold page in the top {k}): {len(unshown)}", "",
              "| scope | doc | question | gold | lines shown (page: text) |", "|---|---|---|---|---|"]
    for r in unshown:
        shown = " / ".join(f"{line['page']}: {line['text'][:70]}" for line in r["evidence_lines"][:EVIDENCE_AT]).replace("|", "/")
        parts.append(f"| {r['scope']} | {r['doc'][:25]} | {r['question'].replace('|', '/')[:90]} | {r['gold_pages']} | {shown} |")
    return "\n".join(parts) + "\n"


def perturbation_table(results: dict, scopes: list[str]) -> str:
    """One row per wording, hit@k of each leg and hybrid per scope, hybrid's change from plain, and the
    changed questions' plain -> perturbed hybrid hit@k."""
    k, runs = results["k"], results["runs"]
    header = ["wording", "changed"]
    for scope in scopes:
        header += [f"{scope} {a}" for a in PERTURB_ABLATIONS] + [f"{scope} Δ hybrid", f"{scope} changed only"]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for kind in ("plain", *PERTURBATIONS):
        cells = [kind, str(runs[f"{scopes[0]}/hybrid/{kind}"]["changed"])]
        for scope in scopes:
            cells += [str(runs[f"{scope}/{a}/{kind}"][f"hit@{k}"]) for a in PERTURB_ABLATIONS]
            hybrid = runs[f"{scope}/hybrid/{kind}"]
            cells.append(f"{hybrid[f'hit@{k}'] - runs[f'{scope}/hybrid/plain'][f'hit@{k}']:+.3f}")
            cells.append(f"{hybrid['changed_plain_hit']} -> {hybrid['changed_hit']}" if hybrid["changed"] else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def doc_type_table(results: dict, scopes: list[str], ablation: str = "hybrid") -> str:
    """hit@k of ``ablation`` per document type in each scope (plain questions)."""
    k = results["k"]
    key = (lambda scope: f"{scope}/{ablation}/plain") if "runs" in results else (lambda scope: f"{scope}/{ablation}")
    table = results["runs"] if "runs" in results else results["ablations"]
    types = sorted(table[key(scopes[0])]["by_doc_type"])
    lines = ["| document type | n | " + " | ".join(f"{s} hit@{k}" for s in scopes) + " |", "|---" * (len(scopes) + 2) + "|"]
    for t in types:
        n = table[key(scopes[0])]["by_doc_type"][t]["n"]
        lines.append(f"| {t} | {n} | " + " | ".join(str(table[key(s)]["by_doc_type"][t][f"hit@{k}"]) for s in scopes) + " |")
    return "\n".join(lines)


SCOPES = {"doc": ["doc"], "library": ["library"], "type": ["type"], "both": ["doc", "library"], "all": ["doc", "library", "type"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Page-level retrieval evaluation.")
    parser.add_argument("--questions", type=Path, default=DEFAULT_QUESTIONS)
    parser.add_argument("--pdf-dir", type=Path, help="default: pdfs/ beside the questions file")
    parser.add_argument("--scope", choices=list(SCOPES), default="both",
                        help="doc: own document; library: every document of the question file; type: all documents of the question's doc_type; "
                             "both: doc + library; all: the three")
    parser.add_argument("--k", type=int, default=config.TOP_K)
    parser.add_argument("--json", type=Path, help="write all results here")
    parser.add_argument("--report", type=Path, help="Markdown report (default: beside --json, else eval_report.md)")
    parser.add_argument("--store", type=Path, default=DEFAULT_STORE, help="evaluation store (kept between runs)")
    parser.add_argument("--limit", type=int, help="only the first N questions")
    parser.add_argument("--split", choices=["all", "fit", "held-out"], default="all",
                        help="a seeded half of the questions: fit (rules decided on it) or held-out (the other half)")
    parser.add_argument("--perturb", action="store_true",
                        help="hit@k of each leg and hybrid for the plain questions and each seeded rewording")
    parser.add_argument("--seed", type=int, default=18, help="seed of --split and --perturb")
    parser.add_argument("--subset", help='only the questions whose "split" field is this (the multilingual bench: dev, heldout)')
    parser.add_argument("--ablations", help="comma-separated runs to do (default: all of ABLATIONS; hybrid always)")
    parser.add_argument("--no-evidence", action="store_true",
                        help="pages only: skip the evidence lines (they embed each line of the pages found: slow with a large embedder)")
    parser.add_argument("--stored-only", action="store_true",
                        help="ingest nothing: use the question file's documents already complete in --store, leave out questions about others")
    parser.add_argument("--chunk-size", type=int, help="compare a chunking policy (own store per policy)")
    parser.add_argument("--chunk-overlap", type=int)
    parser.add_argument("--extractor", choices=EXTRACTORS, help="compare a page-text extractor (own store per extractor)")
    parser.add_argument("--rules-off", default="", help="comma-separated registered rules (rules.py) switched off for the whole run")
    args = parser.parse_args(argv)
    with rules.off(name for name in args.rules_off.split(",") if name):
        return run(args)


def run(args: argparse.Namespace) -> int:
    """The evaluation the parsed command line asks for (``main``'s body, within its rules switched off)."""
    config.setup_logging(logging.WARNING)
    profile = ingest_profile(args.extractor, args.chunk_size, args.chunk_overlap)
    if args.chunk_size or args.chunk_overlap is not None:
        args.store = args.store.with_name(f"{args.store.name}-chunks{profile.chunk_size}-{profile.chunk_overlap}")
    args.store = extractor_store(args.extractor, args.store)  # locks and kept PDFs live in it too (ingest.store_dir)

    all_questions = load_questions(args.questions)
    in_split = {id(q) for q in split_questions(all_questions, args.split, args.seed)}  # halves of the whole file
    client, embedder = ingest.get_client(str(args.store)), embedders.get_embeddings()
    if args.stored_only:
        named = {q["doc"] for q in all_questions}
        collections = {d["doc_name"]: d["collection"] for d in ingest.list_documents(client) if d["doc_name"] in named}
        missing = sorted(named - set(collections))
        if missing:
            log.warning("Left out: %d questions about %d documents not in the store: %s",
                        sum(q["doc"] in missing for q in all_questions), len(missing), ", ".join(missing))
        all_questions = [q for q in all_questions if q["doc"] in collections]
    else:  # every document of the question file is in the library, whichever questions are asked
        collections = ingest_needed(all_questions, args.pdf_dir or default_pdf_dir(args.questions), client, embedder, profile)
    questions = [q for q in all_questions if id(q) in in_split and (not args.subset or q.get("split") == args.subset)][: args.limit]
    chosen = set(args.ablations.split(",")) | {"hybrid"} if args.ablations else set(ABLATIONS)
    ablations = {name: steps for name, steps in ABLATIONS.items() if name in chosen}
    doc_types = {q["doc"]: q["doc_type"] for q in all_questions if q.get("doc_type")}
    retriever = Retriever(client, embedder)
    retriever.refresh()
    scopes = SCOPES[args.scope]
    report = args.report or (args.json.with_suffix(".md") if args.json else Path("eval_report.md"))
    if args.perturb:
        results = evaluate_perturbed(retriever, questions, collections, scopes, args.k, args.seed, doc_types)
        text = perturbation_table(results, scopes)
        parts = [f"# Perturbed retrieval: {args.questions.name} ({args.split}, seed {args.seed})", "", text, ""]
    else:
        results = evaluate(retriever, questions, collections, scopes, args.k, doc_types, ablations, not args.no_evidence)
        text = "\n".join([metrics_table(results), evidence_note(results), category_table(results), json.dumps(results["unanswerable"])])
        parts = [markdown_report(results, args.questions)]
    if doc_types:
        text += "\n\n" + doc_type_table(results, scopes)
        parts += ["## hybrid hit@k per document type", "", doc_type_table(results, scopes), ""]
    print(text)
    report.write_text("\n".join(parts), encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
