"""The prompt kept out of the reply (echoes.py): real prompt lines and the 1.5B model's own echoes, streamed in
pieces as a model streams them, come out cut; answers that copy nothing come out as they went in."""

from __future__ import annotations

import echoes
import prompts
import reading

INSTRUCTION = "Reply in one word."


def streamed(text: str, size: int = 3) -> list[str]:
    """``text`` in pieces of ``size`` characters, as a model streams its tokens."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def shown(reply: str, instructions: str = INSTRUCTION) -> str:
    return "".join(echoes.echo_free(streamed(reply), echoes.prompt_openings(instructions)))


def test_rule_a_copied_header_and_instruction_are_cut_from_the_reply():
    # the question's header and the instruction, copied by the model before (and instead of) its answer
    assert shown(f"Question: Which statement leaves a loop early in R?\n{INSTRUCTION}\nbreak [L1]") == (
        "Which statement leaves a loop early in R?\nbreak [L1]")
    assert shown("Reply in one word: break [L1]") == "break [L1]"  # near-verbatim: case and punctuation aside
    rule = prompts.LINES_SYSTEM.splitlines()[2]  # "2. After every sentence that states a fact, cite the line..."
    assert shown(f"{rule}\nThe break statement leaves a loop [L1].") == "The break statement leaves a loop [L1]."
    # the system prompt's own sentence on the asker's wish, copied with the wish itself
    said = prompts.INSTRUCTIONS_RULE.format(instructions=reading.asked_form("Answer in French only.")).strip()
    assert shown(f"{said}\nLa commande break quitte la boucle [L1].", "Answer in French only.") == (
        "La commande break quitte la boucle [L1].")


def test_an_answer_that_copies_nothing_streams_as_it_came():
    for reply in ("The break statement leaves a loop early in R [L1].",
                  "Question marks end questions [L2].\n- break [L1]\n- next [L1]",
                  prompts.REFUSAL, "The documents say the reply is in one word [L1]."):
        assert shown(reply) == reply
    # held back only while a line could still be a copy: the first pieces of a plain answer pass at once
    pieces = echoes.echo_free(iter(streamed("Break leaves the loop [L1].")), echoes.prompt_openings(INSTRUCTION))
    assert next(pieces) == "Bre"


def test_a_short_instruction_is_no_opening_and_the_refusal_is_never_cut():
    openings = echoes.prompt_openings("Be brief.")
    assert echoes.words("Be brief.") not in openings  # "Be brief" could start an answer
    assert not any(echoes.words(prompts.REFUSAL)[: len(o)] == o for o in openings)
