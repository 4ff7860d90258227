"""Answer a question from the library, with page citations that are checked, not trusted.

``ask`` takes one question down a short path, and the first answerer that takes it answers:

    question (+ chat history)
      answered without a search     greeting        a canned reply
                                    personal_data   refused (REFUSE_PERSONAL_DATA)
                                    whole_document  a summary or outline, section by section (overview.py)
      read_question()               the asker's instructions set apart (reading.py), the history fitted in the
                                    model's context, a follow-up rewritten by the model into a standalone search,
                                    then question.parse_question(): the question read once
      find_evidence()               retriever.search() -> top-k pages; retriever.load_pages() -> each page once;
                                    evidence.best_lines() -> the lines that answer, before any model call (the app
                                    shows the first EVIDENCE_LINES at once)
      answered from the evidence    nothing_found   nothing close to the question: a fixed reply, no model call
                                    table_cell      the cell the question names by row and column (cells.py)
                                    domain_measure  a measure worked out from the pages' own lines (domains.py)
                                    the_model       the model reads the lines [L1].. (a model the app ships) or the
                                                    pages' passages [1].. with the lines marked (a model a person
                                                    brings; reading.py: as many as fit), its reply streams; a line
                                                    copying the prompt is cut (echoes.py), a calculation it writes
                                                    worked out (calc.py); reading lines in the answer's language,
                                                    it is offered no refusal and its reply is held until a sentence
                                                    is backed by its line (else the lines are said to be the
                                                    nearest); otherwise a bare refusal is held back
      -> checked                    each sentence against the line or passage it cites (checker.py): unsupported
                                    sentences and numbers that name no source flagged; unmarked sentences
                                    attributed to the line that backs them ("inferred")

Every answerer returns an ``AnswerStream`` (iterate it for the text, read ``.result`` after) or None to pass
the question on. Small local models drop and invent markers, so nothing here relies on the model citing
correctly: every shown citation is checked in code.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

import calc
import cells
import checker
import config
import context
import domains
import echoes
import embedders
import evidence
import ingest
import models
import overview
import prompts
import reading
import rules
from checker import CheckedSentence, Citation, strip_markers, verify_answer
from language import question_language
from pages import Page
from question import ParsedQuestion, parse_question
from reading import QuestionTooLong
from records import Hit
from retriever import Retriever
from safe_text import terminal_text
from text_utils import numbers_in, tokenize

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


# The answer path's rules (rules.py): each switchable by name, the lab's to switch off
rules.register("greeting", "a greeting is no question: it is answered without a search",
               "tests/test_qa.py::test_a_greeting_is_told_apart_from_a_question_that_starts_like_one",
               pays_on="docs/experiments/2026-11-28-rules-that-pay.md: a behaviour: \"Hello!\" answered in 0.00 s without a search;"
                       " switched off, the 32 filings are searched and the question handed to the model")
rules.register("follow_up_stands_alone", "a follow-up that leans on earlier turns is searched as a standalone question",
               "tests/test_qa.py::test_only_a_follow_up_in_a_conversation_needs_a_rewrite",
               pays_on="docs/experiments/2026-11-23-right-answers-shown-honestly.md: follow-ups, a behaviour: a question that "
                       "leans on earlier turns (\"and in 2018?\") is searched as the standalone question the rewrite makes; no set "
                       "measures it")
rules.register("rewrite_adds_nothing", "a rewritten follow-up may add nothing the conversation did not say",
               "tests/test_qa.py::test_a_follow_up_rewrite_that_adds_a_number_is_rejected",
               pays_on="docs/experiments/2026-11-23-right-answers-shown-honestly.md: follow-ups, a behaviour: a rewrite with a "
                       "number or name neither turn wrote is replaced by the previous question plus this one; no set measures it")
rules.register("runaway_stopped", "a reply that repeats itself is stopped", "tests/test_qa.py::test_a_reply_that_repeats_itself_is_stopped",
               pays_on="docs/experiments/2026-11-28-rules-that-pay.md: 3 of the 1,152 stored answers (dev23, dev257, dev41) end "
                       "in a loop it stops; docs/experiments/2026-11-28-instructions-obeyed.md: 2 of 12 replies stopped")
rules.register("nothing_close", "when nothing found is close to the question, say so without asking the model",
               "tests/test_qa.py::test_a_question_with_nothing_relevant_is_refused_without_calling_the_llm",
               pays_on="docs/experiments/2026-11-28-rules-that-pay.md: a behaviour: an empty search is answered without the "
                       "model; its similarity floor (0.15) fired on none measured: 0 of 10 off-topic questions, 0 of 60 "
                       "fresh3/fresh4 questions")


@rules.switch("greeting", stand_in=False)
def is_greeting(question: str) -> bool:
    """Rule: a greeting is no question: it is answered without a search.
    is_greeting("Hello!") -> True; is_greeting("Hello world program in R?") -> False"""
    return bool(_GREETING.match(question))


def personal_data_in(question: str) -> str | None:
    """Rule (off by default, REFUSE_PERSONAL_DATA): a question carrying personal data is refused.
    What kind of personal data the question contains, if any: "an e-mail address"."""
    return next((kind for kind, pattern in _PERSONAL_DATA.items() if pattern.search(question)), None)


@rules.switch("follow_up_stands_alone", stand_in=False)
def needs_rewrite(question: str, history: list[tuple[str, str]]) -> bool:
    """Rule: a follow-up that leans on earlier turns is searched as a standalone question.
    A follow-up that leans on earlier turns: short, or starting "and ...", or with a pronoun."""
    return bool(history) and (len(question.split()) <= 5 or bool(_FOLLOW_UP.search(question)))


def history_text(history: list[tuple[str, str]]) -> str:
    turns = history[-2 * config.HISTORY_TURNS :]
    return "\n".join(f"{role}: {strip_markers(text)[:500]}" for role, text in turns)


REWRITE_STAGE = "Reading your follow-up with the conversation…"


def rewrite_query(llm: BaseChatModel, question: str, history: list[tuple[str, str]]) -> str:
    """The follow-up ``question`` as a standalone search query (the question itself if the LLM fails)."""
    messages = [
        SystemMessage(prompts.REWRITE_SYSTEM),
        HumanMessage(prompts.REWRITE_USER.format(history=history_text(history), question=question)),
    ]
    try:
        reply = models.with_max_tokens(llm, 48).invoke(messages).content.strip().splitlines()
    except Exception as err:  # any transport or server failure
        raise model_failure(err, llm) from err
    query = reply[0].strip().strip('"') if reply else ""
    log.info("Rewrote a follow-up into a search of %d words", len(query.split()))
    return checked_rewrite(query, question, history)


def checked_rewrite(query: str, question: str, history: list[tuple[str, str]]) -> str:
    """Rule: a rewritten follow-up may add nothing the conversation did not say.
    ``query`` if it adds no month or name that is in neither the conversation nor the question, and
    no number the user did not write (a number from an earlier answer in a query states that answer),
    and keeps at least one word of the conversation beyond the question itself ("How many winters?"
    for "And for how many winters?" searches nothing new); else the previous question plus this one. A rewrite that states facts is an answer, not a search.

    checked_rewrite("lighthouse keeper winters 41", "And how many winters?", [("user", "Who kept the lighthouse?")])
      -> "Who kept the lighthouse? And how many winters?"
    """
    if not rules.on("rewrite_adds_nothing"):
        return query
    user_said = "\n".join([question] + [text for role, text in history if role == "user"])
    said = question + "\n" + "\n".join(text for _, text in history)
    invented = (checker.missing_specifics(query, said) | (numbers_in(query) - numbers_in(user_said))
                if query else {"(empty)"})
    previous = next((text for role, text in reversed(history) if role == "user"), "")
    # a follow-up is about the conversation's topic: a rewrite with none of its words lost the topic
    keeps_topic = not set(tokenize(previous)) or bool(set(tokenize(query)) & (set(tokenize(said)) - set(tokenize(question))))
    if not invented and keeps_topic:
        return query
    why = f"adds {len(invented)} specific(s) no one said" if invented else "drops the conversation's topic"
    log.warning("The rewrite %s; searching the previous and this question instead", why)
    return f"{previous} {question}".strip()


# -----------------------------------------------------------------------------
# When the model fails


_CONTEXT_OVERFLOW = re.compile(r"exceeds the available context size|maximum context length|context[_ ]length[_ ]exceeded", re.I)


def model_failure(err: Exception, llm: BaseChatModel) -> Exception:
    """What to raise for a model call that failed: QuestionTooLong when the model says the prompt overflowed its
    context (llama.cpp: "exceeds the available context size"; OpenAI, vLLM: "maximum context length"), for the
    prompt is the asker's to shorten; a reply stopped on purpose (models.ReplyCancelled: the asker left) as it is,
    for it is no failure; else ModelUnavailableError with a plain sentence."""
    if isinstance(err, models.ReplyCancelled):
        return err
    if _CONTEXT_OVERFLOW.search(str(err)):
        return QuestionTooLong(
            f"The question, its history and the lines it needs are longer than the model reads at once "
            f"({models.context_length(llm):,} tokens, {models.context_setting(llm)}) — shorten the question or its history."
        )
    return models.ModelUnavailableError(models.explain_failure(err, llm))


# -----------------------------------------------------------------------------
# Answering


def is_refusal(text: str) -> bool:
    """is_refusal("The documents do not say.") -> True; so does the refusal as shown beside the lines (prompts.NEAREST_LINES)"""
    said = text.lower()
    return prompts.REFUSAL.lower().rstrip(".") in said or prompts.NEAREST_LINES.lower().rstrip(".") in said


rules.register("no_bare_yes_or_no", "a bare Yes or No, or one opening a refusal, is no answer the lines back",
               "tests/test_qa.py::test_rule_a_bare_yes_or_no_or_one_opening_a_refusal_is_no_answer",
               pays_on="docs/experiments/2026-11-28-rules-that-pay.md: stored answers, fresh_fb (held out): 2 replies \"No. The "
                       "documents do not say.\" to questions whose answer is Yes shown as refusals; costs one right bare \"No.\" in "
                       "dev307")
# "No. The documents do not say." reads as No; the model meant it found nothing
_YES_OR_NO = re.compile(r"^\s*(?:yes|no)\b[\s.,!:;—-]*", re.IGNORECASE)


def could_be_refusal(text: str) -> bool:
    """Could this start of a reply still turn out to be the bare refusal? could_be_refusal("The doc") -> True;
    Rule: a bare Yes or No, or one opening a refusal, is no answer the lines back. could_be_refusal("No. The") -> True"""
    if rules.on("no_bare_yes_or_no"):
        text = _YES_OR_NO.sub("", text)
    said, refusal = " ".join(text.lower().split()), prompts.REFUSAL.lower()
    return refusal.startswith(said) or said.startswith(refusal.rstrip("."))


def is_bare_yes_or_no(text: str) -> bool:
    """is_bare_yes_or_no("No.") -> True; is_bare_yes_or_no("No, it paid none [L1].") -> False"""
    return rules.on("no_bare_yes_or_no") and bool(text.strip()) and not _YES_OR_NO.sub("", text).strip()


@rules.switch("runaway_stopped", stand_in=False)
def runs_away(text: str) -> bool:
    """Rule: a reply that repeats itself is stopped.
    Has the reply fallen into a loop? Small models sometimes repeat a fragment until the token budget
    ends ("[6,500] [10.500] [6,500] [10.500] …"), which costs minutes and shows nothing. True when the
    reply ends with one fragment repeated over at least 120 characters (four times at least), or with
    200 characters without a letter outside citation markers."""
    tail = text[-600:]
    # citation markers are no words: "[L1] 3,531 [L2] 11,303 [L3] …" says nothing either
    if len(tail) >= 200 and not re.search(r"[^\W\d_]", strip_markers(tail[-200:])):
        return True
    return len(tail) >= 120 and any(tail.endswith(tail[-period:] * max(4, -(-120 // period))) for period in range(8, 151))


@dataclass
class Answer:
    question: str
    text: str = ""
    sentences: list[CheckedSentence] = field(default_factory=list)
    sources: list[Hit] = field(default_factory=list)  # what the model was shown, [1] first
    refused: bool = False
    rewritten_query: str | None = None
    nothing_found: bool = False  # nothing in the library is close to the question: the lines are only the nearest
    confidence: float | None = None  # supported sentences / sentences that could be judged
    seconds: float = 0.0
    first_token_seconds: float | None = None
    evidence: list[Hit] = field(default_factory=list)  # the lines that answer, best first (evidence.py)
    evidence_seconds: float | None = None  # question in, evidence lines ready
    model: str | None = None  # the chat model that wrote the text; None when none did (fixed replies, worked out in code)
    prompt_tokens: int | None = None  # the prompt the model read, in its tokens
    completion_tokens: int | None = None  # the reply it wrote: the model's own count, else its streamed chunks
    cached_prompt_tokens: int | None = None  # of prompt_tokens, those the model reused from its prompt cache (not read again)
    model_reply: str = ""  # the reply as the model wrote it, before the app held it back or replaced it (for evaluation)

    def usage(self) -> dict:
        """OpenAI's ``usage`` of the answering call: the tokens the model read and wrote (0 when no model wrote
        the text: a greeting, a refusal decided by the search, a figure worked out in code), and of those read, the
        ones the model took from its prompt cache."""
        read, written = self.prompt_tokens or 0, self.completion_tokens or 0
        return {"prompt_tokens": read, "completion_tokens": written, "total_tokens": read + written,
                "prompt_tokens_details": {"cached_tokens": self.cached_prompt_tokens or 0}}

    @property
    def citations(self) -> list[Citation]:
        """Every distinct source cited (a line, or a page's passage), verified ones first."""
        seen: dict[int, Citation] = {}
        for sentence in self.sentences:
            for c in sentence.citations:
                if c.number not in seen or (c.verified and not seen[c.number].verified):
                    seen[c.number] = c
        return sorted(seen.values(), key=lambda c: not c.verified)

    @property
    def reads_lines(self) -> bool:
        """Whether the sources are evidence lines (cited [L1]..) rather than passages ([1]..)."""
        return bool(self.sources) and all("kind" in h.trace for h in self.sources)

    def cited(self, citation: Citation) -> Hit:
        """The source a citation names: the line (or passage) the model read as [n]."""
        return self.sources[citation.number - 1]

    def to_json(self) -> dict:
        return {
            "answer": self.text,
            "citations": [citation_json(c, self.cited(c)) for c in self.citations],
            "confidence": self.confidence,
            "refused": self.refused,
            "nothing_found": self.nothing_found,  # then the evidence lines are only the nearest, about something else
            "rewritten_query": self.rewritten_query,
            "seconds": round(self.seconds, 2),
            "unsupported_sentences": [s.text for s in self.sentences if s.supported is False],
            # each sentence as the checker read it, and its one-sentence summary: what the app shows beside the answer
            "sentences": [sentence_json(s, self.reads_lines) for s in self.sentences],
            "backing_summary": checker.backing_summary(self.sentences, self.citations, self.reads_lines),
            "unit": "line" if self.reads_lines else "passage",
            "fabricated_citations": sorted({n for s in self.sentences for n in s.fabricated}),
            "evidence": evidence_json(self.evidence),
            "model": self.model,
            "usage": self.usage(),
        }


def sentence_json(sentence: CheckedSentence, as_lines: bool) -> dict:
    """A checked sentence as the API returns it: its text (a slice of the answer), whether a line backs it (None:
    too short to judge) and the markers of the sources it was checked against (the cited ones, or the one it was
    attributed to)."""
    return {"text": sentence.text, "supported": sentence.supported,
            "cites": [checker.marker(c.number, as_lines) for c in sentence.citations if not c.inferred]}


def citation_json(citation: Citation, source: Hit) -> dict:
    """A citation as the API returns it: the document and page, whether the cited line backs the sentence,
    and that line's text and its span [start, end) in the page text (what a viewer highlights)."""
    return {"doc": citation.doc_name, "page": citation.page, "verified": citation.verified, "inferred": citation.inferred,
            "number": citation.number, "marker": checker.marker(citation.number, "kind" in source.trace),
            "text": source.text, "start": source.start, "end": source.end}


def evidence_json(lines: list[Hit]) -> list[dict]:
    """The evidence lines as the API returns them."""
    return [{"document_id": h.collection, "doc": h.doc_name, "page": h.page, "text": h.text, "score": round(h.score, 4)} for h in lines]


class AnswerStream:
    """Iterate for the answer's text as it is generated (what ``st.write_stream`` wants);
    after the last piece, ``result`` holds the verified Answer."""

    def __init__(self, pieces: Iterator[str], finish, evidence: list[Hit] | None = None):
        self._pieces, self._finish = pieces, finish
        self.result: Answer | None = None
        self.evidence = evidence or []  # known before the first piece: show it while the model works

    def __iter__(self) -> Iterator[str]:
        text = []
        for piece in self._pieces:
            text.append(piece)
            yield piece
        self.result = self._finish("".join(text))


def checked(answer: Answer, text: str, question: str | ParsedQuestion, t0: float) -> None:
    """Fill ``answer`` with the model's ``text`` checked sentence by sentence against its sources; ``question`` as read
    (the answer path's ParsedQuestion: the checker reads the question asked, not the instructions beside it)."""
    answer.text = text.strip()
    # a refusal states nothing a line could back: checked, the nearest-lines sentence would read as unbacked (⚠ on /v1)
    answer.sentences = [] if is_refusal(answer.text) else verify_answer(answer.text, answer.sources, question)
    judged = [s for s in answer.sentences if s.supported is not None]
    answer.confidence = round(sum(s.supported for s in judged) / len(judged), 2) if judged else None
    answer.seconds = time.perf_counter() - t0


# -----------------------------------------------------------------------------
# The answer path: one question on its way, the steps it takes, and the answerers in the order they are asked


@dataclass
class Turn:
    """One question on its way through the answer path: what the steps fill in and the answerers read."""

    question: str
    retriever: Retriever
    chosen_llm: BaseChatModel | None
    history: list[tuple[str, str]]
    scope: list[str] | None
    k: int | None
    stage: Callable[[str], None]  # hears what is going on while the person waits
    given: list[Hit] | None  # passages handed in: the model reads those, nothing is searched or read in code
    reads: str | None  # what the model reads, "lines" or "passages"; None: the app's setting
    answer: Answer
    t0: float = field(default_factory=time.perf_counter)
    instructions: str = ""  # an OpenAI client's system messages: the answer's form and language
    query: str = ""  # what is searched: the question, or a follow-up rewritten to stand alone
    parsed: ParsedQuestion | None = None  # the query read once (question.py)
    asked: str = ""  # the question as the prompt puts it, its instructions on a line after it
    hits: list[Hit] = field(default_factory=list)
    pages: list[Page] = field(default_factory=list)

    @cached_property
    def llm(self) -> BaseChatModel:
        """The chat model, loaded only when a step needs it (a greeting needs none)."""
        return self.chosen_llm or models.get_chat_model()

    @property
    def model_reads_lines(self) -> bool:
        """Whether the model reads the evidence lines, not passages (reading.what_model_reads)."""
        return reading.what_model_reads(self.llm, self.reads) == "lines"


def ask(
    question: str,
    retriever: Retriever,
    llm: BaseChatModel | None = None,
    history: list[tuple[str, str]] | None = None,
    scope: list[str] | None = None,
    k: int | None = None,
    on_stage: Callable[[str], None] | None = None,
    passages: list[Hit] | None = None,
    reads: str | None = None,
) -> AnswerStream:
    """Answer ``question`` from the documents in ``scope`` (all when None); see the module docstring.

    ``on_stage`` hears what is going on while the person waits: "Reading your follow-up with the
    conversation…" (a follow-up rewritten to stand alone), "Searching your documents…",
    "Reading 3 lines…", "Writing…", "Checking the citations…". Given ``passages``, the model reads
    those instead of what a search would find (``evaluation/eval_answers.py --replay`` re-asks stored passages,
    so a change of prompt is measured without the noise of retrieval). ``reads`` ("lines", "passages")
    overrides what the model reads (reading.what_model_reads: by default the lines for a model the app
    ships, passages with the lines marked for a model a person brings).
    """
    turn = Turn(question, retriever, llm, history or [], scope, k, on_stage or (lambda text: None), passages, reads, Answer(question))
    if stream := first_answer(turn, ANSWERED_WITHOUT_SEARCH):
        return stream
    read_question(turn)
    find_evidence(turn)
    return first_answer(turn, ANSWERED_FROM_EVIDENCE)


def first_answer(turn: Turn, answerers: list[Callable[[Turn], AnswerStream | None]]) -> AnswerStream | None:
    """The stream of the first answerer that takes the question (each returns None to pass it on)."""
    return next((stream for answerer in answerers if (stream := answerer(turn)) is not None), None)


# The steps between the two lists of answerers


def read_question(turn: Turn) -> None:
    """Set the asker's instructions apart, fit the history in the model's context, rewrite a follow-up into a
    standalone search, and parse the question once: the search, the evidence lines and the prompt all use it."""
    turn.instructions, history = reading.client_instructions(turn.history)
    if history or turn.instructions:  # only then is there something to fit; a bare question too long fails at the model (model_failure)
        llm = turn.llm
        history = reading.fitted_history(turn.question, turn.instructions, history, models.context_length(llm),
                                         lambda text: models.count_tokens(llm, text), models.context_setting(llm))
    turn.history, turn.query = history, turn.question
    if turn.given is None and needs_rewrite(turn.question, history):
        turn.stage(REWRITE_STAGE)  # a model call of its own, seconds long: said like every other stage
        turn.query = turn.answer.rewritten_query = rewrite_query(turn.llm, turn.question, history)
    turn.parsed = parse_question(turn.query)
    # the retriever searches the question without its instructions; the prompt states them
    turn.asked = reading.question_for_prompt(turn.parsed if turn.query == turn.question else parse_question(turn.question))


def find_evidence(turn: Turn) -> None:
    """Search, load each page found once, and pick the lines that answer, before any model call
    (``AnswerStream.evidence``: the app shows them while the model works). Given passages, their pages."""
    if turn.given is None:
        turn.stage("Searching your documents…")
        turn.hits = turn.retriever.search(turn.parsed, k=turn.k, scope=turn.scope)
    turn.pages = turn.retriever.load_pages(turn.hits if turn.given is None else turn.given)
    turn.answer.evidence = evidence.best_lines(turn.parsed, turn.pages, turn.retriever, more=lines_read_beyond_shown(turn))
    if turn.given is None:
        turn.answer.evidence_seconds = time.perf_counter() - turn.t0
        log.info("Evidence: %d lines after %.2fs", len(turn.answer.evidence), turn.answer.evidence_seconds)


def lines_read_beyond_shown(turn: Turn) -> int:
    """How many evidence lines the model reads beyond those shown first (none when it reads passages)."""
    return max(0, config.ANSWER_LINES - config.EVIDENCE_LINES) if turn.model_reads_lines else 0


# The answerers: each takes the question (an AnswerStream) or passes it on (None)


def greeting(turn: Turn) -> AnswerStream | None:
    return fixed_reply(turn.answer, prompts.GREETING_REPLY) if is_greeting(turn.question) else None


def personal_data(turn: Turn) -> AnswerStream | None:
    if not config.REFUSE_PERSONAL_DATA or not (kind := personal_data_in(turn.question)):
        return None
    turn.answer.refused = True
    return fixed_reply(turn.answer, f"Your question contains {kind}; this app is set not to search for personal data.")


def whole_document(turn: Turn) -> AnswerStream | None:
    """A question about a whole document (its summary, its sections, a comparison of two: overview.py) is read
    section by section; asked of several documents where it wants one, the reply asks which one is meant."""
    if turn.given is not None or not (kind := overview.whole_document_request(turn.question)):
        return None
    docs = overview.documents_meant(turn.question, turn.retriever, turn.scope)
    if len(docs) > 1 and kind != "compare":
        return fixed_reply(turn.answer, overview.which_document_text(docs, kind))
    if docs and (kind != "compare" or len(docs) > 1):
        return whole_document_answer(kind, docs, turn)
    return None


def nothing_found(turn: Turn) -> AnswerStream | None:
    """Rule: when nothing found is close to the question, say so without asking the model."""
    best = max((h.trace.get("semantic_score", 0.0) for h in turn.hits), default=0.0)
    if turn.given is not None or (turn.hits and best >= config.REFUSAL_MIN_SIMILARITY) or not rules.on("nothing_close"):
        return None
    log.info("Refused without the LLM: best similarity %.3f < %.3f", best, config.REFUSAL_MIN_SIMILARITY)
    turn.answer.refused, turn.answer.nothing_found, turn.answer.sources = True, True, turn.hits
    return fixed_reply(turn.answer, prompts.NOT_FOUND)


def table_cell(turn: Turn) -> AnswerStream | None:
    """The table cell the question names by row and column, read in code from an evidence line (cells.py) and
    cited by that line; it goes before a domain's reading of whole pages."""
    if turn.given is not None or not turn.answer.evidence:
        return None
    names = {collection: turn.retriever.profile(collection).names for collection in {line.collection for line in turn.answer.evidence}}
    row_labels = [line.label for page in turn.pages for line in page.lines if line.kind == "row"]
    if not (cell := cells.named_cell(turn.parsed, turn.answer.evidence, names, row_labels)):
        return None
    turn.answer.sources = turn.answer.evidence
    log.info("Read in code: a table cell on p.%d, no model call", cell.line.page)  # the page's words stay out of the log
    return AnswerStream(iter([cells.cell_answer(cell)]), checked_by(turn), turn.answer.evidence)


def domain_measure(turn: Turn) -> AnswerStream | None:
    """A measure a domain knows how to work out from the pages' own lines (domains.answer_in_code)."""
    if turn.given is not None or not (worked := domains.answer_in_code(turn.parsed, turn.pages)):
        return None
    text, turn.answer.sources = worked
    log.info("Worked out from pages %s, no model call", [h.page for h in turn.answer.sources])
    turn.stage("Working it out from the documents' own figures…")
    return AnswerStream(iter([text]), checked_by(turn), turn.answer.evidence)


def the_model(turn: Turn) -> AnswerStream:
    """The model reads the evidence lines (or the pages' passages), as many as fit in its context, and its reply
    streams: a bare refusal held back, a calculation it writes worked out in code."""
    as_lines = turn.given is None and turn.model_reads_lines and bool(turn.answer.evidence)  # passages given are read as given
    if as_lines:
        candidates = turn.answer.evidence
    else:
        candidates = turn.given if turn.given is not None else context.choose_context(
            turn.query, turn.pages, reading.passage_chars(turn.llm), marked=turn.answer.evidence)
    llm = turn.llm
    sources = reading.fit_sources(turn.asked, candidates, turn.history, lambda text: models.count_tokens(llm, text),
                                  models.context_length(llm), config.LLM_MAX_TOKENS, as_lines, turn.instructions)
    turn.answer.sources = sources
    what = "line" if as_lines else "passage"
    turn.stage(f"Reading {len(sources)} {what}{'s' if len(sources) != 1 else ''}…")
    refuses_for_model = as_lines and rules.on("backed_or_nearest") and answered_in_the_lines_language(turn)
    reply = model_reply(turn, reading.build_messages(turn.asked, sources, turn.history, as_lines, turn.instructions, refuses_for_model))
    reply = echoes.echo_free(reply, echoes.prompt_openings(turn.instructions))  # no line of the prompt in the answer
    if refuses_for_model:
        reply = backed_or_nearest(calc.without_results(reply), sources, turn.parsed)
    else:
        reply = calc.without_results(refusal_held_back(reply, refusal_for(turn)))
    return AnswerStream(with_worked_out(turn, reply), checked_by(turn), turn.answer.evidence)


ANSWERED_WITHOUT_SEARCH = [greeting, personal_data, whole_document]
ANSWERED_FROM_EVIDENCE = [nothing_found, table_cell, domain_measure, the_model]


# What the answerers share


def fixed_reply(answer: Answer, text: str) -> AnswerStream:
    """A reply known in advance: streamed whole, not checked (it cites nothing)."""

    def finish(_: str) -> Answer:
        answer.text = text
        return answer

    return AnswerStream(iter([text]), finish, answer.evidence)


def checked_by(turn: Turn) -> Callable[[str], Answer]:
    """What finishes an answer from the documents: each sentence checked against what it cites."""

    def finish(text: str) -> Answer:
        turn.stage("Checking the citations…")
        checked(turn.answer, text, turn.parsed, turn.t0)
        turn.answer.refused = is_refusal(turn.answer.text)
        log.info("Answered in %.1fs, confidence %s", turn.answer.seconds, turn.answer.confidence)
        return turn.answer

    return finish


def model_reply(turn: Turn, messages: list[BaseMessage]) -> Iterator[str]:
    """The model's reply as it streams, with its token counts and first-token time kept on the answer."""
    answer, llm = turn.answer, turn.llm
    answer.model = models.chat_model_label(llm)
    try:
        text = ""
        answer.prompt_tokens = sum(models.count_tokens(llm, m.content) + 4 for m in messages)
        for chunk in llm.stream(messages):
            if usage := chunk.usage_metadata:  # the model's own count, in its last chunk
                answer.completion_tokens = usage["output_tokens"]
                answer.cached_prompt_tokens = (usage.get("input_token_details") or {}).get("cache_read")
            if not chunk.content:  # servers open and close a stream with empty chunks
                continue
            answer.completion_tokens = (answer.completion_tokens or 0) + 1  # a streamed chunk is a token, until the model counts
            if answer.first_token_seconds is None:
                answer.first_token_seconds = time.perf_counter() - turn.t0
                log.info("First token after %.2fs", answer.first_token_seconds)
                turn.stage("Writing…")
            yield chunk.content
            text += chunk.content
            answer.model_reply = text
            if runs_away(text):
                log.warning("The reply repeats itself; stopped after %d characters", len(text))
                return
    except Exception as err:  # any transport or server failure mid-answer
        raise model_failure(err, llm) from err


def refusal_held_back(reply: Iterator[str], refusal: str = prompts.REFUSAL) -> Iterator[str]:
    """The reply as it comes; a reply that may turn out to be a bare refusal is held back until it is clear, and
    shown as ``refusal`` if it is one (a bare Yes or No is one too)."""
    held = ""
    for piece in reply:
        held += piece
        if not could_be_refusal(held):
            yield held
            yield from reply
            return
    # What follows "The documents do not say." is not an answer: the 1.5B model goes on to guess
    # (a calculation with figures it just said it could not find).
    yield refusal if is_refusal(held) or is_bare_yes_or_no(held) else held


rules.register("refusal_beside_lines", "a refusal beside the lines found says they are the nearest found, not that the documents do not say",
               "tests/test_qa.py::test_rule_a_refusal_beside_the_lines_found_says_they_are_the_nearest",
               pays_on="docs/experiments/2026-11-28-the-line-that-answers-first.md: fresh4 (held out), \"The documents do not "
                       "say.\" under an answering line 12 -> 0")
def refusal_for(turn: Turn) -> str:
    """Rule: a refusal beside the lines found says they are the nearest found, not that the documents do not say.
    The model could not read an answer in the lines; they are on screen, and may say it (the person reads them).
    (Quoting the shown line that fits the kind asked as "the nearest" was tried: on fresh4 it quoted a line that
    does not answer most of the time; docs/experiments/2026-11-28-the-line-that-answers-first.md.)"""
    return prompts.NEAREST_LINES if turn.answer.evidence and rules.on("refusal_beside_lines") else prompts.REFUSAL


rules.register("backed_or_nearest", "a model reading the lines is not offered a refusal: its answer shows once a sentence of it is "
               "backed by the line it cites, and when none is, the lines are said to be the nearest found",
               "tests/test_qa.py::test_rule_an_answer_shows_once_a_sentence_is_backed_by_its_line",
               pays_on="docs/experiments/2026-11-29-no-refusal-offered.md: fresh4, fresh6, fresh7 (held out for it), judged blind: "
                       "right 20 -> 26 of 116, unanswerable declined 11 -> 13 of 14, confidently wrong 11 -> 15")


def answered_in_the_lines_language(turn: Turn) -> bool:
    """Is the answer asked in the language of the lines it reads (the asker's instructions name it, else the
    question's)? The checker backs a sentence by the words it shares with its line, which a translation does not,
    so only then can the app refuse for the model (backed_or_nearest); otherwise the model is offered the refusal."""
    asked = reading.language_asked(turn.instructions) or question_language(turn.query)
    return all(turn.retriever.language(collection) == asked for collection in {line.collection for line in turn.answer.sources})


def backed_or_nearest(reply: Iterator[str], lines: list[Hit], question: ParsedQuestion) -> Iterator[str]:
    """Rule: a model reading the lines is not offered a refusal: its answer shows once a sentence of it is backed by
    the line it cites, and when none is, the lines are said to be the nearest found.

    Offered a refusal, the 1.5B model took it beside the line that answers; offered none, it answers, and often
    wrongly where no line says it (an unanswerable question gets a figure). The checker tells them apart: the reply
    is held until a whole sentence of it is backed by its line (checker.verify_answer: [L1] is ``lines[0]``), then streams
    on. Each sentence is checked once, when it is whole (the last one when the reply ends)."""
    held, checked = "", set()

    def new_sentence_backed(ended: bool) -> bool:
        sentences = checker.split_sentences(held)
        fresh = [s for s in (sentences if ended else sentences[:-1]) if s not in checked]  # the last may still be growing
        checked.update(fresh)
        return bool(fresh) and any(s.supported for s in verify_answer(" ".join(fresh), lines, question))

    for piece in reply:
        held += piece
        if new_sentence_backed(ended=False):
            yield held
            yield from reply
            return
    if new_sentence_backed(ended=True):
        yield held
    else:
        log.info("No sentence of the reply is backed by the line it cites: the reply says the lines shown are the nearest")
        yield prompts.NEAREST_LINES


def with_worked_out(turn: Turn, reply: Iterator[str]) -> Iterator[str]:
    """The reply, then the result of the calculation it wrote, worked out in code (calc.py)."""
    text = ""
    for piece in reply:
        text += piece
        yield piece
    # A reply that says the documents lack the answer and then calculates anyway (the 1.5B model does)
    # has refused: its figures were ones it could not find.
    if is_refusal(text):
        return
    if line := calc.worked_out(text, [h.text for h in turn.answer.sources], turn.asked):
        yield f"\n\n{line}"


def whole_document_answer(kind: str, docs: list, turn: Turn) -> AnswerStream:
    """A question about a whole document, answered section by section from its outline (overview.py);
    each section line is checked against the text read for it, like any answer."""
    answer, llm = turn.answer, turn.llm

    def pieces() -> Iterator[str]:
        turn.stage("Reading the document's outline…")
        for piece in overview.read_document(kind, docs, turn.retriever, llm, turn.question, turn.stage):
            if isinstance(piece, overview.Reading):
                answer.sources = piece.sources
                continue
            if answer.first_token_seconds is None:
                answer.first_token_seconds = time.perf_counter() - turn.t0
            yield piece
        if kind == "summary":
            answer.model = models.chat_model_label(llm)

    def finish(text: str) -> Answer:
        checked(answer, text, turn.question, turn.t0)
        log.info("Whole-document %s of %s in %.1fs", kind, [d.name for d in docs], answer.seconds)
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
        client, embedder = ingest.get_client(), embedders.get_embeddings()
        scope = [ingest.ingest_pdf(pdf, client, embedder).collection for pdf in args.pdf]
        retriever = Retriever(client, embedder)
        stream = ask(args.question, retriever, scope=scope)
        for piece in stream:
            if not args.json:
                sys.stdout.write(terminal_text(piece))
                sys.stdout.flush()
    except (ingest.IngestError, models.ModelUnavailableError) as err:
        sys.stderr.write(terminal_text(f"{err}\n"))
        return 1
    result = stream.result
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False))
        return 0
    print("\n")
    for c in result.citations:
        mark = "verified" if c.verified else "NOT SUPPORTED"
        print(terminal_text(f"  [{c.number}] {c.doc_name}, page {c.page} ({mark}{', inferred' if c.inferred else ''})"))
    for s in result.sentences:
        if s.supported is False:
            print(terminal_text(f"  unsupported: {s.text}"))
    print(f"confidence: {result.confidence}   seconds: {result.seconds:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
