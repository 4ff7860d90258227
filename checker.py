"""Check an answer's citations in code: which sentence is backed by which numbered passage.

    answer text -> split_sentences()     (abbreviations and decimals do not split; markers stay on)
                -> parse_citations()     "[2][1, 3]" -> [2, 1, 3]
                -> support_scores()      per passage: word overlap / SUPPORT_MIN_OVERLAP, or
                                         embedding similarity / SUPPORT_MIN_SIMILARITY, >= 1 backs;
                                         0 when the sentence states a detail the passage lacks
                -> verify_answer()       CheckedSentence per sentence, with verified, co-cited
                                         and inferred Citations

Small local models drop and invent markers, so nothing relies on the model citing
correctly. Deliberately simple: support is judged by word overlap (or a near-paraphrase
embedding) plus hard rules for what overlap cannot vouch for (a number, month, name or
quotation the passage lacks; a restated question plus a number), not by an entailment
model (none runs offline here). The rules and thresholds were set against hand-judged
citations (``eval_answers.py --recheck``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

import config
from retriever import Hit, tokenize

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
