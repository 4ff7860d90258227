"""Ablate the citation checker's rules, one at a time, on judged answer sets.

    python -m evaluation.ablate_rules --sets fresh_mm [dev761 ...] [--rules denial quotation ...]
    python -m evaluation.ablate_rules --list

For each rule the checker registers (``rules.REGISTRY``; and the whole checker as it is), re-check the
stored answers of each set with that rule switched off by name (``rules.off``) and score the ✓ marks
against the set's hand judgments: ✓ precision (of the sentence-passage pairs given a ✓, the share a
person judged backed) and ✓ recall (of the sentences a person judged backed by a passage shown, the
share given a ✓ on such a passage). A rule
earns its place on a set when switching it off lowers precision or recall there. Switched off, a rule
that forbids a ✓ lets everything through and an exemption grants nothing; the last row switches off
every rule that forbids a ✓ at once.

Data flow: evaluation/citation_answers_<set>.jsonl (the answers, the passages shown) + every
citation_judgments_*.jsonl (a pair is judged once, in the first set that showed it) -> eval_answers.citation_pairs / tick_recall
under each ablation -> one table row per (rule, set). No model is called.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import checker  # noqa: F401  (registers the checker's rules)
import rules
from evaluation import eval_answers

HERE = Path(__file__).resolve().parent
EVERY_FORBIDDING = "every rule that forbids a ✓"


def checker_rules() -> list[str]:
    """The rules the checker registers that can be switched off, in the order it registers them."""
    return [name for name, rule in rules.REGISTRY.items() if rule.switchable]


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
    switchable = checker_rules()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", nargs="+", help="set names: citation_answers_<name>.jsonl in evaluation/")
    parser.add_argument("--rules", nargs="*", choices=switchable, metavar="RULE", help="only these rules (default: every rule; --list names them)")
    parser.add_argument("--list", action="store_true", help="list the rules (name, principle, unit test) and stop")
    parser.add_argument("--out", type=Path, help="write the table as JSON lines here too")
    args = parser.parse_args(argv)
    if args.list:
        for name in switchable:
            rule = rules.REGISTRY[name]
            print(f"{name}{' (forbids a ✓)' if rule.forbids else ''}: {rule.principle}  [{rule.test}]")
        return 0
    if not args.sets:
        parser.error("--sets is required")
    logging.basicConfig(level=logging.WARNING)
    # a pair is judged once, in the first set that showed it: every set is scored against all judgments
    labels = {key: verdict for path in sorted(HERE.glob("citation_judgments*.jsonl")) for key, verdict in eval_answers.load_labels(path).items()}
    sets = {name: (eval_answers.read_rows(HERE / f"citation_answers_{name}.jsonl"), labels) for name in args.sets}
    chosen = args.rules or switchable
    table = []
    forbidding = [name for name in chosen if rules.REGISTRY[name].forbids]
    for rule in [None] + chosen + ([EVERY_FORBIDDING] if len(forbidding) > 1 else []):
        off = forbidding if rule == EVERY_FORBIDDING else [rule] if rule else []
        with rules.off(off):
            for name, (rows, labels) in sets.items():
                row = {"without": rule or "(none: the checker as it is)", "set": name, **score(rows, labels)}
                table.append(row)
                print(json.dumps(row, ensure_ascii=False), flush=True)
    if args.out:
        args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
