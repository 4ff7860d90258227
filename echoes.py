"""The prompt kept out of the reply: a reply line that opens by copying the prompt's scaffolding loses that opening.

A small model copies what it reads: asked "Reply in one word.", the 1.5B default answered "The asker's
instructions on form and language: reply in one word." (docs/experiments/2026-11-28-instructions-obeyed.md).
No header, tag or rule of the prompt, nor the asker's instruction itself, belongs in an answer.

    prompt_openings(instructions) -> the openings a reply line may not copy: each fixed line of the prompts the
                                     answering model reads (prompts.py; a field ends it), its fence tags, and each
                                     sentence of the asker's instructions, read as words (case, punctuation and
                                     spacing aside: near-verbatim is verbatim)
    without_echoes(reply, openings) -> the reply as it streams, each line's copied openings cut, a line left with
                                     no word dropped; a line is held back only while it could still be a copy

Only a line's opening is read: the prompt's lines are what a model copies, whole, at the start of a line.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator

import prompts
import rules

log = logging.getLogger(__name__)

rules.register("prompt_not_echoed", "a reply line that opens by copying a line of the prompt or the asker's instructions "
               "loses that opening, and a line left with no word is dropped",
               "tests/test_echoes.py::test_rule_a_copied_header_and_instruction_are_cut_from_the_reply",
               pays_on="docs/experiments/2026-11-28-instructions-obeyed.md: a behaviour: the issue's reply that opened by copying"
                       " the prompt's header; 0 of 12 echoes before and after on its 12 pairs, so only its unit test shows it")

# What a line is read as: its words and the marks that make a header or a tag ("Question:", "</lines>")
_TOKEN = re.compile(r"[^\W_]+|[:<>/]")
_FIELD = re.compile(r"\{[^{}]*\}")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

# The prompts the answering model reads (reading.build_messages): every line of them is scaffolding.
ANSWER_PROMPTS = (prompts.LINES_SYSTEM, prompts.ANSWER_SYSTEM, prompts.MARKED_RULE, prompts.INSTRUCTIONS_RULE,
                  prompts.LINES_USER, prompts.ANSWER_USER, prompts.ANSWER_FORM, prompts.FORMULA, prompts.ANSWER_LANGUAGE,
                  prompts.ANSWER_LANGUAGE_ASKED, prompts.SOURCE_BLOCK, prompts.LINES_DOCUMENT, *prompts.ANSWER_SHAPES.values())

# The app's own replies, which the rules quote: saying them is an answer, never an echo.
OWN_REPLIES = (prompts.REFUSAL, prompts.NOT_FOUND)

Opening = tuple[str, ...]


def tokens(text: str) -> list[re.Match]:
    """tokens("The asker's: <x>") reads "the", "asker", "s", ":", "<", "x", ">" (lower-cased by ``words``)."""
    return list(_TOKEN.finditer(text))


def words(text: str) -> Opening:
    """words("Question: When?") -> ("question", ":", "when")"""
    return tuple(m.group(0).lower() for m in tokens(text))


def is_opening(opening: Opening) -> bool:
    """Long enough that no answer starts so by chance: two words, or one with its header colon ("Question:")."""
    said = [w for w in opening if w not in ":<>/"]
    return len(said) >= 2 or (len(said) == 1 and ":" in opening) or ("<" in opening and ">" in opening)


def fixed_openings(template: str) -> Iterator[str]:
    """What a line copied from a prompt template may open with: the fixed text of each of its lines (a field ends
    it, and the text after a field starts anew), each of its sentences alone and each run of them from its start.

    list(fixed_openings("Question: {q}")) -> ["Question:"]
    list(fixed_openings("1. Use facts. Cite.")) -> ["1.", "1. Use facts.", "Use facts.", "1. Use facts. Cite.", "Cite."]
    """
    for line in template.splitlines():
        for part in _FIELD.split(line):
            sentences = [s for s in _SENTENCE_END.split(part.strip()) if s]
            for end, sentence in enumerate(sentences, 1):
                yield " ".join(sentences[:end])
                if end > 1:
                    yield sentence


def prompt_openings(instructions: str = "") -> frozenset[Opening]:
    """The openings a reply line may not copy: each fixed line of the answering prompts, and each sentence of
    the asker's ``instructions`` of three words or more (a shorter one could be how an answer starts)."""
    found = {words(part) for template in ANSWER_PROMPTS for part in fixed_openings(template)}
    found |= {words(sentence) for sentence in _SENTENCE_END.split(instructions) if len(words(sentence)) >= 3}
    # an opening the app's own replies start with would cut them
    return frozenset(o for o in found if is_opening(o) and not any(words(reply)[: len(o)] == o for reply in OWN_REPLIES))


def copied_opening(line: str, openings: Iterable[Opening]) -> int:
    """Where the longest opening ``line`` starts with ends in it (0: none), the spaces after it included."""
    read, longest = tokens(line), 0
    said = tuple(m.group(0).lower() for m in read)
    for opening in openings:
        if said[: len(opening)] == opening:
            longest = max(longest, read[len(opening) - 1].end())
    if not longest:
        return 0
    return len(line) - len(line[longest:].lstrip(" \t.:,;-"))


def cleaned(line: str, openings: frozenset[Opening]) -> str | None:
    """``line`` without the openings it copies, one after the other ("Header: the instruction." loses both);
    None when no word is left."""
    rest = line
    while cut := copied_opening(rest, openings):
        rest = rest[cut:]
    if rest is line:
        return line
    log.info("Cut a copy of the prompt from a line of the reply")
    return rest if any(m.group(0) not in ":<>/" for m in tokens(rest)) else None


def could_become_copy(line: str, openings: frozenset[Opening]) -> bool:
    """Could ``line``, still being written, turn out to open with a copy (its words so far start an opening,
    or an opening is already there)?"""
    said = words(line)
    if not said:
        return True
    *whole, last = said  # the last word may be cut mid-way ("Que" of "Question:")
    return any(said[: len(o)] == o or (len(said) <= len(o) and o[: len(whole)] == tuple(whole) and o[len(whole)].startswith(last))
               for o in openings)


@rules.switch("prompt_not_echoed", stand_in=None)
def without_echoes(reply: Iterable[str], openings: frozenset[Opening]) -> Iterator[str] | None:
    """Rule: a reply line that opens by copying a line of the prompt or the asker's instructions loses that opening, and a line left with no word is dropped.

    The reply's pieces as they come; a line is held back only while it could still be a copy."""
    return _filtered(reply, openings)


def _filtered(reply: Iterable[str], openings: frozenset[Opening]) -> Iterator[str]:
    line, passing = "", False  # the line being written, and whether it is known to copy nothing
    for piece in reply:
        for part in re.split(r"(\n)", piece):
            if part == "\n":
                if not passing and (kept := cleaned(line, openings)) is not None:
                    yield kept
                if passing or kept is not None:
                    yield "\n"
                line, passing = "", False
            elif passing:
                yield part
            elif part:
                line += part
                if not could_become_copy(line, openings):
                    passing = True
                    yield line
    if not passing and line and (kept := cleaned(line, openings)) is not None:
        yield kept


def echo_free(reply: Iterable[str], openings: frozenset[Opening]) -> Iterator[str]:
    """``without_echoes`` where the rule is in force, else the reply as it is (the lab's switch)."""
    filtered = without_echoes(reply, openings)
    return iter(reply) if filtered is None else filtered
