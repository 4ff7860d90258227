"""Score whole answers on questions with known answers, per chat model.

    python -m evaluation.eval_answers [--questions FILE] [--pdf-dir DIR] [--answerable 40] [--unanswerable 20]
                           [--models qwen2.5-coder-0.5b qwen2.5-coder-1.5b] [--out rows.jsonl]
                           [--dev [--docs PDF...] [--seed N]] [--context-only]
                           [--evidence Table] [--extractor NAME]
    python -m evaluation.eval_answers --backend openai [--model NAME] [--base-url URL] [...]   (one model on a server)
    python -m evaluation.eval_answers --recheck rows.jsonl [--labels judgments.jsonl]
    python -m evaluation.eval_answers --replay rows.jsonl... [--in-context] [--models ...] [--out replayed.jsonl]
    python -m evaluation.eval_answers --regate rows.jsonl... [--verdicts verdicts.jsonl] [--rules-off NAME...]
        (no LLM: the stored replies, each judged once, that today's checker would show: qa.backed_or_nearest)

Data flow: a fixed, seeded sample of answerable and unanswerable questions ->
ingest their PDFs (cached in the evaluation store) -> for each model, qa.ask
scoped to the question's document -> one JSON row per answer (written as it
finishes, so an interrupted run still reports) -> a table per model.

A model is any the app can answer with, named by its choice id (``models.get_chat_model``):
``--models`` takes embedded names (the default: both embedded models) or choice ids
("openai:qwen2.5-7b"); ``--backend embedded|ollama|openai --model NAME`` measures one model
(openai: the server at OPENAI_BASE_URL, or ``--base-url``, with OPENAI_API_KEY), so a model
on a GPU server is judged by the same judge on the same questions. Each row names its model
("model", the choice id) and "model_label" (as the app shows it); "written_by" is the model
that wrote that answer's text, None when no model did (a refusal before the model, a result
worked out in code).

Beside correct and refused answers, each model's table gives evidence@3 of the lines the answer
showed (``answer.evidence``), judged by ``eval_retrieval.evidence_shown`` over the answerable
questions ``eval_retrieval.evidence_countable`` admits (see eval_retrieval's docstring for the two
rules); "evidence shown when refused", the same share over the refused ones among them (the lines
then stand as the answer); and the median seconds from question to evidence lines and to the
model's first token (answers the model was not asked for have no first token and are left out).

How answers are judged (deliberately simple; a person would accept more
paraphrases): lower-case, drop punctuation and every separator between digits
("3,02,16,492" = "3216492"); an answerable question is correct when every item
of the gold answer (a list answer is split into its items) appears in the
answer text, a gold item of three or more words counting when at least 80% of
its words appear; an unanswerable one is correct when the answer is a refusal. Citation precision is reported
two ways: the share of shown citations our checker verified, and the stricter
share that point to one of the question's gold pages. "Answer in context" is the same
match applied to the text the model was given instead of its reply; its ceiling, "answer on the gold
pages" (the same match on the gold pages' whole text), is reported beside it, because most bench answers
are computed (a gap, a sum, a count) and printed nowhere. ``--context-only``
reports it without any LLM, for each page's best chunk and for ``context.choose_context``.
``--dev`` samples from the questions the default sample leaves out, to design rules on.
``--replay`` re-asks the passages stored with earlier answers (no store, no search) under today's
prompts, so a change of prompt is compared with the stored answers on the very same text; both sides are
judged by today's judge.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import calc
import checker
import config
import context
import embedders
import eval_retrieval
import ingest
import models
import prompts
import qa
import reading
import rules
from evaluation.bench import add_model_flags, as_choice, choice_of, model_choices
from question import parse_question
from records import Hit
from retriever import Retriever

BENCH = config.BASE_DIR.parent / "shared" / "bench" / "mmlongbench" / "questions.jsonl"
LABELS = config.BASE_DIR / "evaluation" / "citation_judgments.jsonl"
EVAL_SAMPLE = (40, 20)  # answerable, unanswerable: the default sample, held out from designing rules


def normalise(text: str) -> str:
    """normalise("$3,200 Tonnes!") -> "3200 tonnes" """
    text = re.sub(r"(?<=\d)[, ](?=\d)", "", str(text).lower())
    return " ".join(re.sub(r"[^\w.%-]+", " ", text).replace(". ", " ").split()).strip(" .")


_GLOSS = re.compile(r"(?<=\w)\s*\([^()]*\)$")  # "Sportswear (sports-inspired lifestyle products)": an answer need not repeat it


def gold_items(answer: str) -> list[str]:
    """gold_items("['2006', '2007']") -> ["2006", "2007"]; gold_items("Less well-off") -> ["less well-off"];
    a list item's gloss in brackets is dropped: gold_items("['Football (Soccer)']") -> ["football"]"""
    text = str(answer).strip()
    if text.startswith("[") and text.endswith("]"):
        items = [_GLOSS.sub("", i.strip(" '\"")) for i in text[1:-1].split(",")]
        return [normalise(i) for i in items if i.strip(" '\"")]
    return [normalise(text)]


