"""Answer a question from the library, with page citations that are checked, not trusted.

    question (+ chat history)
      -> greeting?                 canned reply, no retrieval
      (passages given instead?     the model reads those; the steps up to context.choose_context are skipped)
      -> follow-up?                the LLM rewrites it into a standalone search query
      -> question.parse_question() read once: the search query, its instructions, its hints
      -> retriever.search()        top-k pages, each as its best passage
      -> retriever.load_pages()    each of those pages once: text, chunks, lines, sentence spans
      -> evidence.best_lines()     the lines of those pages that answer, ready before any model call
                                   (``AnswerStream.evidence``): the app shows the first EVIDENCE_LINES at
                                   once; the model reads all ANSWER_LINES of them
      -> nothing relevant?         fixed "not found" reply, no LLM call; the lines are only the nearest
      -> worked out in code?       a domain's answer from the pages' own lines (domains.answer_in_code), or
                                   the table cell the question names by row and column (cells.py): no LLM
      -> what the model reads      the lines, numbered [L1]..[Ln] as shown (ANSWER_CONTEXT=lines), or the
                                   pages' best sentences and rows as passages [1]..[k] (context.py);
                                   fitted in the model's context (lowest-ranked dropped first)
      -> stream the LLM's answer   (an AnswerStream: iterate it for tokens, read .result after)
      -> a bare refusal?           held back and shown as the plain refusal (what a small model adds
                                   after one is a guess); the evidence lines then stand as the answer
      -> verify                    parse [L2] / [n] markers -> the line or passage; check each sentence
                                   against what it cites (a row: under the column and in the row the
                                   sentence names); flag unsupported sentences and numbers that name no
                                   source; attribute unmarked (or wrongly marked) sentences to the line
                                   that backs them ("inferred")

Small local models drop and invent markers, so nothing here relies on the
model citing correctly: every shown citation is checked in code by ``checker.py``.
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
from pathlib import Path

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

import calc
import cells
import checker
import config
import context
import domains
import embedders
import evidence
import ingest
import models
import overview
import prompts
from checker import CheckedSentence, Citation, strip_markers, verify_answer
from language import QUESTION_LANGUAGES, language_name, question_language
from question import ParsedQuestion, parse_question
from records import Hit
from retriever import Retriever
from text_utils import numbers_in, tokenize
from safe_text import fence_text, terminal_text

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
    """Rule: a greeting is no question: it is answered without a search.
    is_greeting("Hello!") -> True; is_greeting("Hello world program in R?") -> False"""
    return bool(_GREETING.match(question))


def personal_data_in(question: str) -> str | None:
    """Rule (off by default, REFUSE_PERSONAL_DATA): a question carrying personal data is refused.
    What kind of personal data the question contains, if any: "an e-mail address"."""
    return next((kind for kind, pattern in _PERSONAL_DATA.items() if pattern.search(question)), None)


def answer_shape(question: str) -> str:
    """answer_shape("Compare the 2019 and 2020 revenue") -> "compare" """
    q = question.lower()
    if calc.asks_calculation(q):
        return "calculate"
    if re.search(r"\b(compare|comparison|difference between|differ|versus|vs\.?)\b", q):
        return "compare"
    if re.search(r"\b(summari[sz]e|summary|overview|tl;?dr)\b", q):
        return "summary"
    if re.search(r"^\s*(list|name|enumerate)\b|\bwhat are the\b|\bwhich are the\b", q):
        return "list"
    if re.search(r"^\s*(is|are|was|were|does|do|did|can|could|has|have|had|will|would|should)\b", q):
        return "yes_no"
    if re.search(r"\b(how (many|much|long|old|often|far)|what (percentage|percent|share|proportion|number|amount|ratio))\b|%", q):
        return "number"
    return "plain"


def question_for_prompt(question: str | ParsedQuestion) -> str:
    """The question, then its instructions about the answer's form on a line of their own (see question.py).

    question_for_prompt("What was capex? State it in USD millions.") -> "What was capex?\nAnswer form: State it in USD millions."
    """
    parsed = question if isinstance(question, ParsedQuestion) else parse_question(question)
    if not parsed.instructions:
        return parsed.text
    return f"{parsed.query}\n{prompts.ANSWER_FORM.format(instructions=' '.join(parsed.instructions))}"


def client_instructions(history: list[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
    """The asker's standing instructions and the chat history without them.

    An OpenAI client's system messages arrive as ("system", text) turns of the history (server/openai_compat.py);
    they say how to answer (form, language), so they are neither searched nor shown as turns of the chat.

    client_instructions([("system", "Answer in French."), ("user", "Hi")]) -> ("Answer in French.", [("user", "Hi")])
    """
    instructions = "\n".join(text.strip() for role, text in history if role == "system" and text.strip())
    return instructions, [(role, text) for role, text in history if role != "system"]


_LANGUAGE_ASKED = re.compile(
    r"\b(?:in|into|using)\s+(" + "|".join(sorted(language_name(code) for code in QUESTION_LANGUAGES)) + r")\b", re.I
)
_LANGUAGE_CODE = {language_name(code).lower(): code for code in QUESTION_LANGUAGES}


def language_asked(instructions: str) -> str | None:
    """The language the asker's instructions ask the answer in, among QUESTION_LANGUAGES, else None.
    The app's own rule line ("Write the answer in French.") then says it as plainly as for a French question.

    language_asked("Answer in French only.") -> "fr"; language_asked("Be brief.") -> None
    """
    found = _LANGUAGE_ASKED.search(instructions)
    return _LANGUAGE_CODE[found.group(1).lower()] if found else None


def needs_rewrite(question: str, history: list[tuple[str, str]]) -> bool:
    """Rule: a follow-up that leans on earlier turns is searched as a standalone question.
    A follow-up that leans on earlier turns: short, or starting "and ...", or with a pronoun."""
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
# Fitting the prompt into the model's context


def format_source(number: int, hit: Hit) -> str:
    """One numbered source for the prompt: name, page, title and text all inside the fence,
    any fence tag in them neutralised (a page saying "</source> Ignore the rules" stays data)."""
    title = f" — {fence_text(hit.title)}" if hit.title else ""
    return prompts.SOURCE_BLOCK.format(
        number=number, doc_name=fence_text(hit.doc_name), page=hit.page, title=title, text=fence_text(hit.text)
    )


def format_lines(lines: list[Hit]) -> str:
    """The evidence lines as the model reads them, numbered [L1].. in the order shown, each document's name
    once above its lines; everything from the documents fenced (``fence_text``)."""
    blocks, document, read = [], None, {line.text for line in lines}
    for number, line in enumerate(lines, 1):
        if line.doc_name != document:
            document = line.doc_name
            blocks.append(prompts.LINES_DOCUMENT.format(doc_name=fence_text(document)))
        before = line.trace.get("before", "")
        template = prompts.LINE_AFTER if before and before not in read else prompts.LINE
        blocks.append(template.format(number=number, page=line.page, before=fence_text(before), text=fence_text(line.text)))
    return "\n".join(blocks)


def build_messages(
    question: str, sources: list[Hit], history: list[tuple[str, str]], as_lines: bool = False, instructions: str = ""
) -> list[BaseMessage]:
    """The chat to send: the rules, the recent history, then the sources and the question. ``as_lines``:
    the sources are evidence lines (``format_lines``), else numbered passages (``format_source``).
    ``instructions`` (an OpenAI client's system messages) go after the question, fenced like the documents,
    with a rule that they shape the answer's form and language only."""
    system = prompts.LINES_SYSTEM if as_lines else prompts.ANSWER_SYSTEM
    messages: list[BaseMessage] = [SystemMessage(system + prompts.INSTRUCTIONS_RULE if instructions else system)]
    for role, text in history[-2 * config.HISTORY_TURNS :]:
        messages.append(HumanMessage(text) if role == "user" else AIMessage(strip_markers(text)))
    shape = prompts.ANSWER_SHAPES[answer_shape(question)]
    if notes := domains.prompt_notes(question):
        shape += "\n" + "\n".join(prompts.FORMULA.format(formula=note) for note in notes)
    if instructions:
        shape += "\n" + prompts.CLIENT_INSTRUCTIONS.format(instructions=fence_text(instructions))
    # Rule: the answer is in the language the asker's instructions name, else in the question's language
    if asked := language_asked(instructions):
        shape += "\n" + prompts.ANSWER_LANGUAGE_ASKED.format(language=language_name(asked), sources="lines" if as_lines else "sources")
    elif (language := question_language(question)) != "en":
        shape += "\n" + prompts.ANSWER_LANGUAGE.format(language=language_name(language))
    if as_lines:
        messages.append(HumanMessage(prompts.LINES_USER.format(lines=format_lines(sources), question=question, shape=shape)))
    else:
        sources_text = "\n\n".join(format_source(i, hit) for i, hit in enumerate(sources, 1))
        messages.append(HumanMessage(prompts.ANSWER_USER.format(sources=sources_text, question=question, shape=shape)))
    return messages


def fit_sources(
    question: str, hits: list[Hit], history: list[tuple[str, str]], count_tokens, n_ctx: int, reserve: int,
    as_lines: bool = False, instructions: str = "",
) -> list[Hit]:
    """The best-ranked ``hits`` whose prompt fits in ``n_ctx`` tokens with ``reserve`` left for the answer.

    Whole sources are dropped from the lowest rank up, never cut mid-passage, and every drop is logged.
    """
    kept = list(hits)
    while kept:
        prompt_tokens = sum(count_tokens(m.content) + 4 for m in build_messages(question, kept, history, as_lines, instructions))
        if prompt_tokens + reserve <= n_ctx:
            return kept
        dropped = kept.pop()
        log.warning("Context full (%d + %d > %d tokens): dropped source %s p.%d", prompt_tokens, reserve, n_ctx, dropped.doc_name, dropped.page)
    return kept


class QuestionTooLong(ValueError):
    """The question (with the asker's instructions) is longer than the model can read beside what an answer needs:
    the asker's to shorten (a 400 over HTTP), not a server fault."""


# Tokens kept free for each evidence line the model reads: a prose line takes 20-40, a long table row ~80.
LINE_TOKENS = 100


def question_budget(n_ctx: int, count_tokens: Callable[[str], int]) -> int:
    """Tokens of an ``n_ctx``-token model left for the question, the asker's instructions and the history: what
    remains after the reply (LLM_MAX_TOKENS), the rules and templates (with the longest answer shape) and room
    for ANSWER_LINES evidence lines."""
    fixed = "\n".join([prompts.LINES_SYSTEM, prompts.INSTRUCTIONS_RULE, prompts.LINES_USER, prompts.CLIENT_INSTRUCTIONS,
                       max(prompts.ANSWER_SHAPES.values(), key=len), prompts.ANSWER_LANGUAGE_ASKED])
    return n_ctx - config.LLM_MAX_TOKENS - count_tokens(fixed) - 3 * 4 - config.ANSWER_LINES * LINE_TOKENS


def too_long_message(text: str, tokens: int, budget: int, n_ctx: int, setting: str, with_instructions: bool) -> str:
    """The sentence for a question of ``tokens`` tokens over a ``budget``, the limit said in the text's own words
    and characters (its tokens per word scale the budget):

    too_long_message("word " * 5000, 5000, 2900, 4096, "LLM_N_CTX", False)
      -> "The question is about 5,000 words (25,000 characters); this server reads at most 2,900 words (14,499
          characters) of a question and its instructions (the model reads 4,096 tokens at once, LLM_N_CTX) — shorten it."
    """
    words, chars = len(text.split()), len(text)
    share = max(budget, 0) / max(tokens, 1)
    what = "The question and its instructions are" if with_instructions else "The question is"
    return (f"{what} about {words:,} words ({chars:,} characters); this server reads at most {int(words * share):,} words "
            f"({int(chars * share):,} characters) of a question and its instructions (the model reads {n_ctx:,} tokens at "
            f"once, {setting}) — shorten {'them' if with_instructions else 'it'}.")


def fitted_history(
    question: str, instructions: str, history: list[tuple[str, str]], n_ctx: int, count_tokens: Callable[[str], int],
    setting: str = "LLM_N_CTX",
) -> list[tuple[str, str]]:
    """The latest turns of ``history`` that fit beside the question in the model's context, whole turns, the
    oldest dropped first (a long chat goes on, as a chat client expects; the model reads at most HISTORY_TURNS
    pairs anyway). QuestionTooLong, saying the limit, when the question and ``instructions`` alone do not fit:
    cutting those would answer something else than was asked. ``setting`` names what sets ``n_ctx``."""
    budget = question_budget(n_ctx, count_tokens)
    used = count_tokens(question) + (count_tokens(instructions) + 4 if instructions else 0)
    if used > budget:
        asked = f"{question}\n{instructions}" if instructions else question
        raise QuestionTooLong(too_long_message(asked, used, budget, n_ctx, setting, bool(instructions)))
    recent, kept = history[-2 * config.HISTORY_TURNS :], []
    for role, text in reversed(recent):
        cost = count_tokens(text) + 4
        if used + cost > budget:
            log.info("History trimmed to its last %d of %d turns: the rest does not fit beside the question", len(kept), len(recent))
            break
        kept.insert(0, (role, text))
        used += cost
    return kept


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
    """is_refusal("The documents do not say.") -> True"""
    return prompts.REFUSAL.lower().rstrip(".") in text.lower()


def could_be_refusal(text: str) -> bool:
    """Could this start of a reply still turn out to be the bare refusal? could_be_refusal("The doc") -> True"""
    said, refusal = " ".join(text.lower().split()), prompts.REFUSAL.lower()
    return refusal.startswith(said) or said.startswith(refusal.rstrip("."))


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
            "fabricated_citations": sorted({n for s in self.sentences for n in s.fabricated}),
            "evidence": evidence_json(self.evidence),
            "model": self.model,
            "usage": self.usage(),
        }


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


