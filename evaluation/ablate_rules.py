"""Ablate the citation checker's rules, one at a time, on judged answer sets.

    python -m evaluation.ablate_rules --sets fresh821 [dev761 ...] [--rules all]

For each rule of ``RULES`` below (and the whole checker as it is), re-check the stored answers of each
set with that rule switched off and score the ✓ marks against the set's hand judgments: ✓ precision
(of the sentence-passage pairs given a ✓, the share a person judged backed) and ✓ recall (of the
sentences a person judged backed by a passage shown, the share given a ✓ on such a passage). A rule
earns its place on a set when switching it off lowers precision or recall there.

Data flow: evaluation/citation_answers_<set>.jsonl (the answers, the passages shown) + every
citation_judgments_*.jsonl (a pair is judged once, in the first set that showed it) -> eval_answers.citation_pairs / tick_recall
under each ablation -> one table row per (rule, set). No model is called.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path


import calc
import checker
import config
from evaluation import eval_answers

HERE = Path(__file__).resolve().parent
log = logging.getLogger(__name__)
_NEVER = re.compile(r"(?!)")

# Rule -> (module, attribute, what stands in for it when it is switched off). A rule that forbids a ✓
# is switched off by letting everything through; a rule that allows one (an exemption) by allowing nothing.
RULES = {
    # what a passage must hold
    "specifics": (checker, "missing_specifics", lambda claim, passage, question="": set()),
    "figure_in_place": (checker, "misplaced_figures", lambda claim, passage, question="": set()),
    "financial_year_rows": (checker, "_only_in_other_years", lambda figure, asked, rows: False),
    "cell_per_line_label": (checker, "under_another_label", lambda claim, passage, question="": False),
    "row_qualifier": (checker, "_lacks_said_qualifier", lambda label, others, said: False),
    "two_sided_row": (checker, "names_one_side", lambda label_line, said: False),
    "lookup_key_row": (checker, "beside_another_key", lambda claim, passage, question: False),
    "denial": (checker, "denies_what_passage_does_not", lambda claim, passage: False),
    "quotation": (checker, "quotes_what_passage_does_not", lambda claim, passage: False),
    "premise_names": (checker, "strangers", lambda question, sources: set()),
    # what need not be on it
    "subject_exempt": (checker, "subject_figures", lambda question: set()),
    "shared_references": (checker, "shared_references", lambda claim, passage: set()),
    "printed_page_number": (checker, "without_page_number", lambda passage, page: passage),
    "iso_dates": (checker, "spelled_dates", lambda claim, passage: claim),
    "source_words": (checker, "_SOURCE_WORDS", frozenset()),
    "restated_question": (checker, "answer_beside_question", lambda claim, passage, question: False),
    "no_side_by_side_for_ranks": (checker, "_NOT_SIDE_BY_SIDE", _NEVER),
    "no_side_by_side_for_colours": (checker, "_NOT_SIDE_BY_SIDE", re.compile(checker._NOT_SIDE_BY_SIDE.pattern.replace("|colou?rs?", ""), re.I)),
    "page_by_position": (checker, "_PAGE_BY_POSITION", _NEVER),
    # how sentences are read
    "abbreviations": (checker, "_ABBREVIATIONS", set()),
    "arithmetic_lines_unjudged": (calc, "is_arithmetic_line", lambda line: False),
    # the measure itself (no rule: the threshold every ✓ rests on)
    "overlap_measure": (config, "SUPPORT_MIN_OVERLAP", float("inf")),
}


# The rules that withhold a ✓ (the rest let one through where overlap alone would not, or read the text)
FORBIDDING = ["specifics", "figure_in_place", "financial_year_rows", "cell_per_line_label", "row_qualifier", "two_sided_row",
              "lookup_key_row", "denial", "quotation", "premise_names", "no_side_by_side_for_ranks"]


@contextlib.contextmanager
def switched_off(*rules: str) -> Iterator[None]:
    """Within the block, each named rule is replaced by its stand-in (``RULES``); restored after."""
    saved = [(module, name, getattr(module, name)) for module, name, _ in (RULES[r] for r in rules)]
    try:
        for rule in rules:
            module, name, stand_in = RULES[rule]
            setattr(module, name, stand_in)
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def score(rows: list[dict], labels: dict[str, bool]) -> dict:
    """✓ precision and recall of today's checker (with whatever is switched off) on one set."""
    pairs = eval_answers.citation_pairs(rows)
    judged_ticks = [p for p in pairs if p["verified"] and eval_answers.pair_key(p) in labels]
    right = sum(labels[eval_answers.pair_key(p)] for p in judged_ticks)
    recall = eval_answers.tick_recall(rows, labels)
    backed, ticked = recall["backed_sentences"], round((recall["recall_verified"] or 0) * recall["backed_sentences"])
    return {"precision": f"{right}/{len(judged_ticks)}", "recall": f"{ticked}/{backed}",
            "p": right / len(judged_ticks) if judged_ticks else None, "r": ticked / backed if backed else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", nargs="+", required=True, help="set names: citation_answers_<name>.jsonl in evaluation/")
    parser.add_argument("--rules", nargs="*", help="only these rules (default: every rule of RULES)")
    parser.add_argument("--out", type=Path, help="write the table as JSON lines here too")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    # a pair is judged once, in the first set that showed it: every set is scored against all judgments
    labels = {key: verdict for path in sorted(HERE.glob("citation_judgments*.jsonl")) for key, verdict in eval_answers.load_labels(path).items()}
    sets = {name: (eval_answers.read_rows(HERE / f"citation_answers_{name}.jsonl"), labels) for name in args.sets}
    rules = args.rules or list(RULES)
    table = []
    forbidding = [rule for rule in rules if rule in FORBIDDING]
    for rule in [None] + rules + (["every rule that forbids a ✓"] if len(forbidding) > 1 else []):
        off = forbidding if rule == "every rule that forbids a ✓" else [rule] if rule else []
        with switched_off(*off):
            for name, (rows, labels) in sets.items():
                row = {"without": rule or "(none: the checker as it is)", "set": name, **score(rows, labels)}
                table.append(row)
                print(json.dumps(row, ensure_ascii=False), flush=True)
    if args.out:
        args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
