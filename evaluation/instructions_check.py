"""Do the asker's instructions shape the answer, and does none of the prompt show in it?

    python -m evaluation.instructions_check [--pdf input_data/pdfs/R-intro.pdf] [--model qwen2.5-coder-1.5b]
                                            [--store DIR] [--out rows.jsonl]
    python -m evaluation.instructions_check --rejudge rows.jsonl      # the judge again on kept replies

Each of PAIRS (an instruction, as an OpenAI client's system message, with a question about the sample PDF) is
asked through ``qa.ask`` with the instruction as a ("system", text) turn, exactly as /v1 hands it on, and its
reply judged by code:

- **echoed**: the reply reproduces text of the prompt: a tag of it (``<instructions>``, ``<lines>``...), or five
  words in a row of any fixed prompt text (every string of ``prompts.py``, the refusal excepted) or of the
  instruction itself;
- **followed**: the instruction's kind holds of the reply, citation markers left out (one word; the asked
  language by ``language.question_language``; two or more bulleted lines; under N words; no lower-case letter;
  one sentence by ``checker.split_sentences``);
- **refused**: the reply opens with a refusal (the model's, or the app's when nothing close was found); neither
  followed nor not;
- **broken**: nothing of an answer is left: no line with a word that echoes nothing (an empty reply, or only an echo).

One line per pair and the totals are printed; ``--out`` keeps every reply. The PDF is ingested into ``--store``
(a temp folder by default; a store that holds it already is reused). The model is the app's default embedded one
unless ``--model`` names another. Run it from the code to be measured: the judge is this file, the prompt the
code's own.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import config
import embedders
import ingest
import models
import prompts
import qa
from checker import split_sentences, strip_markers
from language import question_language
from retriever import Retriever

log = logging.getLogger("instructions_check")

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_PDF = ROOT / "input_data" / "pdfs" / "R-intro.pdf"

LOOP = "Which statement leaves a loop early in R?"
PLOT_N = 'What does type="n" do in a call to plot()?'
WHITE_BOOK = 'Which reference book is called the "White Book"?'
IS_NA = "What is the difference between is.na() and is.nan()?"
SUPERASSIGN = "What does the <<- operator do when used inside a function?"
GLM_LINKS = "Which link functions can be used with the binomial family in glm()?"
MAROVIA = "What is the population of Marovia?"  # in no document: the issue's own example

# (instruction, question, kind); kind: "one_word", "lang:fr", "bullets", "max_words:10", "uppercase", "one_sentence"
PAIRS = [
    ("Reply in one word.", LOOP, "one_word"),
    ("Reply in one word.", MAROVIA, "one_word"),
    ("Answer in French only.", PLOT_N, "lang:fr"),
    ("Answer in French only.", IS_NA, "lang:fr"),
    ("Answer in German.", SUPERASSIGN, "lang:de"),
    ("Answer in German.", LOOP, "lang:de"),
    ("Answer as a bulleted list.", GLM_LINKS, "bullets"),
    ("Answer as a bulleted list.", IS_NA, "bullets"),
    ("Answer in under 10 words.", PLOT_N, "max_words:10"),
    ("Answer in under 10 words.", SUPERASSIGN, "max_words:10"),
    ("Answer in uppercase.", WHITE_BOOK, "uppercase"),
    ("Answer in one sentence.", IS_NA, "one_sentence"),
]

_TAG = re.compile(r"</?\s*(?:instructions|lines|source|page|section)\s*>", re.I)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+\S", re.M)
ECHO_WORDS = 5  # words in a row shared with the prompt that make an echo (a shorter run can be chance)


def words_of(text: str) -> list[str]:
    """words_of("Don't copy <lines>!") -> ["don't", "copy", "lines"]"""
    return re.findall(r"[^\W_]+(?:'[^\W_]+)?", text.lower())


def runs_of(text: str, n: int = ECHO_WORDS) -> set[tuple[str, ...]]:
    """Every run of ``n`` words in a row of ``text``."""
    found = words_of(text)
    return {tuple(found[i : i + n]) for i in range(len(found) - n + 1)}


def prompt_texts() -> list[str]:
    """Every fixed text of the prompts the code sends (its ``prompts`` module), the refusal and the fixed replies
    excepted: saying those is the app's own answer, not an echo."""
    said = {prompts.REFUSAL, prompts.NOT_FOUND, prompts.GREETING_REPLY}
    texts = [value for name, value in vars(prompts).items() if name.isupper() and isinstance(value, str)]
    texts += [value for value in prompts.ANSWER_SHAPES.values()]
    for reply in said:  # the refusal is quoted in the rules: saying it is no echo of them
        texts = [text.replace(reply, " ") for text in texts]
    return [re.sub(r"\{[^{}]*\}", " ", text) for text in texts]  # a field is no fixed text


@dataclass
class Judged:
    followed: bool | None  # None: refused, so neither
    echoed: bool
    broken: bool
    refused: bool