def item_found(item: str, said: str) -> bool:
    """item_found("highest paid person's opinion", "hlghest paid person's opinion") -> True; item_found("12", "1250") -> False"""
    words = item.split()
    if len(words) >= 3:
        return sum(w in said.split() for w in words) / len(words) >= 0.8
    # whole words and figures only: a gold "12" is not found in "1250", nor "3.4" in "3.46"
    return re.search(rf"(?<![\w.]){re.escape(item)}(?!\w|\.\d)", said) is not None


def is_correct(question: dict, answer_text: str, refused: bool) -> bool:
    if not question["pages"]:
        return refused
    # A worked-out result is the answer, not the figures it came from; a marker "[6]" is not the figure 6.
    said = normalise(calc.result_of(answer_text) or re.sub(r"\[L?\d+\]", " ", answer_text))
    return not refused and all(item_found(item, said) for item in gold_items(question["answer"]))


def answer_in_context(question: dict, passages: list[str]) -> bool:
    """Is the gold answer (every item, matched as ``is_correct`` matches it) in the text given to the model?"""
    said = normalise("\n".join(passages))
    return bool(question["pages"]) and all(item_found(item, said) for item in gold_items(question["answer"]))


def is_text_or_table(category: str) -> bool:
    """The evidence kinds a text-only model can answer from: prose, layout text and tables (not charts, figures)."""
    return category.startswith(("Pure-text", "Generalized-text", "Table"))