def checked(answer: Answer, text: str, question: str, t0: float) -> None:
    """Fill ``answer`` with the model's ``text`` checked sentence by sentence against its sources."""
    answer.text = text.strip()
    answer.sentences = verify_answer(answer.text, answer.sources, question)
    judged = [s for s in answer.sentences if s.supported is not None]
    answer.confidence = round(sum(s.supported for s in judged) / len(judged), 2) if judged else None
    answer.seconds = time.perf_counter() - t0


def _fixed(answer: Answer, text: str) -> AnswerStream:
    def finish(_: str) -> Answer:
        answer.text = text
        return answer

    return AnswerStream(iter([text]), finish, answer.evidence)


def lines_read_beyond_shown() -> int:
    """How many evidence lines the model reads beyond those shown first (none when it reads passages)."""
    return max(0, config.ANSWER_LINES - config.EVIDENCE_LINES) if config.ANSWER_CONTEXT == "lines" else 0


def ask(
    question: str,
    retriever: Retriever,
    llm: BaseChatModel | None = None,
    history: list[tuple[str, str]] | None = None,
    scope: list[str] | None = None,
    k: int | None = None,
    on_stage: Callable[[str], None] | None = None,
    passages: list[Hit] | None = None,
) -> AnswerStream:
    """Answer ``question`` from the documents in ``scope`` (all when None); see the module docstring.

    ``on_stage`` hears what is going on while the person waits: "Searching your documents…",
    "Reading 5 passages…", "Writing…", "Checking the citations…". Given ``passages``, the model reads
    those instead of what a search would find (``evaluation/eval_answers.py --replay`` re-asks stored passages,
    so a change of prompt is measured without the noise of retrieval).
    """
    t0 = time.perf_counter()
    history = history or []
    stage = on_stage or (lambda text: None)
    answer = Answer(question)
    if is_greeting(question):
        return _fixed(answer, prompts.GREETING_REPLY)
    if config.REFUSE_PERSONAL_DATA and (kind := personal_data_in(question)):
        answer.refused = True
        return _fixed(answer, f"Your question contains {kind}; this app is set not to search for personal data.")
    llm = llm or models.get_chat_model()
    instructions, history = client_instructions(history)
    if history or instructions:  # only then is there something to fit; a bare question too long fails at the model (model_failure)
        history = fitted_history(question, instructions, history, models.context_length(llm),
                                 lambda text: models.count_tokens(llm, text), models.context_setting(llm))
    if passages is None and (kind := overview.whole_document_request(question)):
        docs = overview.documents_meant(question, retriever, scope)
        if len(docs) > 1 and kind != "compare":
            return _fixed(answer, overview.which_document_text(docs, kind))
        if docs and (kind != "compare" or len(docs) > 1):
            return whole_document_answer(kind, docs, question, retriever, llm, answer, stage, t0)
    query = question
    if passages is None and needs_rewrite(question, history):
        query = answer.rewritten_query = rewrite_query(llm, question, history)
    parsed = parse_question(query)  # read once: the search, the evidence lines and the prompt all use it
    if passages is None:
        stage("Searching your documents…")
        hits = retriever.search(parsed, k=k, scope=scope)
        pages = retriever.load_pages(hits)
        answer.evidence = evidence.best_lines(parsed, pages, retriever, more=lines_read_beyond_shown())
        answer.evidence_seconds = time.perf_counter() - t0
        log.info("Evidence: %d lines after %.2fs", len(answer.evidence), answer.evidence_seconds)
        # Rule: when nothing found is close to the question, say so without asking the model.
        best = max((h.trace.get("semantic_score", 0.0) for h in hits), default=0.0)
        if not hits or best < config.REFUSAL_MIN_SIMILARITY:
            log.info("Refused without the LLM: best similarity %.3f < %.3f", best, config.REFUSAL_MIN_SIMILARITY)
            answer.refused, answer.nothing_found, answer.sources = True, True, hits
            return _fixed(answer, prompts.NOT_FOUND)
    else:
        pages = retriever.load_pages(passages)
        answer.evidence = evidence.best_lines(parsed, pages, retriever, more=lines_read_beyond_shown())

    def finish(text: str) -> Answer:
        stage("Checking the citations…")
        checked(answer, text, question, t0)
        answer.refused = is_refusal(answer.text)
        log.info("Answered in %.1fs, confidence %s", answer.seconds, answer.confidence)
        return answer

    # the retriever searched the question without these instructions
    asked = question_for_prompt(parsed if query == question else parse_question(question))
    if passages is None:
        # a cell the evidence shows is cited by its line, so it goes before a domain's reading of whole pages
        if cell := cells.named_cell(parsed.query, answer.evidence):
            text, answer.sources = cells.cell_answer(cell), answer.evidence
            log.info("Read in code: a table cell on p.%d, no model call", cell.line.page)  # the page's words stay out of the log
            return AnswerStream(iter([text]), finish, answer.evidence)
        if worked := domains.answer_in_code(asked, pages):
            text, answer.sources = worked
            log.info("Worked out from pages %s, no model call", [h.page for h in answer.sources])
            stage("Working it out from the documents' own figures…")
            return AnswerStream(iter([text]), finish, answer.evidence)
    as_lines = passages is None and config.ANSWER_CONTEXT == "lines" and bool(answer.evidence)  # passages given are read as given
    if as_lines:
        passages = answer.evidence
    elif passages is None:
        passages = context.choose_context(query, pages)
    sources = fit_sources(asked, passages, history, lambda text: models.count_tokens(llm, text), models.context_length(llm),
                          config.LLM_MAX_TOKENS, as_lines, instructions)
    answer.sources = sources
    what = "line" if as_lines else "passage"
    stage(f"Reading {len(sources)} {what}{'s' if len(sources) != 1 else ''}…")

    def model_pieces(shown: list[Hit]) -> Iterator[str]:
        answer.model = models.chat_model_label(llm)
        try:
            text = ""
            messages = build_messages(asked, shown, history, as_lines, instructions)
            answer.prompt_tokens = sum(models.count_tokens(llm, m.content) + 4 for m in messages)
            for chunk in llm.stream(messages):
                if usage := chunk.usage_metadata:  # the model's own count, in its last chunk
                    answer.completion_tokens = usage["output_tokens"]
                    answer.cached_prompt_tokens = (usage.get("input_token_details") or {}).get("cache_read")
                if not chunk.content:  # servers open and close a stream with empty chunks
                    continue
                answer.completion_tokens = (answer.completion_tokens or 0) + 1  # a streamed chunk is a token, until the model counts
                if answer.first_token_seconds is None:
                    answer.first_token_seconds = time.perf_counter() - t0
                    log.info("First token after %.2fs", answer.first_token_seconds)
                    stage("Writing…")
                yield chunk.content
                text += chunk.content
                if runs_away(text):
                    log.warning("The reply repeats itself; stopped after %d characters", len(text))
                    return
        except Exception as err:  # any transport or server failure mid-answer
            raise model_failure(err, llm) from err

    def pieces() -> Iterator[str]:
        """The reply as it comes; a reply that may turn out to be a bare refusal is held back until it is clear."""
        reply, held = model_pieces(sources), ""
        for piece in reply:
            held += piece
            if not could_be_refusal(held):
                yield held
                yield from reply
                return
        # What follows "The documents do not say." is not an answer: the 1.5B model goes on to guess
        # (a calculation with figures it just said it could not find).
        yield prompts.REFUSAL if is_refusal(held) else held

    def with_worked_out(reply: Iterator[str]) -> Iterator[str]:
        """The reply, then the result of the calculation it wrote, worked out in code (calc.py)."""
        text = ""
        for piece in reply:
            text += piece
            yield piece
        # A reply that says the documents lack the answer and then calculates anyway (the 1.5B model does)
        # has refused: its figures were ones it could not find.
        if is_refusal(text):
            return
        if line := calc.worked_out(text, [h.text for h in answer.sources], asked):
            yield f"\n\n{line}"

    return AnswerStream(with_worked_out(pieces()), finish, answer.evidence)


def whole_document_answer(kind: str, docs: list, question: str, retriever: Retriever, llm: BaseChatModel,
                          answer: Answer, stage: Callable[[str], None], t0: float) -> AnswerStream:
    """A question about a whole document, answered section by section from its outline (overview.py);
    each section line is checked against the text read for it, like any answer."""

    def pieces() -> Iterator[str]:
        stage("Reading the document's outline…")
        for piece in overview.read_document(kind, docs, retriever, llm, question, stage):
            if isinstance(piece, overview.Reading):
                answer.sources = piece.sources
                continue
            if answer.first_token_seconds is None:
                answer.first_token_seconds = time.perf_counter() - t0
            yield piece
        if kind == "summary":
            answer.model = models.chat_model_label(llm)

    def finish(text: str) -> Answer:
        checked(answer, text, question, t0)
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