def is_echo(reply: str, instruction: str, prompt_runs: set[tuple[str, ...]]) -> bool:
    """Does ``reply`` reproduce a tag of the prompt, or ECHO_WORDS words in a row of its fixed text or of the
    instruction?"""
    if _TAG.search(reply):
        return True
    own = runs_of(reply)
    return bool(own & prompt_runs) or bool(own & runs_of(instruction)) or (
        len(words_of(instruction)) < ECHO_WORDS and words_of(instruction) and _contains(words_of(reply), words_of(instruction)))


def _contains(words: list[str], part: list[str]) -> bool:
    """Is ``part`` a run of ``words``? (an instruction shorter than ECHO_WORDS, copied whole)"""
    return any(words[i : i + len(part)] == part for i in range(len(words) - len(part) + 1))


def follows(kind: str, answer: str) -> bool:
    """Does the answer (its citation markers left out) do what an instruction of ``kind`` asks?"""
    text = strip_markers(answer).strip()
    said = words_of(text)
    name, _, value = kind.partition(":")
    if name == "one_word":
        return len(said) == 1
    if name == "lang":
        return question_language(text) == value
    if name == "bullets":
        return len(_BULLET.findall(text)) >= 2
    if name == "max_words":
        return 0 < len(said) < int(value)
    if name == "uppercase":
        return any(c.isalpha() for c in text) and not any(c.islower() for c in text)
    if name == "one_sentence":
        return len(split_sentences(text)) == 1
    raise ValueError(f"no instruction kind {kind!r}")


def judge(reply: str, instruction: str, kind: str, prompt_runs: set[tuple[str, ...]]) -> Judged:
    """One reply judged: echoed, followed (None when refused), broken."""
    echoed = is_echo(reply, instruction, prompt_runs)
    first = strip_markers(reply.strip().split("\n")[0]).strip()
    refused = first in (prompts.REFUSAL, prompts.NOT_FOUND)  # the reply is a refusal (not an answer that ends with one)
    # what is left of an answer: the lines that echo nothing, with a word beside their citation markers
    left = [line for line in reply.splitlines() if words_of(strip_markers(line)) and not is_echo(line, instruction, prompt_runs)]
    broken = not left
    return Judged(None if refused or broken else follows(kind, reply), echoed, broken, refused)


def library(pdf: Path, store: Path) -> tuple[Retriever, str]:
    """The retriever of ``store`` with ``pdf`` in it (ingested now unless it is there), and its collection."""
    client, embedder = ingest.get_client(str(store)), embedders.get_embeddings()
    result = ingest.ingest_pdf(pdf, client, embedder)
    return Retriever(client, embedder), result.collection


def ask_all(pdf: Path, model: str, store: Path) -> list[dict]:
    """Every pair asked of ``model`` over ``pdf``: one row each (instruction, question, kind, reply)."""
    retriever, collection = library(pdf, store)
    llm = models.EmbeddedChatModel.load(model)
    rows = []
    for instruction, question, kind in PAIRS:
        answer = qa.answer_question(question, retriever, llm=llm, history=[("system", instruction)], scope=[collection])
        rows.append({"instruction": instruction, "question": question, "kind": kind, "reply": answer.text, "model": model,
                     "seconds": round(answer.seconds, 1)})
        log.warning("%d of %d asked", len(rows), len(PAIRS))
    return rows


def verdict_of(judged: Judged) -> str:
    if judged.broken:
        return "broken"
    if judged.followed is None:
        return "refused"
    return "followed" if judged.followed else "NOT followed"


def report(rows: list[dict]) -> dict:
    """Judge every row (its verdict and echo written into it), print one line each and the totals; the totals."""
    prompt_runs = set().union(*(runs_of(text) for text in prompt_texts()))
    totals = {"pairs": len(rows), "followed": 0, "not_followed": 0, "refused": 0, "echoed": 0, "broken": 0}
    for row in rows:
        judged = judge(row["reply"], row["instruction"], row["kind"], prompt_runs)
        row["verdict"], row["echoed"] = verdict_of(judged), judged.echoed
        totals[row["verdict"].lower().replace("not followed", "not_followed")] += 1
        totals["echoed"] += judged.echoed
        print(f"{row['verdict']:12} {'ECHO ' if judged.echoed else '     '} {row['instruction']!r:30} "
              f"{row['question'][:48]!r:52} -> {row['reply']!r}")
    print("\n" + "  ".join(f"{name}: {count}" for name, count in totals.items()))
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pdf", type=Path, default=SAMPLE_PDF, help="the PDF asked (default: the sample, R-intro.pdf)")
    parser.add_argument("--model", default=config.EMBEDDED_LLM, help="the embedded chat model (default: the app's default)")
    parser.add_argument("--store", type=Path, help="a store to ingest into and reuse (default: a temp folder)")
    parser.add_argument("--out", type=Path, help="write every pair's reply and verdict here (JSON lines)")
    parser.add_argument("--rejudge", type=Path, help="judge the replies of an earlier --out file again; no model is run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.rejudge:
        rows = [json.loads(line) for line in args.rejudge.read_text(encoding="utf-8").splitlines() if line.strip()]
    elif args.store:
        rows = ask_all(args.pdf, args.model, args.store)
    else:
        with tempfile.TemporaryDirectory(prefix="instructions-check-") as folder:
            rows = ask_all(args.pdf, args.model, Path(folder) / "store")
    report(rows)
    if args.out:
        args.out.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
