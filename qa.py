"""Answer a question from the library, with page citations that are checked, not trusted.

    question (+ chat history)
      -> greeting?                 canned reply, no retrieval
      -> follow-up?                the LLM rewrites it into a standalone search query
      -> retriever.search()        top-k pages, each as its best passage
      -> nothing relevant?         fixed "not found" reply and the nearest passages, no LLM call
      -> number the passages [1]..[k] and fit them in the model's context (lowest-ranked dropped first)
      -> stream the LLM's answer   (an AnswerStream: iterate it for tokens, read .result after)
      -> verify                    parse [n] markers -> (doc, page); check each sentence against the
                                   passage it cites; flag unsupported sentences and numbers that name
                                   no source; attribute unmarked (or wrongly marked) sentences to the
                                   passage that backs them ("inferred")

Small local models drop and invent markers, so nothing here relies on the
model citing correctly: every shown citation has been checked in code.
Deliberately simple: support is judged by word overlap (or a near-paraphrase
embedding) plus hard rules for what overlap cannot vouch for (a number, month,
name or quotation the passage lacks; a restated question plus a number), not by
an entailment model (none runs offline here). The rules and thresholds were set
against hand-judged citations (``eval_answers.py --recheck``).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

import config
import ingest
import models
import prompts
from retriever import Hit, Retriever, tokenize

log = logging.getLogger(__name__)

# -----------------------------------------------------------------------------
# Reading the question

_GREETING = re.compile(r"^\s*(hi|hello|hey|hallo|bonjour|thanks|thank you|good (morning|afternoon|evening))\b[\s!.,]*$", re.I)
_FOLLOW_UP = re.compile(r"^\s*(and|what about|how about|also|or)\b|\b(it|its|they|them|their|that|those|this|these|he|she|his|her)\b", re.I)
_PERSONAL_DATA = {
    "a social security number": re.compile(r"\b\d{3}-\d{2}-\d{4}\b"),
    "a card number": re.compile(r"\b(?:\d[ -]?){13,16}\b"),
    "an e-mail address": re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.]+\b"),
    "a phone number": re.compile(r"\+?\d[\d ()-]{8,}\d"),
}


def is_greeting(question: str) -> bool:
    """is_greeting("Hello!") -> True; is_greeting("Hello world program in R?") -> False"""
    return bool(_GREETING.match(question))


def personal_data_in(question: str) -> str | None:
    """What kind of personal data the question contains, if any: "an e-mail address"."""
    return next((kind for kind, pattern in _PERSONAL_DATA.items() if pattern.search(question)), None)


def answer_shape(question: str) -> str:
    """answer_shape("Compare the 2019 and 2020 revenue") -> "compare" """
    q = question.lower()
    if re.search(r"\b(compare|comparison|difference between|differ|versus|vs\.?)\b", q):
        return "compare"
    if re.search(r"\b(summari[sz]e|summary|overview|tl;?dr)\b", q):
        return "summary"
    if re.search(r"^\s*(list|name|enumerate)\b|\bwhat are the\b|\bwhich are the\b", q):
        return "list"
    return "plain"


def needs_rewrite(question: str, history: list[tuple[str, str]]) -> bool:
    """A follow-up that leans on earlier turns: short, or starting "and ...", or with a pronoun."""
    return bool(history) and (len(question.split()) <= 5 or bool(_FOLLOW_UP.search(question)))


def history_text(history: list[tuple[str, str]]) -> str:
    turns = history[-2 * config.HISTORY_TURNS :]
    return "\n".join(f"{role}: {strip_markers(text)[:500]}" for role, text in turns)


def rewrite_query(llm: BaseChatModel, question: str, history: list[tuple[str, str]]) -> str:
    """The follow-up ``question`` as a standalone search query (the question itself if the LLM fails)."""
    messages = [
        SystemMessage(prompts.REWRITE_SYSTEM),
        HumanMessage(prompts.REWRITE_USER.format(history=history_text(history), question=question)),
    ]
    try:
        reply = models.with_max_tokens(llm, 48).invoke(messages).content.strip().splitlines()
    except Exception as err:  # any transport or server failure
        raise models.ModelUnavailableError(models.explain_failure(err)) from err
    query = reply[0].strip().strip('"') if reply else ""
    log.info("Rewrote follow-up %r as %r", question, query)
    return query or question


# -----------------------------------------------------------------------------
# Citations

_MARKER = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_SENTENCE_END = re.compile(r"[.!?]+(?:\s*\[\d+(?:\s*,\s*\d+)*\])*(?=\s|$)")
# A period after these is not the end of a sentence ("Rs. 1,039 million", "Fig. 3", "e.g. this").
_ABBREVIATIONS = set(
    "rs mr mrs ms dr prof st no nos vs fig figs eq sec ch vol pp p e.g i.e etc inc ltd co corp approx est "
    "jan feb mar apr jun jul aug sep sept oct nov dec u.s u.k".split()
)


def parse_citations(text: str) -> list[int]:
    """Source numbers cited in ``text``, in order, without repeats.

    parse_citations("Rain fell [2]. It flooded [1, 3][2].") -> [2, 1, 3]
    """
    numbers: list[int] = []
    for group in _MARKER.findall(text):
        for n in group.split(","):
            if int(n) not in numbers:
                numbers.append(int(n))
    return numbers


def strip_markers(text: str) -> str:
    return _MARKER.sub("", text).strip()


def _ends_sentence(line: str, start: int, match: re.Match) -> bool:
    """Is this period (or ! or ?) a sentence end, not an abbreviation or a decimal-like break?"""
    words = line[start : match.start()].split()
    if match.group(0).startswith(".") and words and words[-1].lower().rstrip(".") in _ABBREVIATIONS:
        return False
    following = line[match.end() :].lstrip()[:1]
    return not following.islower()


def split_sentences(text: str) -> list[str]:
    """Sentences with their trailing citation markers kept on them; abbreviations do not split.

    split_sentences("It rained. [1] Then it snowed [2].") -> ["It rained. [1]", "Then it snowed [2]."]
    split_sentences("Funds were Rs. 1,039 million [2].") -> ["Funds were Rs. 1,039 million [2]."]
    """
    sentences = []
    for line in text.split("\n"):
        start = 0
        for match in _SENTENCE_END.finditer(line):
            if _ends_sentence(line, start, match):
                sentences.append(line[start : match.end()].strip())
                start = match.end()
        sentences.append(line[start:].strip())
    return [s for s in sentences if strip_markers(s).strip(" -*•")]


@dataclass
class Citation:
    number: int
    doc_name: str
    page: int
    collection: str
    verified: bool  # a passage we gave the model supports the sentence
    inferred: bool = False  # the model gave no marker; we attributed the sentence


@dataclass
class CheckedSentence:
    text: str
    citations: list[Citation]
    supported: bool | None  # None: too short to judge ("Yes.")
    fabricated: list[int] = field(default_factory=list)  # cited numbers that name no source


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


_MONTH = re.compile(
    r"\b(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?|oct(?:ober)?"
    r"|nov(?:ember)?|dec(?:ember)?)\b",
    re.IGNORECASE,
)


def numbers_in(text: str) -> set[str]:
    """numbers_in("3,200 tonnes in 1911 (3.5%)") -> {"3200", "1911", "3.5"}"""
    return {n.replace(",", "").rstrip(".") for n in _NUMBER.findall(text)}


_WORD = re.compile(r"\w[\w'’-]*")


def months_in(text: str) -> set[str]:
    """months_in("from Sept. to June; it may slip") -> {"sep", "jun"} (lower-case may/march are verbs)"""
    return {m.lower()[:3] for m in _MONTH.findall(text) if m not in ("may", "march")}


def names_in(text: str) -> set[str]:
    """Words that name something (capitalised, or letters mixed with digits), lower-cased; the first
    word is skipped, being capitalised anyway. names_in("Sales of GPT-4o rose in Berlin") -> {"gpt-4o", "berlin"}"""
    words = _WORD.findall(text)[1:]
    return {w.lower() for w in words if any(c.isupper() for c in w) or (any(c.isdigit() for c in w) and any(c.isalpha() for c in w))}


def missing_specifics(claim: str, passage: str) -> set[str]:
    """The numbers, months and names ``claim`` states that ``passage`` does not contain.

    missing_specifics("In June GPT-4o scored 61.5%", "In June GPT-4 scored 61.5%") -> {"gpt-4o"}
    """
    passage_words = {w.lower() for w in _WORD.findall(passage)}
    return (
        (numbers_in(claim) - numbers_in(passage))
        | (months_in(claim) - months_in(passage))
        | (names_in(claim) - passage_words)
    )


_QUOTE = re.compile(r"[\"“”]([^\"“”]{20,})[\"“”]")


def _squash(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def unbacked_detail(claim: str, passage: str, question: str) -> bool:
    """Does ``claim`` state something word overlap cannot vouch for in ``passage``? Three cases:
    a number, month or name the passage lacks; a quotation the passage does not hold word for
    word; or nothing beyond the question's words but a number, which any page with the question's
    words and that number would "support" (a page number, a table cell of another row)."""
    if missing_specifics(claim, passage):
        return True
    if any(_squash(quote) not in _squash(passage) for quote in _QUOTE.findall(claim)):
        return True
    singular = lambda words: {w.removesuffix("s") for w in words}  # noqa: E731  ("shareholders" restates "shareholder")
    beyond_question = singular(tokenize(claim)) - singular(tokenize(question))
    return bool(beyond_question) and all(_NUMBER.fullmatch(w) for w in beyond_question)


def support_scores(sentence: str, sources: list[Hit], sentence_vec, source_vecs, question: str = "") -> list[float]:
    """How well each source supports a sentence: max of word overlap and embedding similarity, each
    divided by its threshold, so >= 1 means supported; 0 when the sentence has a detail the source
    cannot back (``unbacked_detail``): similar wording is no support for a figure the passage lacks."""
    claim = strip_markers(sentence)
    words = set(tokenize(claim))
    scores = []
    for hit, vec in zip(sources, source_vecs):
        if unbacked_detail(claim, hit.text, question):
            scores.append(0.0)
            continue
        overlap = len(words & set(tokenize(hit.text))) / max(len(words), 1)
        similarity = float(np.dot(sentence_vec, vec))
        scores.append(max(overlap / config.SUPPORT_MIN_OVERLAP, similarity / config.SUPPORT_MIN_SIMILARITY))
    return scores


def verify_answer(answer: str, sources: list[Hit], embedder, question: str = "") -> list[CheckedSentence]:
    """Check every sentence of ``answer`` to ``question`` against the numbered ``sources`` ([1] is sources[0])."""
    sentences = split_sentences(answer)
    if not sentences or not sources:
        return [CheckedSentence(s, [], None) for s in sentences]
    sentence_vecs = embedder.embed_documents([strip_markers(s) for s in sentences])
    source_vecs = embedder.embed_documents([h.text for h in sources])
    checked = []
    for sentence, vec in zip(sentences, sentence_vecs):
        cited = parse_citations(sentence)
        fabricated = [n for n in cited if not 1 <= n <= len(sources)]
        if len(tokenize(strip_markers(sentence))) < config.SUPPORT_MIN_WORDS:
            checked.append(CheckedSentence(sentence, [], None, fabricated))
            continue
        scores = support_scores(sentence, sources, vec, source_vecs, question)
        citations = [
            Citation(n, sources[n - 1].doc_name, sources[n - 1].page, sources[n - 1].collection, scores[n - 1] >= 1)
            for n in cited
            if 1 <= n <= len(sources)
        ]
        if any(c.verified for c in citations):
            citations = [c for c in citations if c.verified]  # co-cited pages that do not back it add only noise
        else:
            best = int(np.argmax(scores))
            if scores[best] >= 1:  # no marker, or a wrong one: attribute the sentence to the page that backs it
                hit = sources[best]
                citations.append(Citation(best + 1, hit.doc_name, hit.page, hit.collection, True, inferred=True))
        supported = any(c.verified for c in citations)
        checked.append(CheckedSentence(sentence, citations, supported, fabricated))
    return checked


# -----------------------------------------------------------------------------
# Fitting the prompt into the model's context


def format_source(number: int, hit: Hit) -> str:
    title = f" — {hit.title}" if hit.title else ""
    return prompts.SOURCE_BLOCK.format(number=number, doc_name=hit.doc_name, page=hit.page, title=title, text=hit.text)


def build_messages(question: str, sources: list[Hit], history: list[tuple[str, str]]) -> list[BaseMessage]:
    messages: list[BaseMessage] = [SystemMessage(prompts.ANSWER_SYSTEM)]
    for role, text in history[-2 * config.HISTORY_TURNS :]:
        messages.append(HumanMessage(text) if role == "user" else AIMessage(strip_markers(text)))
    sources_text = "\n\n".join(format_source(i, hit) for i, hit in enumerate(sources, 1))
    shape = prompts.ANSWER_SHAPES[answer_shape(question)]
    messages.append(HumanMessage(prompts.ANSWER_USER.format(sources=sources_text, question=question, shape=shape)))
    return messages


def fit_sources(
    question: str, hits: list[Hit], history: list[tuple[str, str]], count_tokens, n_ctx: int, reserve: int
) -> list[Hit]:
    """The best-ranked ``hits`` whose prompt fits in ``n_ctx`` tokens with ``reserve`` left for the answer.

    Whole sources are dropped from the lowest rank up, never cut mid-passage, and every drop is logged.
    """
    kept = list(hits)
    while kept:
        prompt_tokens = sum(count_tokens(m.content) + 4 for m in build_messages(question, kept, history))
        if prompt_tokens + reserve <= n_ctx:
            return kept
        dropped = kept.pop()
        log.warning("Context full (%d + %d > %d tokens): dropped source %s p.%d", prompt_tokens, reserve, n_ctx, dropped.doc_name, dropped.page)
    return kept


# -----------------------------------------------------------------------------
# Answering


@dataclass
class Answer:
    question: str
    text: str = ""
    sentences: list[CheckedSentence] = field(default_factory=list)
    sources: list[Hit] = field(default_factory=list)  # what the model was shown, [1] first
    refused: bool = False
    rewritten_query: str | None = None
    confidence: float | None = None  # supported sentences / sentences that could be judged
    seconds: float = 0.0
    first_token_seconds: float | None = None

    @property
    def citations(self) -> list[Citation]:
        """Every distinct (doc, page) cited, verified ones first."""
        seen: dict[tuple[str, int], Citation] = {}
        for sentence in self.sentences:
            for c in sentence.citations:
                key = (c.collection, c.page)
                if key not in seen or (c.verified and not seen[key].verified):
                    seen[key] = c
        return sorted(seen.values(), key=lambda c: not c.verified)

    def to_json(self) -> dict:
        return {
            "answer": self.text,
            "citations": [{"doc": c.doc_name, "page": c.page, "verified": c.verified, "inferred": c.inferred} for c in self.citations],
            "confidence": self.confidence,
            "refused": self.refused,
            "rewritten_query": self.rewritten_query,
            "seconds": round(self.seconds, 2),
            "unsupported_sentences": [s.text for s in self.sentences if s.supported is False],
            "fabricated_citations": sorted({n for s in self.sentences for n in s.fabricated}),
        }


class AnswerStream:
    """Iterate for the answer's text as it is generated (what ``st.write_stream`` wants);
    after the last piece, ``result`` holds the verified Answer."""

    def __init__(self, pieces: Iterator[str], finish):
        self._pieces, self._finish = pieces, finish
        self.result: Answer | None = None

    def __iter__(self) -> Iterator[str]:
        text = []
        for piece in self._pieces:
            text.append(piece)
            yield piece
        self.result = self._finish("".join(text))


def _fixed(answer: Answer, text: str) -> AnswerStream:
    def finish(_: str) -> Answer:
        answer.text = text
        return answer

    return AnswerStream(iter([text]), finish)


def ask(
    question: str,
    retriever: Retriever,
    llm: BaseChatModel | None = None,
    history: list[tuple[str, str]] | None = None,
    scope: list[str] | None = None,
    k: int | None = None,
) -> AnswerStream:
    """Answer ``question`` from the documents in ``scope`` (all when None); see the module docstring."""
    t0 = time.perf_counter()
    history = history or []
    answer = Answer(question)
    if is_greeting(question):
        return _fixed(answer, prompts.GREETING_REPLY)
    if config.REFUSE_PERSONAL_DATA and (kind := personal_data_in(question)):
        answer.refused = True
        return _fixed(answer, f"Your question contains {kind}; this app is set not to search for personal data.")
    llm = llm or models.get_chat_model()
    query = question
    if needs_rewrite(question, history):
        query = answer.rewritten_query = rewrite_query(llm, question, history)
    hits = retriever.search(query, k=k, scope=scope)
    best = max((h.trace.get("semantic_score", 0.0) for h in hits), default=0.0)
    if not hits or best < config.REFUSAL_MIN_SIMILARITY:
        log.info("Refused without the LLM: best similarity %.3f < %.3f", best, config.REFUSAL_MIN_SIMILARITY)
        answer.refused, answer.sources = True, hits
        return _fixed(answer, prompts.NOT_FOUND)
    sources = fit_sources(question, hits, history, lambda text: models.count_tokens(llm, text), config.LLM_N_CTX, config.LLM_MAX_TOKENS)
    answer.sources = sources
    messages = build_messages(question, sources, history)

    def pieces() -> Iterator[str]:
        try:
            for chunk in llm.stream(messages):
                if answer.first_token_seconds is None:
                    answer.first_token_seconds = time.perf_counter() - t0
                    log.info("First token after %.2fs", answer.first_token_seconds)
                yield chunk.content
        except Exception as err:  # any transport or server failure mid-answer
            raise models.ModelUnavailableError(models.explain_failure(err)) from err

    def finish(text: str) -> Answer:
        answer.text = text.strip()
        answer.sentences = verify_answer(answer.text, sources, retriever.embedder, question)
        judged = [s for s in answer.sentences if s.supported is not None]
        answer.confidence = round(sum(s.supported for s in judged) / len(judged), 2) if judged else None
        answer.refused = "do not say" in answer.text.lower()
        answer.seconds = time.perf_counter() - t0
        log.info("Answered in %.1fs, confidence %s", answer.seconds, answer.confidence)
        return answer

    return AnswerStream(pieces(), finish)


def answer_question(question: str, retriever: Retriever, **kwargs) -> Answer:
    """``ask`` without streaming: run the stream to the end and return the checked Answer."""
    stream = ask(question, retriever, **kwargs)
    for _ in stream:
        pass
    return stream.result


# -----------------------------------------------------------------------------
# Command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Ask a question about PDFs from the terminal.")
    parser.add_argument("question")
    parser.add_argument("--pdf", action="append", required=True, type=Path, help="PDF to ask (repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    config.setup_logging(logging.WARNING)
    try:
        client, embedder = ingest.get_client(), models.get_embeddings()
        scope = [ingest.ingest_pdf(pdf, client, embedder).collection for pdf in args.pdf]
        retriever = Retriever(client, embedder)
        stream = ask(args.question, retriever, scope=scope)
        for piece in stream:
            if not args.json:
                sys.stdout.write(piece)
                sys.stdout.flush()
    except (ingest.IngestError, models.ModelUnavailableError) as err:
        sys.stderr.write(f"{err}\n")
        return 1
    result = stream.result
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False))
        return 0
    print("\n")
    for c in result.citations:
        mark = "verified" if c.verified else "NOT SUPPORTED"
        print(f"  [{c.number}] {c.doc_name}, page {c.page} ({mark}{', inferred' if c.inferred else ''})")
    for s in result.sentences:
        if s.supported is False:
            print(f"  unsupported: {s.text}")
    print(f"confidence: {result.confidence}   seconds: {result.seconds:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