def sample(questions: list[dict], answerable: int, unanswerable: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    yes = [q for q in questions if q["pages"]]
    no = [q for q in questions if not q["pages"]]
    return rng.sample(yes, min(answerable, len(yes))) + rng.sample(no, min(unanswerable, len(no)))


def dev_questions(questions: list[dict]) -> list[dict]:
    """The questions the default evaluation sample leaves out: rules are designed on these, the sample stays held out."""
    held_out = {q["question"] for q in sample(questions, *EVAL_SAMPLE)}
    return [q for q in questions if q["question"] not in held_out]


def share(flags: list[bool]) -> str:
    """share([True, False, True]) -> "2/3 (0.67)" """
    return f"{sum(flags)}/{len(flags)} ({sum(flags) / len(flags):.2f})" if flags else "0/0"


def summarise(rows: list[dict]) -> dict:
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    text_table = [r for r in answerable if is_text_or_table(r.get("category", ""))]
    on_page = [r for r in text_table if r.get("answer_on_gold_pages")]
    shown = [c for r in rows for c in r["citations"]]
    judged = [r for r in answerable if r.get("evidence") is not None]
    return {
        "n": len(rows),
        "correct_answerable": f"{sum(r['correct'] for r in answerable)}/{len(answerable)}",
        "honest_refusals": f"{sum(r['correct'] for r in unanswerable)}/{len(unanswerable)}",
        "refused_answerable": share([r["refused"] for r in answerable]),
        "page_hit@k": share([r["page_hit"] for r in answerable if "page_hit" in r]),
        "answer_in_context": share([r["answer_in_context"] for r in answerable if "answer_in_context" in r]),
        "text_table_answer_in_context": share([r["answer_in_context"] for r in text_table if "answer_in_context" in r]),
        # the ceiling of the line above: most gold answers are computed (a sum, a gap, a count), not printed on the page
        "text_table_answer_on_gold_pages": share([r["answer_on_gold_pages"] for r in text_table if "answer_on_gold_pages" in r]),
        "text_table_answer_in_context_where_on_page": share([r["answer_in_context"] for r in on_page]),
        "text_table_correct": share([r["correct"] for r in text_table]),
        "text_table_correct_where_on_page": share([r["correct"] for r in on_page]),
        "citations_shown": len(shown),
        "citation_verified_share": round(sum(c["verified"] for c in shown) / len(shown), 3) if shown else None,
        "citation_gold_page_share": round(sum(c["gold_page"] for c in shown) / len(shown), 3) if shown else None,
        "median_seconds": round(statistics.median(r["seconds"] for r in rows), 1) if rows else None,
        # the lines shown with the answer (rows stored before evidence was shown have no "evidence")
        f"evidence@{eval_retrieval.EVIDENCE_AT}": share([bool(r["evidence"]) for r in judged]),
        "evidence_shown_when_refused": share([bool(r["evidence"]) for r in judged if r["refused"]]),
        "median_evidence_seconds": median([r.get("evidence_seconds") for r in rows], 2),
        # older rows wrote 0.0 where the model was never asked: left out as None is
        "median_first_token_seconds": median([r.get("first_token_seconds") or None for r in rows], 1),
        "median_prompt_tokens": median([r.get("prompt_tokens") for r in rows], 0),
        # of those, the prefix the model reused from its prompt cache (the answer instructions) instead of reading it
        "median_cached_prompt_tokens": median([r.get("cached_prompt_tokens") for r in rows], 0),
        "wrong_answerable": share([not r["refused"] and not r["correct"] for r in answerable]),
        "answer_read_when_refused": share([bool(r["evidence_read"]) for r in answerable if r["refused"] and r.get("evidence_read") is not None]),
        "read_in_code": share([r.get("written_by") is None and not r["refused"] for r in answerable]),
    }


@contextlib.contextmanager
def asked_with(context: str | None) -> Iterator[None]:
    """Within the block, the checker as an answer that reads ``context`` needs it ("passages": as before
    issue 47, no cell read in code either; "lines" or None: as it is). What the model reads is handed to
    ``qa.ask`` itself (``reads=``)."""
    with rules.off({"cell_read_in_code"} if context == "passages" else set()):
        yield


def median(values: list[float | None], digits: int) -> float | None:
    """median([0.5, None, 1.5, 1.0], 2) -> 1.0 (None values left out; None when none is left)"""
    present = [v for v in values if v is not None]
    return round(statistics.median(present), digits) if present else None


# -----------------------------------------------------------------------------
# Citations judged by hand: re-check stored answers under the current settings


def rows_hits(row: dict) -> list[Hit]:
    """The passages a stored answer was checked against, rebuilt as Hits ([1] first)."""
    return [Hit(id=str(s["n"]), collection="c", doc_name=row.get("doc", "doc"), page=s["page"], start=0, end=len(s["text"]),
                text=s["text"],
                trace={**({"semantic_score": s["similarity"]} if s.get("similarity") is not None else {}),
                       **{key: s[key] for key in ("kind", "label") if s.get(key)}})  # a line read as a row keeps its label
            for s in row["sources"]]


def citation_pairs(rows: list[dict]) -> list[dict]:
    """Every (sentence, cited passage) an answer would show, re-checked with today's settings."""
    pairs = []
    for row in rows:
        hits = rows_hits(row)
        for sentence in checker.verify_answer(row["answer"], hits, parse_question(row["question"])):
            for c in sentence.citations:
                pairs.append({"model": row["model"], "question": row["question"], "sentence": checker.strip_markers(sentence.text),
                              "page": c.page, **line_of(hits[c.number - 1]), "inferred": c.inferred, "verified": c.verified,
                              "gold_page": row["sources"][c.number - 1]["gold_page"], "passage": hits[c.number - 1].text})
    return pairs


def judging_pairs(rows: list[dict]) -> list[dict]:
    """Every (sentence, passage shown) of each answer, cited or not, for a person to judge: precision
    needs the cited pairs, recall also needs to know which uncited passages back a sentence."""
    pairs = []
    for row in rows:
        hits = rows_hits(row)
        for sentence in checker.verify_answer(row["answer"], hits, parse_question(row["question"])):
            if sentence.supported is None:  # nothing to check (a refusal, a heading)
                continue
            shown = {c.number: c for c in sentence.citations}
            for number, (hit, source) in enumerate(zip(hits, row["sources"]), 1):
                cited = shown.get(number)
                pairs.append({"model": row["model"], "question": row["question"], "sentence": checker.strip_markers(sentence.text),
                              "page": hit.page, **line_of(hit), "cited": cited is not None, "verified": bool(cited and cited.verified),
                              "gold_page": source["gold_page"], "passage": hit.text})
    return pairs


def tick_recall(rows: list[dict], labels: dict[str, bool]) -> dict:
    """Of the sentences a person judged backed by one of the passages shown, the share the checker
    gives a ✓ on such a passage (sentences no judgment covers are left out)."""
    backed = ticked = 0
    for row in rows:
        hits = rows_hits(row)
        for sentence in checker.verify_answer(row["answer"], hits, parse_question(row["question"])):
            text = checker.strip_markers(sentence.text)
            good = {n for n, h in enumerate(hits, 1)
                    if labels.get(pair_key({"question": row["question"], "sentence": text, "page": h.page, **line_of(h)}))}
            if good:
                backed += 1
                ticked += any(c.verified and c.number in good for c in sentence.citations)
    return {"backed_sentences": backed, "recall_verified": round(ticked / backed, 3) if backed else None}


def line_of(hit: Hit) -> dict:
    """{"line": its text} for an evidence line the model read (several lines share a page), {} for a passage."""
    return {"line": hit.text} if hit.trace.get("kind") else {}


def pair_key(pair: dict) -> str:
    """A judged (question, sentence, source): the source is its page, and its line where the model read lines."""
    return f"{pair['question']}|{pair['sentence']}|{pair['page']}" + (f"|{pair['line']}" if pair.get("line") else "")


def citation_precision(pairs: list[dict], labels: dict[str, bool]) -> dict:
    """Share of shown citations a person judged supporting, for verified (✓) ones and for all."""
    judged = [p for p in pairs if pair_key(p) in labels]
    ticked = [p for p in judged if p["verified"]]
    share = lambda ps: round(sum(labels[pair_key(p)] for p in ps) / len(ps), 3) if ps else None  # noqa: E731
    return {"pairs": len(pairs), "judged": len(judged), "verified_judged": len(ticked),
            "precision_verified": share(ticked), "precision_all_shown": share(judged),
            "supported_caught": f"{sum(labels[pair_key(p)] for p in ticked)}/{sum(labels[pair_key(p)] for p in judged)}",
            "warnings_right": f"{sum(not labels[pair_key(p)] for p in judged if not p['verified'])}/{len(judged) - len(ticked)}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Answer-level evaluation per chat model.")
    parser.add_argument("--questions", type=Path, default=BENCH)
    parser.add_argument("--pdf-dir", type=Path)
    parser.add_argument("--answerable", type=int, default=EVAL_SAMPLE[0])
    parser.add_argument("--unanswerable", type=int, default=EVAL_SAMPLE[1])
    add_model_flags(parser, ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    parser.add_argument("--store", type=Path, default=eval_retrieval.DEFAULT_STORE)
    parser.add_argument("--out", type=Path, default=Path("eval_answers.jsonl"))
    parser.add_argument("--evidence", help="only questions with this evidence source, e.g. Table (the sample is drawn from them)")
    parser.add_argument("--extractor", choices=eval_retrieval.EXTRACTORS, help="page-text extractor (own store, as in eval_retrieval)")
    parser.add_argument("--recheck", type=Path, help="re-check the citations of these stored rows (no LLM) ...")
    parser.add_argument("--labels", type=Path, default=LABELS, help="... against these hand judgments")
    parser.add_argument("--pairs", type=Path, help="write every (sentence, passage shown) pair here, for judging")
    parser.add_argument("--dev", action="store_true",
                        help="sample from the questions the default sample leaves out (for designing rules)")
    parser.add_argument("--docs", nargs="+", help="with --dev: only questions about these PDFs")
    parser.add_argument("--seed", type=int, default=7, help="with --dev: the sample's seed")
    parser.add_argument("--context-only", action="store_true",
                        help="no LLM: page hit and answer-in-context of the best chunks vs the chosen context")
    parser.add_argument("--contexts", nargs="+", choices=["passages", "lines"],
                        help="ask each question once per context, in turn (order alternating), in one run: "
                             "what the model reads (default: what suits the model, reading.what_model_reads); with passages, no cell is read in code either")
    parser.add_argument("--replay", type=Path, nargs="+", help="re-ask the passages stored in these rows with today's prompts")
    parser.add_argument("--regate", type=Path, nargs="+",
                        help="no LLM: which stored model replies (rows read from lines) today's app would show, and what they were")
    parser.add_argument("--verdicts", type=Path, help="with --regate: each reply's verdict, judged blind ({question, verdict})")
    parser.add_argument("--rules-off", nargs="+", default=[], help="with --regate: these rules switched off (rules.py)")
    parser.add_argument("--in-context", action="store_true",
                        help="with --replay: only unanswerable questions and those whose answer reached the model")
    args = parser.parse_args(argv)
    if args.regate:
        with rules.off(args.rules_off):
            return regate(args.regate, args.verdicts)
    if args.replay:
        return replay(args.replay, args.questions, model_choices(args), args.in_context, args.out, args.base_url)
    if args.recheck:
        return recheck(args.recheck, args.labels, args.pairs, args.questions)
    config.setup_logging(logging.WARNING)
    args.store = eval_retrieval.extractor_store(args.extractor, args.store)  # locks and kept PDFs live in it (ingest.store_dir)
    profile = eval_retrieval.ingest_profile(args.extractor)

    every = eval_retrieval.load_questions(args.questions)
    has_evidence = lambda q: not args.evidence or args.evidence in (q.get("evidence_sources") or [q["category"]])  # noqa: E731
    if args.dev:  # a seeded sample of the questions the evaluation sample leaves out
        dev = [q for q in dev_questions(every) if (not args.docs or q["doc"] in args.docs) and has_evidence(q)]
        questions = sample(dev, args.answerable, args.unanswerable, args.seed)
    else:
        questions = sample([q for q in every if has_evidence(q)], args.answerable, args.unanswerable)
    client, embedder = ingest.get_client(str(args.store)), embedders.get_embeddings()
    pdf_dir = args.pdf_dir or eval_retrieval.default_pdf_dir(args.questions)
    collections = eval_retrieval.ingest_needed(questions, pdf_dir, client, embedder, profile)
    retriever = Retriever(client, embedder)
    if args.context_only:
        print(json.dumps(context_report(questions, collections, retriever), indent=1))
        return 0
    results = {}
    with open(args.out, "a", encoding="utf-8") as out:
        for choice in model_choices(args):
            llm = models.get_chat_model(choice, args.base_url)
            name, label = choice_of(llm), models.chat_model_label(llm)  # "openai:" -> "openai:<the server's model>"
            rows = []
            arms = [(q, context) for i, q in enumerate(questions)
                    for context in (args.contexts[i % len(args.contexts):] + args.contexts[: i % len(args.contexts)]
                                    if args.contexts else [None])]
            for i, (q, context) in enumerate(arms, 1):
                col = collections[q["doc"]]
                with asked_with(context):
                    answer = qa.answer_question(q["question"], retriever, llm=llm, scope=[col], reads=context)
                gold_texts = eval_retrieval.gold_page_texts(q, col, retriever)
                countable = eval_retrieval.evidence_countable(q, gold_texts)
                row = {
                    "context": context or reading.what_model_reads(llm),
                    "model": name,
                    "model_label": label,
                    "written_by": answer.model,
                    "question": q["question"],
                    "doc": q["doc"],
                    "gold": q.get("answer"),
                    "answerable": bool(q["pages"]),
                    "category": q["category"],
                    "page_hit": any(h.collection == col and h.page in q["pages"] for h in answer.sources),
                    "answer_in_context": answer_in_context(q, [h.text for h in answer.sources]),
                    "answer_on_gold_pages": answer_in_context(q, gold_texts),
                    # 1/0: a gold evidence line among the lines shown; None: not judged (see the module docstring)
                    "evidence": int(eval_retrieval.evidence_shown(q, answer.evidence[: config.EVIDENCE_LINES], col, retriever))
                                if countable else None,
                    # the same, over all the lines found (the model reads them all when its context is "lines")
                    "evidence_read": int(eval_retrieval.evidence_shown(q, answer.evidence, col, retriever)) if countable else None,
                    "prompt_tokens": answer.prompt_tokens,
                    "cached_prompt_tokens": answer.cached_prompt_tokens,
                    "evidence_lines": [{"page": h.page, "text": h.text} for h in answer.evidence],
                    "answer": answer.text,
                    "model_reply": answer.model_reply,  # before the app held it back (replayed by --regate)
                    "refused": answer.refused,
                    "correct": is_correct(q, answer.text, answer.refused),
                    "citations": [
                        {"page": c.page, "verified": c.verified, "gold_page": c.collection == col and c.page in q["pages"]}
                        for c in answer.citations
                    ],
                    "confidence": answer.confidence,
                    "seconds": round(answer.seconds, 1),
                    "evidence_seconds": None if answer.evidence_seconds is None else round(answer.evidence_seconds, 2),
                    "first_token_seconds": None if answer.first_token_seconds is None else round(answer.first_token_seconds, 1),
                    # what the checker saw, so citations can be re-checked and judged by hand later
                    "sentences": [
                        {"text": s.text, "supported": s.supported, "cited": [c.number for c in s.citations if not c.inferred],
                         "inferred": [c.number for c in s.citations if c.inferred]}
                        for s in answer.sentences
                    ],
                    # each passage's retrieval similarity, as the app saw it
                    "sources": [{"n": n, "page": h.page, "gold_page": h.collection == col and h.page in q["pages"], "text": h.text,
                                 "similarity": h.trace.get("semantic_score"), "kind": h.trace.get("kind"), "label": h.trace.get("label")}
                                for n, h in enumerate(answer.sources, 1)],
                }
                rows.append(row)
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                out.flush()
                sys.stderr.write(f"\r{name}: {i}/{len(arms)} answered")
            sys.stderr.write("\n")
            for context in args.contexts or [None]:
                arm = f"{name} ({context})" if context else name
                results[arm] = {"model_label": label, **summarise([r for r in rows if not context or r["context"] == context])}
                print(arm, json.dumps(results[arm]))
            del llm
            models.forget_chat_models()  # the next model is not loaded beside this one
    return 0


def context_report(questions: list[dict], collections: dict[str, str], retriever: Retriever) -> dict:
    """Without the LLM: how often the gold answer is in what the model would read, with each
    page's best chunk (as retrieval ranks them) and with ``context.choose_context``, and their sizes."""
    rows = []
    for q in (q for q in questions if q["pages"]):
        col = collections[q["doc"]]
        hits = retriever.search(q["question"], scope=[col])
        t0 = time.perf_counter()
        chosen = context.choose_context(q["question"], retriever.load_pages(hits))
        rows.append({"text_table": is_text_or_table(q["category"]),
                     "page_hit": any(h.page in q["pages"] for h in hits),
                     "on_gold_pages": answer_in_context(q, eval_retrieval.gold_page_texts(q, col, retriever)),
                     "best_chunks": answer_in_context(q, [h.text for h in hits]),
                     "chosen": answer_in_context(q, [h.text for h in chosen]),
                     "chars_best_chunks": sum(len(h.text) for h in hits), "chars_chosen": sum(len(h.text) for h in chosen),
                     "choose_ms": (time.perf_counter() - t0) * 1000})
    report = {}
    for name, group in (("answerable", rows), ("text_table", [r for r in rows if r["text_table"]])):
        report[name] = {
            "page_hit@k": share([r["page_hit"] for r in group]),
            "answer_on_gold_pages": share([r["on_gold_pages"] for r in group]),
            "answer_in_context_chosen_where_on_page": share([r["chosen"] for r in group if r["on_gold_pages"]]),
            "answer_in_context_best_chunks": share([r["best_chunks"] for r in group]),
            "answer_in_context_chosen": share([r["chosen"] for r in group]),
            "mean_chars_best_chunks": round(statistics.mean(r["chars_best_chunks"] for r in group)) if group else 0,
            "mean_chars_chosen": round(statistics.mean(r["chars_chosen"] for r in group)) if group else 0,
            "median_choose_ms": round(statistics.median(r["choose_ms"] for r in group), 1) if group else 0,
        }
    return report


def read_rows(path: Path) -> list[dict]:
    """The JSON objects of a JSONL file (stored answers or judgments), blank lines skipped."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_labels(path: Path) -> dict[str, bool]:
    """Hand judgments by pair key; a sentence judged to make no claim ("supports": null) is left out."""
    if not path.exists():
        return {}
    judgments = read_rows(path)
    return {pair_key(j): j["supports"] for j in judgments if j.get("supports") is not None}


def by_category(rows: list[dict], categories: dict[str, str]) -> dict[str, str]:
    """Correct answers per evidence category (text, table, chart, ...): where small models can win."""
    counts: dict[str, list[int]] = {}
    for r in rows:
        if r["answerable"]:
            tally = counts.setdefault(categories.get(r["question"], "?"), [0, 0])
            tally[0] += r["correct"]
            tally[1] += 1
    return {name: f"{right}/{total}" for name, (right, total) in sorted(counts.items())}


def recheck(rows_path: Path, labels_path: Path, pairs_out: Path | None, questions_path: Path) -> int:
    """Summarise stored answers per model, their citations re-checked under the current settings
    and scored against hand judgments (no LLM is called)."""
    rows = read_rows(rows_path)
    categories = {q["question"]: q["category"] for q in eval_retrieval.load_questions(questions_path)}
    pairs = citation_pairs(rows)
    if pairs_out:
        pairs_out.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in judging_pairs(rows)))
    labels = load_labels(labels_path)
    for model in sorted({as_choice(r["model"]) for r in rows}):
        mine = [r for r in rows if as_choice(r["model"]) == model]
        shown = [p for p in pairs if as_choice(p["model"]) == model]
        report = {**summarise(mine), "by_category": by_category(mine, categories),
                  "verified_share_now": round(sum(p["verified"] for p in shown) / len(shown), 3) if shown else None,
                  "verified_on_gold_page_now": round(sum(p["gold_page"] for p in shown if p["verified"])
                                                     / max(sum(p["verified"] for p in shown), 1), 3),
                  **citation_precision(shown, labels), **tick_recall(mine, labels)}
        print(model, json.dumps(report, ensure_ascii=False))
    return 0


# -----------------------------------------------------------------------------
# Replaying stored replies: which of them today's app would show (qa.backed_or_nearest), no model call


def shown_today(row: dict) -> bool:
    """Would today's app show this stored reply, written reading lines (``model_reply`` and its ``sources``), or say
    the lines are the nearest found? The app's own gate decides, on the reply as the model wrote it."""
    reply = qa.backed_or_nearest(iter([row["model_reply"]]), rows_hits(row), parse_question(row["question"]))
    return "".join(reply) != prompts.NEAREST_LINES


def regate(rows_paths: list[Path], verdicts_path: Path | None) -> int:
    """Count, for the stored replies of ``rows_paths``, those today's app shows by their verdict (right, partly, wrong,
    no answer: judged blind on the reply alone, ``verdicts_path``) and those it holds back; answerable and not apart.
    A checker change is so measured on the very replies the model wrote, each judged once."""
    verdicts = {v["question"]: v["verdict"] for v in read_rows(verdicts_path)} if verdicts_path else {}
    tally: dict[str, dict[str, int]] = {}
    for row in (row for path in rows_paths for row in read_rows(path) if row.get("model_reply")):
        outcome = verdicts.get(row["question"], "shown") if shown_today(row) else "nearest lines"
        counts = tally.setdefault("answerable" if row["answerable"] else "unanswerable", {})
        counts[outcome] = counts.get(outcome, 0) + 1
    print(json.dumps(tally, sort_keys=True))
    return 0


# -----------------------------------------------------------------------------
# Replaying stored passages: a prompt change measured on the very text the model read before


def answer_reached_the_model(row: dict) -> bool:
    """An answerable row whose gold answer was in the passages; a one- or two-digit gold (a count) does not
    count, since such a digit is on most pages by chance."""
    return row["answerable"] and row["answer_in_context"] and not re.fullmatch(r"\d{1,2}", str(row["gold"]).strip())


def replay_summary(rows: list[dict]) -> dict:
    """Before (as stored) and after, on the same questions."""
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    count = lambda rs, key: sum(bool(r[key]) for r in rs)  # noqa: E731
    return {
        "questions": len(rows),
        "correct_answerable": f"{count(answerable, 'before_correct')} -> {count(answerable, 'correct')} of {len(answerable)}",
        "refused_answerable": f"{count(answerable, 'before_refused')} -> {count(answerable, 'refused')}",
        "honest_refusals": f"{count(unanswerable, 'before_refused')} -> {count(unanswerable, 'refused')} of {len(unanswerable)}",
        "won": [r["question"][:70] for r in answerable if r["correct"] and not r["before_correct"]],
        "lost": [r["question"][:70] for r in answerable if r["before_correct"] and not r["correct"]],
        "median_seconds": statistics.median(r["seconds"] for r in rows) if rows else None,
    }


def replay(rows_paths: list[Path], questions_path: Path, choices: list[str], only_in_context: bool, out_path: Path,
           base_url: str | None = None) -> int:
    """Re-ask each stored row's passages with today's prompts, judge the new answers and print before and
    after per model (``choices``: choice ids, an "openai:" one on the server at ``base_url``; a row stored under
    an embedded model's bare name is that model's).
    A question stored twice is asked once."""
    config.setup_logging(logging.WARNING)
    bench = {q["question"]: q for q in eval_retrieval.load_questions(questions_path)}
    stored = [row for path in rows_paths for row in read_rows(path)]
    with tempfile.TemporaryDirectory() as empty, open(out_path, "a", encoding="utf-8") as out:
        retriever = Retriever(ingest.get_client(empty), embedders.get_embeddings())  # only its embedder is used
        for choice in choices:
            llm, rows, asked = models.get_chat_model(choice, base_url), [], set()
            name = choice_of(llm)
            for row in stored:
                if as_choice(row["model"]) != name or row["question"] in asked:
                    continue
                if only_in_context and row["answerable"] and not answer_reached_the_model(row):
                    continue
                asked.add(row["question"])
                question = bench[row["question"]]
                passages = [replace(hit, doc_name=question["doc"]) for hit in rows_hits(row)]
                answer = qa.answer_question(question["question"], retriever, llm=llm, passages=passages)
                new = {"model": name, "question": row["question"], "gold": row["gold"], "answerable": row["answerable"],
                       "before_answer": row["answer"], "before_refused": row["refused"],
                       "before_correct": is_correct(question, row["answer"], row["refused"]),  # by today's judge, as the new one
                       "answer": answer.text, "refused": answer.refused, "correct": is_correct(question, answer.text, answer.refused),
                       "seconds": round(answer.seconds, 1)}
                rows.append(new)
                out.write(json.dumps(new, ensure_ascii=False) + "\n")
                out.flush()
                sys.stderr.write(f"\r{name}: {len(rows)} replayed")
            sys.stderr.write("\n")
            print(name, json.dumps(replay_summary(rows), ensure_ascii=False))
            del llm
            models.forget_chat_models()
    return 0


if __name__ == "__main__":
    sys.exit(main())
