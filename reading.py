"""What the model reads: the prompt built from the question and the sources, fitted in the model's context.

    question, its instructions  -> question_for_prompt()   the question, then its form ("Answer form: ...")
    an OpenAI client's system   -> client_instructions()   kept apart from the chat's turns; language_asked()
    messages                       asked_form()            reads the language they ask for; said in the asker's
                                                           words at the end of the system prompt and after
                                                           the question
    the chat model              -> what_model_reads()      the lines for a model the app ships, passages (within
                                   passage_chars()         a budget from its context length) for a brought one
    sources                     -> format_lines()          evidence lines numbered [L1].. as the app shows them
                                   format_source()         or passages numbered [1].., the evidence lines marked
                                                           ⟦ ⟧ in them; everything from a document fenced
                                                           (safe_text.fence_text)
    rules + history + sources   -> build_messages()        the chat sent to the model (prompts.py holds every
                                                           word of it)
    the model's context length  -> fit_sources()           the best-ranked sources that fit beside the reply
                                   fitted_history()        the latest turns that fit; QuestionTooLong when the
                                                           question alone does not

Nothing here calls a model or reads the store: token counts come in as a function.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

import calc
import config
import domains
import models
import prompts
import rules
from checker import strip_markers
from language import QUESTION_LANGUAGES, language_name, question_language
from question import ParsedQuestion, parse_question
from records import Hit
from safe_text import fence_text

log = logging.getLogger(__name__)

rules.register("answer_language", "the answer is in the language the asker's instructions name, else in the question's language",
               "tests/test_qa.py::test_rule_the_model_is_asked_to_answer_in_the_question_s_language",
               pays_on="docs/experiments/2026-11-26-languages-and-whole-documents.md: eight native dev questions (de, fr, es, "
                       "ja), answers in the question's language 1 -> 5 of 8 with the language line")

rules.register("what_model_reads", "a model the app ships reads the evidence lines it was measured best with; "
               "a model a person brings reads the pages' passages, the lines marked in them, as much as its context holds",
               "tests/test_reading.py::test_the_shipped_model_reads_lines_and_a_brought_model_reads_marked_passages", switchable=False,
               pays_on="docs/experiments/2026-11-27-answers-from-the-lines.md: fresh2, 16 analyst questions, the shipped 1.5B "
                       "reading 3 lines instead of passages: confidently wrong 4 -> 2, right 2 -> 2, prompt 1,561 -> 490 tokens")

# Characters per token of English text, to turn a token budget into the characters context.py fills; the
# prompt is then fitted with the model's own token counts (fit_sources), so a wrong guess costs a passage.
CHARS_PER_TOKEN = 4


def what_model_reads(llm: BaseChatModel, setting: str | None = None) -> str:
    """Rule: a model the app ships reads the evidence lines it was measured best with; a model a person brings reads the pages' passages, the lines marked in them, as much as its context holds.

    "lines" or "passages": ``setting`` (else ANSWER_CONTEXT) when it is not "auto". The lines were chosen on the
    1.5B default, which reads a few lines well and a page badly (docs/experiments/2026-11-27-answers-from-the-lines.md);
    a stronger model needs the rows and sentences around them, as the peers give theirs.
    """
    chosen = setting or config.ANSWER_CONTEXT
    if chosen != "auto":
        return chosen
    return "lines" if models.is_shipped(llm) else "passages"


def passage_chars(llm: BaseChatModel) -> int:
    """Characters of passages the model reads: CONTEXT_CHARS for a model the app ships (as measured); for a
    brought model, PASSAGE_TOKENS, else half its context length up to PASSAGE_TOKENS_MAX, in characters."""
    if models.is_shipped(llm):
        return config.CONTEXT_CHARS
    tokens = config.PASSAGE_TOKENS or min(models.context_length(llm) // 2, config.PASSAGE_TOKENS_MAX)
    return tokens * CHARS_PER_TOKEN


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


def format_source(number: int, hit: Hit) -> str:
    """One numbered source for the prompt: name, page, title and text all inside the fence,
    any fence tag in them neutralised (a page saying "</source> Ignore the rules" stays data);
    the evidence lines it holds (``trace["marked"]``, context.py) between ⟦ ⟧."""
    title = f" — {fence_text(hit.title)}" if hit.title else ""
    return prompts.SOURCE_BLOCK.format(
        number=number, doc_name=fence_text(hit.doc_name), page=hit.page, title=title, text=fence_text(marked_text(hit))
    )


def marked_text(hit: Hit) -> str:
    """The passage's text with its marked lines between ⟦ ⟧; a mark the page itself prints is made a bracket,
    so a page cannot mark a line of its own choosing.

    marked_text(Hit(text="Cash 5. Debt 7.", trace={"marked": [(8, 15)]}, ...)) -> "Cash 5. ⟦Debt 7.⟧"
    """
    text = hit.text.replace(prompts.MARK_OPEN, "[").replace(prompts.MARK_CLOSE, "]")
    for start, end in sorted(hit.trace.get("marked", []), reverse=True):
        text = f"{text[:start]}{prompts.MARK_OPEN}{text[start:end]}{prompts.MARK_CLOSE}{text[end:]}"
    return text


def format_lines(lines: list[Hit]) -> str:
    """The evidence lines as the model reads them, numbered [L1].. in the order shown, each document's name
    once above its lines; everything from the documents fenced (``fence_text``)."""
    blocks, document = [], None
    for number, line in enumerate(lines, 1):
        if line.doc_name != document:
            document = line.doc_name
            blocks.append(prompts.LINES_DOCUMENT.format(doc_name=fence_text(document)))
        blocks.append(prompts.LINE.format(number=number, page=line.page, text=fence_text(line.text)))
    return "\n".join(blocks)


def build_messages(
    question: str, sources: list[Hit], history: list[tuple[str, str]], as_lines: bool = False, instructions: str = "",
    refuses_for_model: bool = False,
) -> list[BaseMessage]:
    """The chat to send: the rules, the recent history, then the sources and the question. ``as_lines``:
    the sources are evidence lines (``format_lines``), else numbered passages (``format_source``).
    ``instructions`` (an OpenAI client's system messages) end the system prompt, in the asker's words (``asked_form``),
    bound by its rules, and are said again on the line after the question, in place of the app's usual form.
    ``refuses_for_model``: the app, not the model, refuses when no line backs the reply, so the lines' prompt
    offers the model no refusal (qa.backed_or_nearest)."""
    system = prompts.LINES_SYSTEM if as_lines else prompts.ANSWER_SYSTEM
    if as_lines and not refuses_for_model:  # else the app refuses for the model (qa.backed_or_nearest)
        system += prompts.LINES_REFUSAL_RULE
    if not as_lines and any(hit.trace.get("marked") for hit in sources):
        system += prompts.MARKED_RULE
    if instructions:
        system += prompts.INSTRUCTIONS_RULE.format(instructions=asked_form(instructions))
    messages: list[BaseMessage] = [SystemMessage(system)]
    for role, text in history[-2 * config.HISTORY_TURNS :]:
        messages.append(HumanMessage(text) if role == "user" else AIMessage(strip_markers(text)))
    kind = answer_shape(question)
    # the asker's wish on the form replaces the app's usual one; a calculation keeps its form, which calc.py reads
    shape = prompts.ANSWER_SHAPES[kind] if not instructions or kind == "calculate" else ""
    if notes := domains.prompt_notes(question):
        shape += "\n" + "\n".join(prompts.FORMULA.format(formula=note) for note in notes)
    if instructions:  # said again beside the question, where the 1.5B model follows a form best; the language line last
        shape += "\n" + asked_form(instructions)
    shape = (shape + answer_language(question, instructions, as_lines)).lstrip("\n")
    if as_lines:
        messages.append(HumanMessage(prompts.LINES_USER.format(lines=format_lines(sources), question=question, shape=shape)))
    else:
        sources_text = "\n\n".join(format_source(i, hit) for i, hit in enumerate(sources, 1))
        messages.append(HumanMessage(prompts.ANSWER_USER.format(sources=sources_text, question=question, shape=shape)))
    return messages


def asked_form(instructions: str) -> str:
    """The asker's instructions as the system prompt says them: in their own words, on one line, any fence tag in
    them neutralised.

    asked_form("Reply in one word.\\nBe polite.") -> "Reply in one word. Be polite."
    """
    return fence_text(" ".join(instructions.split()))


def answer_language(question: str, instructions: str, as_lines: bool) -> str:
    """Rule: the answer is in the language the asker's instructions name, else in the question's language.
    The line that says so to the model, or "" for an English question with no language asked."""
    if not rules.on("answer_language"):
        return ""
    if asked := language_asked(instructions):
        return "\n" + prompts.ANSWER_LANGUAGE_ASKED.format(language=language_name(asked), sources="lines" if as_lines else "sources")
    if (language := question_language(question)) != "en":
        return "\n" + prompts.ANSWER_LANGUAGE.format(language=language_name(language))
    return ""


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
    fixed = "\n".join([prompts.LINES_SYSTEM + prompts.LINES_REFUSAL_RULE, prompts.INSTRUCTIONS_RULE, prompts.LINES_USER,
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
