"""Check an answer's citations in code: which sentence is backed by which numbered passage.

    answer text -> split_sentences()     (abbreviations and decimals do not split; markers stay on)
                -> parse_citations()     "[2][1, 3]" -> [2, 1, 3]
                -> support_scores()      per passage: word overlap / SUPPORT_MIN_OVERLAP >= 1 backs,
                                         or the question restated plus an answer that stands on the
                                         page beside what was asked (answer_beside_question: the
                                         question's words in any form, its date, and the names the
                                         document's file name writes need not be on the page);
                                         0 when the sentence states a detail the passage lacks
                                         or holds only in the wrong place (unbacked_detail)
                -> verify_answer()       CheckedSentence per sentence, with verified, co-cited
                                         and inferred Citations; a number a passage writes in words is
                                         read in digits (in_digits); a sentence too short to judge is
                                         backed only as a bare figure printed on the line it cites
                                         (bare_figure_backed: "41% [L1]")
    question    -> question.ParsedQuestion: its words, names, years, subject figures and keys, read once
                                         per question on the ParsedQuestion qa.py made (the query, not the
                                         instructions beside it): every sentence × passage asks

A number is backed only where the passage says it about the same thing: in the sentence
or table cell (row label + column header + cell, for Markdown pipe tables) whose words fit
the claim's best (where the passage writes it beside words, there: not a bare repeat of it among a
chart's values), and beside the claim's year if it names one; in a table written one cell per
line (the text extractor's way) a figure belongs to the label line above its run of values, and
is not backed when another row's label fits the claim better, or holds a word of the claim
that the figure's row lacks ("total long-term liabilities" is not the "Total liabilities" row),
or adds a second thing the claim does not name ("Total liabilities and equity"). Such a table under
a run of year heads is read into rows with their columns (``pages.page_lines``, as the evidence lines
read it), so a figure there is backed only under a column the claim, or its question, names.
The question's subject (the company, the document's own name for the period, a page reference)
need not be repeated by the passage, but some passage shown must name it; words pointing at the
source ("as stated in the document") need not be on it either; any other number the question
names ("error 288", the position of "the 2nd objective") must be backed like any figure. The number
of a reference that claim and page both write ("Figure 6") is no figure to place. A lookup ("EPS Code AR01",
"error 88") is answered from the row of its key: not from a passage that lists only other keys
of that kind, nor from the line nearest another row's key. A sentence that restates the question
is backed when what it adds stands on the page beside what was asked (not for a rank, count,
comparison or colour).

Small local models drop and invent markers, so nothing relies on the model citing
correctly. Deliberately simple: support is judged by word overlap plus hard rules for what overlap cannot vouch for (a number, month, name or
quotation the passage lacks; a figure from another row, sentence or year), not by an
entailment model (none runs offline here), nor by embeddings: a near-paraphrase test (cosine >= 0.85)
changed no ✓ on any of the 22 judged sets and was removed. Each rule opens with the principle it
states ("Rule: ...") and is registered by name with that principle and its unit test (``rules.py``; the
table below the imports); ``evaluation/ablate_rules.py`` switches each off by name and measures it on
the judged sets. The rules were written from hand-judged citations (evaluation/citation_judgments.jsonl,
citation_judgments_sample60.jsonl, the lookup rule from citation_judgments_dev23.jsonl, the
restated-question rule from the dev41-dev173 sets) and
are measured on judged sets drawn after them (evaluation/citation_judgments_dev307 … dev599.jsonl and
their predecessors, each marked fitted or held out in evaluation/README.md): ``evaluation/eval_answers.py --recheck``.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING


import calc
import cells as cells_module
import config
import language
import rules
from pages import page_lines, row_cells, row_label
from question import ParsedQuestion, as_read
from text_utils import (CODE, FIGURES_LINE, NAME_RUN, REFERENCE, WRITTEN_WORD, YEAR_SPAN, YEAR_TOKEN, dates_a_year, is_table_row,
                        months_in, names_in, number_words_as_digits, numbers_in, one_year_spans, sentence_spans, table_cells, tokenize, without_possessive,
                        without_s, years_in)

if TYPE_CHECKING:
    from records import Hit

# -----------------------------------------------------------------------------
# The rules, by name: the principle each "Rule:" line below states, and the unit test that shows it.
# Switched off (``with rules.off({"denial"}): ...``), one that forbids a ✓ lets everything through;
# an exemption, or a way of reading the text, grants nothing.

_TEST = "tests/test_checker.py::"
# what a passage must hold
rules.register("specifics", "every number, month and name a sentence states must be in its passage (the question's subject aside)",
               _TEST + "test_rule_a_figure_must_stand_in_its_passage", forbids=True,
               pays_on="docs/experiments/2026-11-26-rules-registry.md: dev173 (fitted), ✓ precision 5/6 -> 5/8 switched off; "
                       "re-run 2026-11-28: pays on 14 of 30 judged sets, fresh2_lines (held out) 8/10 -> 8/11; costs on fresh_mm "
                       "(held out), 6/10 -> 7/11")
rules.register("figure_in_place", "a figure must stand in its passage beside the thing it is said of, and beside the claim's year",
               _TEST + "test_rule_a_figure_must_stand_beside_the_thing_it_is_said_of", forbids=True,
               pays_on="docs/experiments/2026-11-26-rules-registry.md: dev173 (fitted), ✓ precision 5/6 -> 5/8 switched off; "
                       "re-run 2026-11-28: pays on 16 of 30 judged sets (all dev or sample60), costs on none")
rules.register("year_span_rows", "a figure of one year span (2003-04) does not back a claim about another",
               _TEST + "test_rule_a_figure_of_one_year_span_does_not_back_another", forbids=True,
               pays_on="docs/experiments/2026-11-26-rules-registry.md: as financial_year_rows, dev211, dev257, dev461, dev503 "
                       "(fitted), one wrong ✓ each switched off (dev211 ✓ precision 5/5 -> 5/6); the same on the re-run of "
                       "2026-11-28")
rules.register("cell_per_line_label", "in a table printed one cell per line, a figure belongs to the label above its run of values",
               _TEST + "test_rule_a_figure_of_a_cell_per_line_table_belongs_to_the_label_above_it", forbids=True,
               pays_on="docs/experiments/2026-11-26-rules-registry.md: dev59 (fitted), ✓ precision 1/1 -> 1/3 switched off; "
                       "re-run 2026-11-28: pays on 6 dev sets, costs one right ✓ on dev401 and dev503")
rules.register("row_qualifier", "a row lacking a word the claim says, where another row has it, is another row",
               _TEST + "test_rule_a_row_lacking_a_word_the_claim_says_is_another_row", forbids=True,
               pays_on="docs/experiments/2026-11-26-rules-registry.md: dev211 (fitted), ✓ precision 5/5 -> 5/6 switched off; "
                       "re-run 2026-11-28: pays on 5 dev sets")
rules.register("two_sided_row", "a row that adds two things backs neither of them alone",
               _TEST + "test_rule_a_row_adding_two_things_does_not_back_one_of_them", forbids=True,
               pays_on="docs/experiments/2026-11-26-rules-registry.md: dev59 (fitted), ✓ precision 1/1 -> 1/2 switched off; the "
                       "same on the re-run of 2026-11-28")
rules.register("lookup_key_row", 'a lookup ("error 88", "code AR01") is answered from the row of its key',
               _TEST + "test_rule_a_lookup_is_answered_from_the_row_of_its_key", forbids=True,
               pays_on="docs/experiments/2026-11-26-rules-registry.md: dev211 (fitted), ✓ precision 5/5 -> 5/9 switched off; "
                       "re-run 2026-11-28: pays on 7 dev sets")
# what a line read as a table row must hold (the model reads evidence lines, qa.py)
rules.register("row_column", "a row's figure backs a sentence only under a column the sentence (or its question) names",
               _TEST + "test_rule_a_rows_figure_backs_only_under_the_column_named", forbids=True,
               pays_on="docs/experiments/2026-11-28-rules-that-pay.md: no judged set shows it pays: switched off, no ✓ moves on "
                       "the 30 judged sets; its removal (with the checker's question reading it alone uses) is left open there")
rules.register("denial", 'a denial needs a passage that denies: the page\'s words in a sentence that says "not" are no support '
               '(a yes/no answer\'s leading "No" is its verdict, not a denial)', _TEST + "test_rule_a_denial_needs_a_passage_that_denies",
               forbids=True,
               pays_on="docs/experiments/2026-11-26-rules-registry.md: dev41 (fitted), ✓ precision 12/21 -> 12/22 switched off; "
                       "the same on the re-run of 2026-11-28")
rules.register("quotation", "a quotation must stand in its passage word for word (case, spacing and punctuation aside)",
               _TEST + "test_rule_a_quotation_must_stand_in_the_passage_word_for_word", forbids=True,
               pays_on="docs/experiments/2026-11-26-rules-audit.md: fresh_mm (held out), ✓ precision 6/10 -> 6/11 switched off; "
                       "the same on the re-run of 2026-11-28")
rules.register("premise_names", "a premise no document shares backs nothing",
               _TEST + "test_rule_a_premise_no_document_shares_backs_nothing", forbids=True,
               pays_on="docs/experiments/2026-11-26-rules-registry.md: dev401, dev503, dev599 (fitted), one wrong ✓ each switched"
                       " off (dev503 ✓ precision 4/4 -> 4/5); the same on the re-run of 2026-11-28")
rules.register("no_side_by_side_for_ranks", "standing side by side cannot vouch for a rank, a count or a comparison",
               _TEST + "test_rule_side_by_side_cannot_vouch_for_a_rank_or_a_count", forbids=True,
               pays_on="docs/experiments/2026-11-26-rules-registry.md: dev23 (fitted), ✓ precision 6/51 -> 6/53 switched off; "
                       "re-run 2026-11-28: pays on 13 of 30 judged sets, fresh_mm (held out) 6/10 -> 6/11")
rules.register("no_side_by_side_for_colours", "standing side by side cannot vouch for a colour: what a picture shows",
               _TEST + "test_rule_side_by_side_cannot_vouch_for_a_colour", forbids=True,
               pays_on="docs/experiments/2026-11-26-rules-registry.md: dev677 (fitted), ✓ precision 9/10 -> 9/12 switched off; "
                       "re-run 2026-11-28: pays on 6 dev sets")
# what a passage need not hold
rules.register("subject_exempt", "the question's subject need not be repeated by a passage, but any other number it names is a fact to back",
               _TEST + "test_rule_the_questions_subject_need_not_be_repeated_but_its_facts_must",
               pays_on="docs/experiments/2026-11-28-rules-that-pay.md: mm60_lines, ✓ recall 13/15 -> 11/15 switched off "
                       "(mm60_night 12/14 -> 10/14); dev173, dev23, dev41 (fitted) a right ✓ each; costs a wrong ✓ on dev761 and "
                       "fresh_fb")
rules.register("shared_references", 'a reference both write ("Figure 6") names a thing; it is no figure to place',
               _TEST + "test_rule_a_reference_both_write_names_a_thing_and_is_no_figure",
               pays_on="docs/experiments/2026-11-26-rules-registry.md: dev599, ✓ precision 14/16 -> 13/15 and recall 14/17 -> "
                       "13/17 switched off; the same on the re-run of 2026-11-28")
rules.register("source_words", 'words that point at where a fact stands need not be on it ("as stated in the document", '
               '"given under Unit 8 in the table", "the source states this in the following sentence:")',
               _TEST + "test_words_pointing_at_the_source_need_not_be_on_it",
               pays_on="docs/experiments/2026-11-26-rules-audit.md: fresh_mm (held out), ✓ recall 6/7 -> 5/7 switched off; re-run"
                       " 2026-11-28: pays on 10 of 30 judged sets (dev211 recall 5/5 -> 4/5)")
rules.register("restated_question", "a sentence restating the question is backed when what it adds stands on the page beside what was asked",
               _TEST + "test_rule_a_restated_question_is_backed_by_an_answer_beside_what_was_asked",
               pays_on="docs/experiments/2026-11-26-rules-registry.md: dev173 (fitted), ✓ recall 5/8 -> 3/8 switched off; re-run "
                       "2026-11-28: pays on 9 dev sets, costs a wrong ✓ on fresh2_lines (held out, precision 8/10 -> 8/9 switched"
                       " off)")
rules.register("page_by_position", '"the first page", "the 2nd slide" say where to look, not a rank the answer claims',
               _TEST + "test_rule_a_page_by_position_says_where_to_look_not_a_rank",
               pays_on="docs/experiments/2026-11-26-rules-registry.md: dev719, ✓ recall 19/23 -> 18/23 switched off; the same on "
                       "the re-run of 2026-11-28")
rules.register("overlap_measure", "a sentence is backed by a passage that holds most of its words (SUPPORT_MIN_OVERLAP of them)",
               _TEST + "test_rule_a_sentence_is_backed_by_a_passage_that_holds_most_of_its_words",
               pays_on="docs/experiments/2026-11-28-rules-that-pay.md: every judged set with a ✓; fresh3 (held out) ✓ recall "
                       "11/12 -> 0/12 switched off")
rules.register("question_words_any_form", 'a word the question asks is asked in any of its forms ("stop", "stopped"): restating '
               "it adds nothing the page must hold", _TEST + "test_rule_a_word_the_question_asks_is_asked_in_any_of_its_forms",
               pays_on="docs/experiments/2026-11-29-right-answers-held-back.md: 28 judged answer files, ✓ judged right 256/334 -> 259/337 "
                       "(none wrong added); answers shown right, held out: fresh6 14 -> 15, fresh9 16 -> 17 of 36")
rules.register("file_name_names", "a document's file name names its subject for every passage of it (\"BOEING_2022_10K.pdf\" names Boeing)",
               _TEST + "test_rule_a_documents_file_name_names_its_subject_beside_any_line",
               pays_on="docs/experiments/2026-11-29-right-answers-held-back.md: answers shown right, held out: fresh6 13 -> 15, "
                       "fresh7 9 -> 11, fresh9 15 -> 17, fresh10 12 -> 14 of 36; wrong 0 -> 1 on fresh10 only")
rules.register("bare_figure_points_at_its_line", "a bare answer (a figure with at most its unit) points at the line it cites: "
               "backed where that line prints the figure in place, of the kind asked (a share a percentage, a count none)",
               _TEST + "test_rule_a_bare_figure_is_backed_by_the_line_it_cites",
               pays_on="docs/experiments/2026-11-29-bare-figures-and-numbers-in-words.md: fresh11 (held out), answers shown right 7 -> 9 "
                       "and partly 1 -> 3 of 36, wrong 3 -> 3; fitted on fresh4-10, +10 right, +1 wrong")
# how the text is read
rules.register("figures_in_words", 'a number written in words is the figure its digits write ("seven working days" backs "7 working days")',
               _TEST + "test_rule_a_number_in_words_is_the_figure_its_digits_write",
               pays_on="docs/experiments/2026-11-29-bare-figures-and-numbers-in-words.md: fresh11 (held out), answers shown partly "
                       "2 -> 3 of 36, none wrong; fitted (fresh4-10) right +3, partly +2; judged ✓ unchanged, 259/337")
rules.register("abbreviations", 'an abbreviation\'s period ends no sentence ("Rs. 1,039 million", "Fig. 3", "e.g. this")', _TEST + "test_rule_an_abbreviation_does_not_end_a_sentence",
               pays_on="docs/experiments/2026-11-26-rules-registry.md: dev41 (fitted), ✓ recall 12/13 -> 10/11 switched off; "
                       "re-run 2026-11-28: pays on 8 dev sets (sample60 recall 8/12 -> 7/10)")
rules.register("arithmetic_lines_unjudged", "a calculation line is arithmetic that calc.py works out, not a claim a page could back",
               _TEST + "test_rule_a_calculation_line_is_not_judged_as_a_claim",
               pays_on="docs/experiments/2026-11-26-rules-registry.md: no ✓ judged (no person judges a line left unjudged); "
                       "without it the 40 calculation lines of 12 judged sets (7 in dev677, 2 in fresh_fb) are shown ⚠")

# -----------------------------------------------------------------------------
# Citations

# A marker numbers a passage shown to the model: nine digits is past any list of them, so a longer run
# of digits in brackets is text, not a marker (and int() refuses strings past 4,300 digits).
# A line read by the model is cited "[L2]" (qa.py numbers lines so); the number is what counts.
_MARKER_GROUP = r"L?\d{1,9}(?:\s*,\s*L?\d{1,9})*"
_MARKER = re.compile(rf"\[({_MARKER_GROUP})\]")
# What a sentence keeps after its end marks: the citation markers on its line ("It rained. [1] [2]")
_TRAILING_MARKERS = rf"(?:[^\S\n]*\[{_MARKER_GROUP}\])*"
# Rule: an abbreviation's period ends no sentence ("Rs. 1,039 million", "Fig. 3", "e.g. this").
_ABBREVIATIONS = set(
    "rs mr mrs ms dr prof st no nos vs fig figs eq sec ch vol pp p e.g i.e etc inc ltd co corp approx est "
    "jan feb mar apr jun jul aug sep sept oct nov dec u.s u.k".split()
)


_INITIALS = re.compile(r"(?:[A-Z]\.)*[A-Z]")  # "R.A" of "Mr. R.A. Shah": a name goes on
_NEXT_ON_LINE = re.compile(r"[^\S\n]*(.?)")  # the next character on the line, spaces skipped ("" at its end)


def parse_citations(text: str) -> list[int]:
    """Source numbers cited in ``text``, in order, without repeats.

    parse_citations("Rain fell [2]. It flooded [1, 3][2].") -> [2, 1, 3]
    parse_citations("It rose [L2][L1, L3].") -> [2, 1, 3]
    """
    numbers: list[int] = []
    for group in _MARKER.findall(text):
        for n in group.split(","):
            if int(n.strip().lstrip("L")) not in numbers:
                numbers.append(int(n.strip().lstrip("L")))
    return numbers


def strip_markers(text: str) -> str:
    return _MARKER.sub("", text).strip()


def _ends_sentence(text: str, start: int, match: re.Match) -> bool:
    """Is this period (or ! or ?) a sentence end, not an abbreviation or a decimal-like break?"""
    words = text[start : match.start()].rsplit(maxsplit=1)  # the last word only: a long sentence is not re-split at each mark
    last = words[-1].rstrip(".").lstrip("([{\"'“‘") if words else ""  # "(approx." is "approx"
    abbreviation = rules.on("abbreviations") and last.lower() in _ABBREVIATIONS
    if match.group(0).startswith(".") and (abbreviation or _INITIALS.fullmatch(last)):
        return False
    following = _NEXT_ON_LINE.match(text, match.end()).group(1)
    return not following.islower()


def split_sentences(text: str) -> list[str]:
    """Sentences with their trailing citation markers kept on them; abbreviations do not split.

    split_sentences("It rained. [1] Then it snowed [2].") -> ["It rained. [1]", "Then it snowed [2]."]
    split_sentences("Funds were Rs. 1,039 million [2].") -> ["Funds were Rs. 1,039 million [2]."]
    """
    spans = sentence_spans(text, marks=".!?", kept=_TRAILING_MARKERS, between=r"(?=\s|$)", is_end=_ends_sentence, trim=True)
    return [text[s:e] for s, e in spans if strip_markers(text[s:e]).strip(" -*•")]


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


# -----------------------------------------------------------------------------
# Saying what was checked, beside the answer (the app and the exported chat)


def marker(number: int, as_lines: bool) -> str:
    """The marker the answer cites a source by: marker(2, True) -> "[L2]"; marker(2, False) -> "[2]"."""
    return f"[L{number}]" if as_lines else f"[{number}]"


def backing_summary(sentences: list[CheckedSentence], chips: list[Citation], as_lines: bool = True) -> str | None:
    """One sentence beside the answer on what the checker found, in step with every ⚠ on screen: of the
    sentences long enough to judge, how many a line (or passage) backs; ⚠ is named whenever one is shown,
    on an unbacked sentence or on a chip (``chips``: those shown) of a cited source that does not back its
    sentence; a backing the model did not cite is said to be inferred; a marker naming no source is said.
    None when no sentence was judged.

    backing_summary([CheckedSentence("It opened in 1889 [L1].", [Citation(1, "a.pdf", 3, "c", True)], True)], chips)
      -> "The one checked sentence is backed by a line it cites."
    """
    judged = [s for s in sentences if s.supported is not None]
    if not judged:
        return None
    unit = "line" if as_lines else "passage"
    backed = [s for s in judged if s.supported]
    inferred = sum(1 for s in backed if not any(c.verified and not c.inferred for c in s.citations))
    if len(backed) == len(judged):
        text = all_backed(len(judged), inferred, unit)
        if any(not c.verified for c in chips):  # a supported sentence's chip: not "all backed" beside it
            text += f" Yet ⚠ marks a cited {unit} that does not back the sentence citing it."
    else:
        text = some_backed(len(judged), len(backed), inferred, unit)
    return text + unknown_markers(sentences, as_lines)


def all_backed(judged: int, inferred: int, unit: str) -> str:
    """all_backed(3, 0, "line") -> "Each of the 3 checked sentences is backed by a line it cites." """
    subject = "The one checked sentence is" if judged == 1 else f"Each of the {judged} checked sentences is"
    if not inferred:
        return f"{subject} backed by a {unit} it cites."
    if inferred == judged:
        return f"{subject} backed by a {unit} the model did not cite (marked inferred)."
    return f"{subject} backed by a {unit}, {inferred} of them by one the model did not cite (marked inferred)."


def some_backed(judged: int, backed: int, inferred: int, unit: str) -> str:
    """some_backed(3, 2, 0, "line") -> "2 of 3 checked sentences are backed by a cited line; ⚠ marks the other." """
    if not backed:
        return (f"The one checked sentence is not backed by any {unit}; ⚠ marks it." if judged == 1
                else f"None of the {judged} checked sentences is backed by a {unit}; ⚠ marks each.")
    verb = "is" if backed == 1 else "are"
    how = f"a cited {unit}" if not inferred else f"a {unit} ({inferred} by one the model did not cite, marked inferred)"
    others = "the other" if judged - backed == 1 else f"the other {judged - backed}"
    return f"{backed} of {judged} checked sentences {verb} backed by {how}; ⚠ marks {others}."


def unknown_markers(sentences: list[CheckedSentence], as_lines: bool) -> str:
    """The markers in the answer that name no source it was given, said: " [L12] names no line the model read." """
    numbers = sorted({n for s in sentences for n in s.fabricated})
    if not numbers:
        return ""
    named = " and ".join(marker(n, as_lines) for n in numbers)
    verb = "names" if len(numbers) == 1 else "name"
    return f" {named} {verb} no {'line' if as_lines else 'passage'} the model read."


# The question's readings (question.ParsedQuestion: its words, names, years, subject figures, keys) are made once
# per question, on the question: the checker asks for them for every sentence and source.


@rules.switch("subject_exempt", stand_in=frozenset())
def subject_figures(question: str | ParsedQuestion = "") -> frozenset[str]:
    """Rule: the question's subject need not be repeated by a passage, but any other number it names is a fact to back.
    The question's figures that name its subject, not a fact (``ParsedQuestion.subject_figures``: years,
    references, digits inside names). Any other number the question names ("error 288", the position of
    "the 2nd objective") is a fact an answer must find backed like any other.

    subject_figures(parse_question("What does error 288 on page 89 mean in FY2021 Q3?")) -> {"89", "2021", "3"}
    """
    return as_read(question).subject_figures


@rules.switch("shared_references", stand_in=frozenset())
def shared_references(claim: str, passage: str) -> set[str]:
    """Rule: a reference both write ("Figure 6") names a thing; it is no figure to place.
    Numbers of the references ("Figure 6", "Table 2", "page 14") that claim and passage both write:
    they name a thing, they are no figure that stands in a row or a sentence.

    shared_references("Figure 6: RAG vs baseline.", "Figure 6: Step-Back + RAG vs Baseline predictions") -> {"6"}
    """
    return set(REFERENCE.findall(claim)) & set(REFERENCE.findall(passage))


@rules.switch("specifics", stand_in=frozenset())
def missing_specifics(claim: str, passage: str, question: str | ParsedQuestion = "") -> set[str]:
    """Rule: every number, month and name a sentence states must be in its passage (the question's subject aside).
    The numbers, months and names ``claim`` states that ``passage`` does not contain, beyond the
    question's subject (its names, years and page references need not be repeated by the passage).

    missing_specifics("In June GPT-4o scored 61.5%", "In June GPT-4 scored 61.5%") -> {"gpt-4o"}
    """
    question = as_read(question)
    known_words = {w.lower() for w in WRITTEN_WORD.findall(passage)} | names_in(passage) | question.written_words
    known_words |= _SOURCE_WORDS if rules.on("source_words") else set()
    return (
        (numbers_in(claim) - numbers_in(passage) - subject_figures(question))
        | (months_in(claim) - months_in(passage) - question.months)
        | (names_in(claim) - known_words)
    )


# -----------------------------------------------------------------------------
# Where a figure stands: a sentence of prose, or one cell of a table with its row and column names

_RULE_CELL = re.compile(r"^\s*:?-{3,}:?\s*$")


def table_units(rows: list[str]) -> list[str]:
    """One unit per cell of a Markdown table: the row's label cells, the column's header, the cell.

    table_units(["| | 2023 | 2022 |", "| Net sales | 3,226.8 | 2,729.4 |"]) -> ["Net sales 2023 3,226.8", "Net sales 2022 2,729.4"]
    """
    cells = [table_cells(r) for r in rows]
    cells = [r for r in cells if not all(_RULE_CELL.match(c) or not c for c in r)]
    if not cells:
        return []
    header, units = cells[0], []
    for row in cells[1:]:
        label = " ".join(c for c in row if c and not numbers_in(c))
        for j, cell in enumerate(row):
            if numbers_in(cell):
                units.append(" ".join(part for part in (label, header[j] if j < len(header) else "", cell) if part))
    return units or [" ".join(" ".join(r) for r in cells)]


def passage_units(passage: str) -> list[str]:
    """The places a figure can stand in a passage: each sentence of its prose (a line break inside a
    sentence is a space) and each cell of its Markdown tables (``table_units``).

    passage_units("Sales rose.\nThey fell\nlater.") -> ["Sales rose.", "They fell later."]
    """
    units, prose, table = [], [], []
    # a row's leader dots are no sentence end: "Total assets ........ 9,674" is one place (pages.row_label)
    for line in [row_label(line) for line in passage.split("\n")] + [""]:
        if is_table_row(line):
            table.append(line)
            continue
        if table:
            units += table_units(table)
            table = []
        prose.append(line)
    units += split_sentences(" ".join(" ".join(prose).split()))
    return units


_NEGATION = re.compile(r"\b(?:not|no|never|without|none)\b|n['’]t\b", re.IGNORECASE)
_VERDICT = re.compile(r"^\W*(?:yes|no)\b\W*", re.IGNORECASE)  # "No, ..." answers a yes/no question; it denies nothing on the page


def _label_words(text: str, tokens: frozenset[str] | None = None) -> set[str]:
    """The words that say what a figure is: tokens without digits, and "not" when the text negates
    ("do not go online" is another group than "go online"; the stopword list drops "not").

    _label_words("Net sales 2023 3,226.8") -> {"net", "sales"}; _label_words("do not go online") -> {"go", "online", "not"}
    ``tokens``: the text's tokens, when they were read already (a question's, ``ParsedQuestion.words``).
    """
    words = {w for w in (tokenize(text) if tokens is None else tokens) if not any(c.isdigit() for c in w)}
    return words | {"not"} if _NEGATION.search(text) else words


@rules.switch("figure_in_place", stand_in=frozenset())
def misplaced_figures(claim: str, passage: str, question: str | ParsedQuestion = "") -> set[str]:
    """Rule: a figure must stand in its passage beside the thing it is said of, and beside the claim's year.
    The claim's figures the passage holds only in the wrong place: in no sentence or table cell whose
    words fit the claim's words as well as any other figure's place does (another row), or only beside
    a year other than the claim's (another column or period), or only in rows of other year spans
    (``in_another_year_span``). The question's subject figures are exempt.

    misplaced_figures("Net income was 412", "| | 2023 |\n| Operating income | 412 |\n| Net income | 296 |") -> {"412"}
    """
    question = as_read(question)
    words = _label_words(claim)
    passage_years = years_in(passage)
    # the question's year is the subject, unless the passage names that year too (then it picks a column)
    years = years_in(claim) - (question.years_written - passage_years)
    units = [(u, _label_words(u), numbers_in(u)) for u in passage_units(passage)]
    figure_units = [(u, w, n) for u, w, n in units if n]
    best_fit = max((len(words & w) for _, w, _ in figure_units), default=0)
    # the passage is read once for all the claim's figures: a claim listing many figures costs no re-reading
    layout, readers = _line_layout(passage), {}
    asked = one_year_spans(claim)
    rows = _row_years(passage) if asked else {}
    misplaced = set()
    for figure in numbers_in(claim) - subject_figures(question) - shared_references(claim, passage):
        if YEAR_TOKEN.match(figure) and figure in passage_years:
            continue  # a year the claim names is context, checked below for each figure beside it
        places = _worded_places([(u, w, n) for u, w, n in figure_units if figure in n], figure, layout, readers)
        fits = [len(words & w) for w, y in places if not (years and y - {figure} and not years & y)]
        if (places and not (fits and max(fits) >= max(best_fit, 1))) or (asked and _only_in_other_years(figure, asked, rows)):
            misplaced.add(figure)
    return misplaced


def _values_lines_after(lines: list[str]) -> list[int]:
    """For each line, the index of the next value-only line after it (len(lines) when none), in one pass.

    _values_lines_after(["Sales", "12", "Costs", "8"]) -> [1, 3, 3, 4]
    """
    stops, following = [], len(lines)
    for i in range(len(lines) - 1, -1, -1):
        stops.append(following)
        if lines[i] and FIGURES_LINE.match(lines[i]):
            following = i
    return stops[::-1]


@dataclass
class _LineLayout:
    """A passage's lines as ``_worded_places`` reads them, worked out once per passage."""
    lines: list[str]  # spaces normalised
    stops: list[int]  # the next value-only line after each line
    at: list[int]  # where each line starts in the text of the lines joined (empty lines left out)
    worded: dict[str, list[int]]  # figure -> the lines with words (not value-only, not table rows) it stands on
    runs: dict[int, tuple[int, str]] = field(default_factory=dict)  # next values line -> (where its run starts, its text)

    def upto_values(self, i: int) -> str:
        """Line ``i`` (not value-only) and the lines after it up to the next value-only line, joined by
        spaces (empty ones left out); each run of lines between value-only lines is joined once, from its
        first line, whichever line asks first: a line's text is a suffix of its run's."""
        stop = self.stops[i]
        if stop not in self.runs:
            first = next(j for j in range(i, -1, -1) if j == 0 or (self.lines[j - 1] and FIGURES_LINE.match(self.lines[j - 1])))
            self.runs[stop] = self.at[first], " ".join(line for line in self.lines[first:stop] if line)
        start, run = self.runs[stop]
        return run[self.at[i] - start :]


def _line_layout(passage: str) -> _LineLayout:
    """The ``_LineLayout`` of ``passage``."""
    lines = [" ".join(line.split()) for line in passage.split("\n")]
    worded: dict[str, list[int]] = {}
    for i, line in enumerate(lines):
        if not (FIGURES_LINE.match(line) or is_table_row(line)):
            for figure in numbers_in(line):
                worded.setdefault(figure, []).append(i)
    at = list(itertools.accumulate((len(line) + 1 if line else 0 for line in lines), initial=0))
    return _LineLayout(lines, _values_lines_after(lines), at, worded)


class _PrefixReading:
    """The label words and years of the prefixes of one place, read incrementally: a prefix is the
    longest prefix cut at a space read before it, plus the text from that one's last word on (a token
    spans at most two words: "FY '19", "Appendix ii"; a year none), so a long place cut at every line
    is read about once, not once per cut.

    _PrefixReading("Net sales 2023 12 Cost of sales 8")(14) -> ({"net", "sales"}, {"2023"})
    """

    def __init__(self, text: str):
        self.text, self.ends, self.read = text, [0], [(frozenset(), frozenset())]

    def __call__(self, end: int) -> tuple[frozenset[str], frozenset[str]]:
        k = bisect.bisect_right(self.ends, end) - 1
        if self.ends[k] == end:
            return self.read[k]
        start = self.text.rfind(" ", 0, self.ends[k]) + 1  # the last word before the prefix already read
        words, years = self.read[k]
        rest = self.text[start:end]
        reading = words | _label_words(rest), years | years_in(rest)
        if self.text[end : end + 1] in ("", " "):  # a prefix cut inside a word holds a part of it: no base
            self.ends.insert(k + 1, end)
            self.read.insert(k + 1, reading)
        return reading


def _reader(readers: dict[str, _PrefixReading], place: str) -> _PrefixReading:
    """The ``_PrefixReading`` of ``place`` kept in ``readers``, made the first time it is asked for."""
    if place not in readers:
        readers[place] = _PrefixReading(place)
    return readers[place]


def _worded_places(places: list[tuple[str, set[str], set[str]]], figure: str, layout: _LineLayout,
                   readers: dict[str, _PrefixReading]) -> list[tuple[set[str], set[str]]]:
    """(label words, years) of ``places`` narrowed to where the passage writes ``figure`` on a line with
    words, when it does anywhere, each place ending where a run of value-only lines begins: such a line
    says what the figure is, and a bare repeat of it among a chart's values (flattened one per line), or
    the labels printed after those values, say nothing more about it. ``readers`` keeps each place's
    ``_PrefixReading`` between the figures of one claim.

    "GDP (per capita): (2014) $4,271" then "$4,271" among "2011", "2012": "$4,271 in 2012" is judged by the first line only
    """
    found: dict[int, int] = {}  # place -> where its last line was found in it
    narrowed: dict[str, tuple[set[str], set[str]]] = {}
    for i in layout.worded.get(figure, []):
        line, upto = layout.lines[i], layout.upto_values(i)
        for k, (unit, words, numbers) in enumerate(places):
            reader = _reader(readers, unit)
            if line in unit:
                # a line repeated in a place is found where it stands, not at its first copy
                start = unit.find(line, found.get(k, 0))
                start = start if start >= 0 else unit.index(line)
                found[k] = start + len(line)
                end = start + len(upto) if unit.startswith(upto, start) else len(unit)
                narrowed[unit[:end]] = reader(end)
            elif unit in line:
                narrowed[unit] = reader(len(unit))
    return list(narrowed.values()) or [_reader(readers, u)(len(u)) for u, _, _ in places]


def in_another_year_span(figure: str, claim: str, passage: str) -> bool:
    """Rule: a figure of one year span (2003-04) does not back a claim about another.
    Does ``figure`` stand only in rows of year spans ("2003-04") other than the claim's? In a table read one
    cell per line, a row's year ("2003-04") is the nearest such line above its figures.

    in_another_year_span("98", "In 2002-03 the dividend was 98", "2002-03\n12\n2003-04\n98") -> True
    """
    asked = one_year_spans(claim)
    return bool(asked) and _only_in_other_years(figure, asked, _row_years(passage))


def _row_years(passage: str) -> dict[str, list[set[str] | None]]:
    """For each figure, the year spans of each line it stands on: those of the nearest line above
    that names some (None when none does), in one pass down the passage (lines naming years are rows' heads).

    _row_years("2002-03\n12\n2003-04\n98") -> {"12": [{"2002-03"}], "98": [{"2003-04"}]}
    """
    rows: dict[str, list[set[str] | None]] = {}
    above = None
    for line in passage.split("\n"):
        if spans := one_year_spans(line):
            above = spans
            continue
        for figure in numbers_in(line):
            rows.setdefault(figure, []).append(above)
    return rows


@rules.switch("year_span_rows", stand_in=False)
def _only_in_other_years(figure: str, asked: set[str], rows: dict[str, list[set[str] | None]]) -> bool:
    """Is every row of ``figure`` (``_row_years``) headed by year spans, none of them ``asked``?"""
    row_years = rows.get(figure, [])
    return bool(row_years) and all(years is not None and not years & asked for years in row_years)


def labelled_values(lines: list[str]) -> list[tuple[str, set[str], set[str]]]:
    """(label line, label words, figures) of each line followed by a run of value-only lines: the rows
    of a table the text extractor writes one cell per line, label first ("Total liabilities" / "$" / "41,190").

    labelled_values(["Total liabilities", "41,190", "Total equity", "$", "18,078"])
      -> [("Total liabilities", {"total", "liabilities"}, {"41190"}), ("Total equity", {"total", "equity"}, {"18078"})]
    """
    rows = []
    for i, line in enumerate(lines):
        if FIGURES_LINE.match(line) or not line.strip():
            continue
        run = []
        for value in lines[i + 1:]:
            if not FIGURES_LINE.match(value):
                break
            run.append(value)
        figures = set().union(*map(numbers_in, run)) if run else set()
        label = _label_words(line) - {"not"}
        if figures and label:
            rows.append((line, label, figures))
    return rows


@rules.switch("cell_per_line_label", stand_in=False)
def under_another_label(claim: str, passage: str, question: str | ParsedQuestion = "") -> bool:
    """Rule: in a table printed one cell per line, a figure belongs to the label above its run of values.
    Does the claim give a figure from the wrong row of a cell-per-line table? True when one of its
    figures stands only under row labels that fit the claim (and question) less well than another row's
    label does ("total liabilities were $59,268" read off "Total liabilities and equity" while the
    passage also has a "Total liabilities" row), or when each of its labels lacks a word of the claim
    that another row's label has (``_lacks_said_qualifier``), or when its best label adds two things of
    which the claim names one (``names_one_side``). A figure also written in prose is left to the other rules.

    under_another_label("Total liabilities were 59,268.", "Total liabilities\n41,190\nTotal liabilities and equity\n59,268") -> True
    """
    question = as_read(question)
    lines = passage.split("\n")
    rows = labelled_values(lines)
    words = _label_words(claim) | _label_words(question.query, question.words)
    # what the claim says the figure is, its subject aside (a measure asked of "cash conversion cycle"
    # lists "Inventories, 2021: 6,854": the question's "cash" picks no row)
    said = _label_words(claim) - {without_possessive(n) for n in question.names | names_in(claim)}
    fit = lambda label: len(label & words) / len(label)  # noqa: E731  (the share of the row's label the claim says)
    in_prose = set().union(*(numbers_in(line) for line in lines if not FIGURES_LINE.match(line)))
    # a year or a span of years ("2003-04") heads a column or a row; it is no figure of one
    for figure in numbers_in(YEAR_SPAN.sub(" ", claim)) - subject_figures(question) - years_in(claim) - in_prose:
        own = [(line, label) for line, label, figures in rows if figure in figures]
        others = [label for _, label, figures in rows if figure not in figures]
        if not own:
            continue
        best_line, best = max(own, key=lambda row: fit(row[1]))
        if others and max(map(fit, others)) >= 0.5 and max(map(fit, others)) > fit(best):
            return True
        if all(_lacks_said_qualifier(label, others, said) for _, label in own) or names_one_side(best_line, words):
            return True
    return False


_AND = re.compile(r"\s(?:and|&)\s", re.I)


@rules.switch("two_sided_row", stand_in=False)
def names_one_side(label_line: str, said: set[str]) -> bool:
    """Rule: a row that adds two things backs neither of them alone.
    Is ``label_line`` a row that adds two things ("Total liabilities and equity") while ``said``
    (the claim's and question's words) names only the first? Its figure is then a sum, not that thing.
    "Cash and cash equivalents" is not such a pair when "cash" is said: its second side says it too.

    names_one_side("TOTAL LIABILITIES AND EQUITY", {"total", "liabilities"}) -> True
    """
    parts = _AND.split(label_line, maxsplit=1)
    if len(parts) < 2:
        return False
    first, second = _label_words(parts[0]), _label_words(parts[1])
    return bool(first & said) and bool(second) and not second & said


@rules.switch("row_qualifier", stand_in=False)
def _lacks_said_qualifier(label: set[str], other_labels: list[set[str]], said: set[str]) -> bool:
    """Rule: a row lacking a word the claim says, where another row has it, is another row.
    Does another row's label hold a word the claim says that this label lacks, and more of the
    claim's words? "Total liabilities" backs no claim about "total long-term liabilities" when "Other
    long-term liabilities" is a row of the same table: the qualifier points at other rows."""
    return any((said - label) & other and len(said & other) > len(said & label) for other in other_labels)


# -----------------------------------------------------------------------------
# Which row a lookup answers: the question's key ("EPS Code AR01", "error 88") and the rows around it

def _shape(token: str) -> str:
    return re.sub(r"[a-z]", "a", re.sub(r"\d", "9", token))


def _is_sibling(token: str, key: str) -> bool:
    """Another row's key of the same kind: "co01" beside "ar01", "q2" beside "q3" (a one-letter code keeps its letter)."""
    if token == key:
        return False
    if key.isdigit():
        return token.isdigit()
    prefix = re.match(r"[a-z]*", key).group(0)
    return _shape(token) == _shape(key) and (len(prefix) >= 2 or token.startswith(prefix))


def row_keys(lines: list[str]) -> list[tuple[int, str]]:
    """(line index, key) of every line that starts a row: a code anywhere in the line, or a whole
    number alone on its line (or first in a table row) with a label on the next line (or in the next cell).

    row_keys(["88", "Boiler:", "over-temperature", "Colorado Springs CO01"]) -> [(0, "88"), (3, "co01")]
    """
    keys = []
    for i, line in enumerate(lines):
        keys += [(i, w) for w in WRITTEN_WORD.findall(line.lower()) if CODE.match(w)]
        cells = [c.strip(" \t.:*") for c in line.strip().strip("|").split("|")]
        label = cells[1] if len(cells) > 1 else (lines[i + 1].strip() if i + 1 < len(lines) else "")
        if cells[0].isdigit() and label[:1].isalpha():
            keys.append((i, cells[0]))
    return keys


@rules.switch("lookup_key_row", stand_in=False)
def beside_another_key(claim: str, passage: str, question: str | ParsedQuestion = "") -> bool:
    """Rule: a lookup ("error 88", "code AR01") is answered from the row of its key.
    Does the claim answer a lookup from another row? True when the passage lists codes like the
    question's but not the question's own, or when the line holding the claim's words is nearer
    another row's key than the question's ("Little Rock" beside CO01 when AR01 was asked).

    beside_another_key("It is Boiler: heat-up time error.", "88\nBoiler:\nover-temperature\n89\nBoiler:\nheat-up time error", "What is error 88?") -> True
    """
    question = as_read(question)
    keys = question.keys
    lines = passage.split("\n")
    marks = [(i, k) for i, k in row_keys(lines) if k in keys or any(_is_sibling(k, key) for key in keys)]
    if not marks:
        return False
    if not any(k in keys for _, k in marks):
        return any(not k.isdigit() for _, k in marks)  # other codes only; a bare number is too common to rule out a page
    answer_words = _label_words(claim) - question.words - {"not"}
    overlaps = [len(answer_words & set(tokenize(line))) for line in lines]
    if not answer_words or not max(overlaps):
        return False
    best = overlaps.index(max(overlaps))
    nearest = min(abs(i - best) for i, _ in marks)
    return not any(k in keys for i, k in marks if abs(i - best) == nearest)


_QUOTE = re.compile(r"[\"“”]([^\"“”]{20,})[\"“”]")


def _squash(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))  # dashes too are punctuation: "Study--" is "Study-"


def said_word_for_word(quote: str, passage: str) -> bool:
    """Is ``quote`` in ``passage`` word for word (case, spacing, punctuation and line breaks aside)?

    said_word_for_word("i, marc silski,  am", "I, Marc Silski, am a Special Agent") -> True
    said_word_for_word("Case Study-- Discrimination", "Case Study- Discrimination") -> True
    """
    return _squash(quote) in _squash(passage)


def unbacked_detail(claim: str, passage: str, question: str | ParsedQuestion = "") -> bool:
    """Does ``claim`` state something word overlap cannot vouch for in ``passage``?
    Five cases: a number, month or name that neither the passage nor the question's subject holds; a figure the passage holds only in another row, sentence or
    year (``misplaced_figures``), or under a worse-fitting row label of a cell-per-line table
    (``under_another_label``); the answer to a lookup read from another row than the question's key
    (``beside_another_key``); a denial ("not", "never"; a yes/no answer's leading "No" is its verdict)
    of a passage that denies nothing; a quotation not in it word for word."""
    question = as_read(question)
    if missing_specifics(claim, passage, question) or misplaced_figures(claim, passage, question):
        return True
    if under_another_label(claim, passage, question) or beside_another_key(claim, passage, question):
        return True
    return denies_what_passage_does_not(claim, passage) or quotes_what_passage_does_not(claim, passage)


@rules.switch("denial", stand_in=False)
def denies_what_passage_does_not(claim: str, passage: str) -> bool:
    """Rule: a denial needs a passage that denies: the page's words in a sentence that says "not" are no support
    (a yes/no answer's leading "No" is its verdict, not a denial).

    denies_what_passage_does_not("The plant is not in Pune.", "The plant is in Pune.") -> True
    """
    return bool(_NEGATION.search(_VERDICT.sub("", claim, count=1))) and not _NEGATION.search(passage)


@rules.switch("quotation", stand_in=False)
def quotes_what_passage_does_not(claim: str, passage: str) -> bool:
    """Rule: a quotation must stand in its passage word for word (case, spacing and punctuation aside).

    quotes_what_passage_does_not('It says "net sales rose sharply in 2023".', "Net sales rose in 2023.") -> True
    """
    return any(not said_word_for_word(quote, passage) for quote in _QUOTE.findall(claim))


# Rule: standing side by side cannot vouch for a rank, a count or a comparison.
_RANK_OR_COUNT = re.compile(
    r"\b(?:how many|most|least|top|bottom|more|less|fewer|compared?|differences?|gap|total|sum|average|"
    r"(?:larg|high|low|bigg|small|great|long|short|old|young|new|lat|earli|fast|slow|strong|weak|cheap)est|best|worst|"
    r"first|second|third|fourth|fifth|last|\d+(?:st|nd|rd|th))\b", re.I)
# Rule: standing side by side cannot vouch for a colour: what a picture shows.
_COLOUR = re.compile(r"\bcolou?rs?\b", re.I)
_LINES_ABOVE = 3  # a label stands on a line above its value ("Wi-Fi Connect" / "a hotspot with 4G connectivity")
# Rule: "the first page", "the 2nd slide" say where to look, not a rank the answer claims
_PAGE_BY_POSITION = re.compile(r"\b(?:first|second|third|fourth|fifth|last|\d+(?:st|nd|rd|th))\s+(?:page|slide)s?\b", re.I)


@rules.switch("restated_question", stand_in=False)
def answer_beside_question(claim: str, passage: str, question: str | ParsedQuestion = "", file_name: str = "") -> bool:
    """Rule: a sentence restating the question is backed when what it adds stands on the page beside what was asked.
    Is ``claim`` the question restated plus an answer that ``passage`` states beside what was asked?
    Small models answer "The email id of Mtre Laurent Nahmiash is lnahmiash@infavocats.com": the
    restated words need not be on the page, but every word the sentence adds must be, on one line or
    just below the lines that hold the question's names and at least half of its words the page has
    (or, for words without a figure, just above: a name above its role on a title page).
    Side by side cannot vouch for a rank, a count, a comparison or a colour (what a picture shows:
    "Red car with black roof" is a caption), nor for a passage without every name of the question.
    A page reference ("on page 10", "the first page") is not a word
    of what was asked, nor a rank. Words are compared in their forms (``word_form``: "stopped" restates "stop"), and
    the passage's document ``file_name`` names what it is about ("BOEING_2022_10K.pdf": ``file_names``).

    answer_beside_question("The car's Wi-Fi Connect uses 4G connectivity.",
                           "Wi-Fi Connect\nTurn it into a hotspot with 4G connectivity", "What does the car's Wi-Fi Connect use?") -> True
    """
    question = as_read(question)
    by_position = rules.on("page_by_position")
    where = _PAGE_BY_POSITION.sub(" ", question.query) if by_position else question.query
    where = NAME_RUN.sub(" ", where)  # a name is no rank: "Best Buy", "First Solar"
    if (rules.on("no_side_by_side_for_ranks") and _RANK_OR_COUNT.search(where)) or (
            rules.on("no_side_by_side_for_colours") and _COLOUR.search(where)):
        return False
    asked = {word_form(w) for w in question.words - pointer_words(question, by_position)}
    added = {word_form(w) for w in tokenize(claim)} - {word_form(w) for w in question.words}
    page_words = {word_form(w) for w in tokenize(passage)}
    on_page = asked & page_words
    # what picks the item ("Safety Connect"): a date the question writes is no item, nor a name its file name writes
    names = {word_form(w) for w in question.name_tokens - {"s"} - file_named(question, file_name) if not date_word(w)}
    names = {name for name in names if not file_names(name, file_name)}
    if not added or not on_page or not names <= page_words:
        return False
    # a name stands above its role ("Rick Scott" / "GOVERNOR"); a figure belongs to the label above it,
    # and the line below a figure is the next row's label
    below = 0 if numbers_in(" ".join(added)) else 1
    lines = passage.split("\n")
    for i, line in enumerate(lines):
        if not added & {word_form(w) for w in tokenize(line)}:
            continue
        place = {word_form(w) for w in tokenize("\n".join(lines[max(0, i - _LINES_ABOVE):i + 1 + below]))}
        if added <= place and names <= place and len(place & on_page) * 2 >= len(on_page):
            return True
    return False


# a question that asks a share wants a percentage; one that asks how many wants a count, never a percentage
_ASKS_SHARE = re.compile(r"\b(?:percent(?:age)?s?|shares?|proportions?|portions?|fractions?)\b", re.I)
_ASKS_COUNT = re.compile(r"\bhow many\b", re.I)
_PERCENT = re.compile(r"%|\bpercent\b", re.I)


@rules.switch("bare_figure_points_at_its_line", stand_in=False)
def bare_figure_backed(claim: str, passage: str, question: str | ParsedQuestion = "") -> bool:
    """Rule: a bare answer (a figure with at most its unit) points at the line it cites: backed where that line prints
    the figure in place, of the kind asked (a share a percentage, a count none).
    Too short to be judged by its words ("60% [L1]"), a bare figure is the model pointing at its line: the line must
    print every figure of it where the question's words place it (``unbacked_detail`` of the question said with the
    figure), and the figure must be of the kind the question asks. Only the line it cites can back it: nothing is
    inferred for a reply this short.

    bare_figure_backed("60% [L1]", "Among GOP-leaning independents, a 60% majority favors legalizing marijuana.",
                       "What share of GOP-leaning independents favor legalizing marijuana?") -> True
    """
    question = as_read(question)
    claim = strip_markers(claim)
    figures = numbers_in(claim) - subject_figures(question)
    # a figure without words is placed by what it answers: the question's words, said with it
    if not figures or not figures <= numbers_in(passage) or unbacked_detail(f"{question.query} {claim}", passage, question):
        return False
    percent = bool(_PERCENT.search(claim))
    if _ASKS_COUNT.search(question.query):
        return not percent
    return percent or not _ASKS_SHARE.search(question.query)


def word_form(token: str) -> str:
    """Rule: a word the question asks is asked in any of its forms ("stop", "stopped"): restating it adds nothing the
    page must hold. A token as its forms share it: an English word's Snowball stem ("stopped", "stops" -> "stop"),
    a plural's "s" dropped with the rule off (``without_s``), any other token as it is."""
    english = language.stemmer("en") if rules.on("question_words_any_form") else None
    return english.stem(token) if english and token.isascii() and token.isalpha() else without_s(token)


def file_names(word: str, file_name: str) -> bool:
    """Rule: a document's file name names its subject for every passage of it ("BOEING_2022_10K.pdf" names Boeing).
    A filing prints its company's name on its cover and statements, seldom in the line that answers. Does ``file_name``
    write ``word`` (a word form of three letters or more), its words run together or not ("GENERALMILLS" writes "mill")?
    Never with the rule off."""
    return rules.on("file_name_names") and len(word) >= 3 and word in _run_together(file_name)


def _run_together(text: str) -> str:
    """``text`` lower-cased, only its letters and digits: "BESTBUY_2019_10K.pdf" -> "bestbuy201910kpdf"."""
    return re.sub(r"[^a-z0-9]+", "", text.lower())


def file_named(question: ParsedQuestion, file_name: str) -> set[str]:
    """The tokens of the names ``question`` writes whole in ``file_name`` (rule file_name_names): "10-K" is "10K" in
    "BESTBUY_2019_10K.pdf", though neither "10" nor "k" alone tells it. (routing.file_named_runs reads the file's
    name for search: capitalised runs and its words of three letters, so neither "10-K" nor "CVS Health"; widening it
    would move retrieval.)"""
    if not rules.on("file_name_names"):
        return set()
    written = _run_together(file_name)
    words = [w for w in WRITTEN_WORD.findall(question.query) if without_possessive(w.lower()) in question.names]
    return {token for w in words if len(name := _run_together(w)) >= 3 and name in written for token in tokenize(w)}


def date_word(token: str) -> bool:
    """Rule: a date the question writes is its subject, its day as much as its month and year ("as of June 30, 2023").
    Is ``token`` (of a name the question writes) a month or a year (its "FY" too): a date, not a name that picks an item?"""
    return rules.on("question_date") and bool(months_in(token) or dates_a_year(token))


def pointer_words(question: ParsedQuestion, by_position: bool) -> set[str]:
    """The tokens of the query's pointers at a place in the document ("on page 10", "Table 2", and with
    ``by_position`` "the first page"): where to look, not words of what is asked.

    pointer_words(parse_question("What is shown on page 10?"), True) -> {"page", "10"}
    """
    pointers = [m.group(0) for m in REFERENCE.finditer(question.query)]
    pointers += [m.group(0) for m in _PAGE_BY_POSITION.finditer(question.query)] if by_position else []
    return set(tokenize(" ".join(pointers))) if pointers else set()


# Rule: words that point at where a fact stands need not be on it ("as stated in the document", "given
# under Unit 8 in the table", "the source states this in the following sentence:").
# So are "based on the information provided in the PDF" and "according to line 2".
_SOURCE_WORDS = frozenset(
    "document documents page pages slide slides table tables figure figures source sources passage text "
    "sentence following stated states says pdf line lines based according".split())


@rules.switch("premise_names", stand_in=frozenset())
def strangers(question: str | ParsedQuestion, sources: list[Hit]) -> set[str]:
    """Rule: a premise no document shares backs nothing.
    The words of the question's multi-word names that no source holds (a premise the documents do
    not share: "the plants of Apple Inc." asked of an Indian tobacco company's report). A capitalised
    word alone ("Singaporean students") need not be a name a document prints; short codes ("FY") neither.
    A source's file name counts: a filing names its company in its statements' headings and seldom in
    its notes, and a passage is one chunk of a page, so many passages never name it ("ulta_beauty_q4.pdf"
    names Ulta Beauty, and with rule file_name_names "GENERALMILLS_2022_10K.pdf" names General Mills).

    strangers("Where are the plants of Apple Inc.?", [Hit(text="The Company's plant is at Andheri", ...)]) -> {"apple", "inc"}
    """
    question = as_read(question)
    file_words = " ".join(re.sub(r"[_.\-]+", " ", hit.doc_name) for hit in sources)
    held = {without_possessive(w.lower()) for w in WRITTEN_WORD.findall(" ".join(hit.text for hit in sources) + " " + file_words)}
    named = {without_possessive(w.lower()) for run in NAME_RUN.findall(question.query) for w in run.split()}
    return {n for n in named if n.isalpha() and len(n) > 2 and not any(file_names(n, hit.doc_name) for hit in sources)} - held


@rules.switch("row_column", stand_in=False)
def in_unnamed_column(claim: str, passage: str, question: str | ParsedQuestion = "") -> bool:
    """Rule: a row's figure backs a sentence only under a column the sentence (or its question) names.
    Does ``claim`` state a figure of the row ``passage`` only from a column it does not name? Columns are
    the row's heads ("2019: 16,525"); named by the claim, else by the question; naming none, any will do.
    A passage of several lines is read into its rows first (``unnamed_column_in_rows``).

    in_unnamed_column("Assets were 16,525 in 2018.", "Assets · 2019: 16,525 · 2018: 15,134", "") -> True
    """
    question = as_read(question)
    if "\n" in passage:
        return unnamed_column_in_rows(claim, passage, question)
    return _in_unnamed_column_of_row(claim, passage, question)


def unnamed_column_in_rows(claim: str, passage: str, question: str | ParsedQuestion = "") -> bool:
    """Does ``claim`` state a figure that ``passage`` prints only in table rows, each time under a column
    the claim (or its question) does not name? A table the text extractor writes one cell per line under a
    run of year heads is read into rows with those heads, as the evidence lines read it (``pages.page_lines``).

    unnamed_column_in_rows("Assets were 15,134 in 2019.", "2019\n2018\nAssets\n16,525\n15,134", "") -> True
    """
    question = as_read(question)
    rows, outside = _passage_rows(passage)
    for figure in numbers_in(claim) - years_in(claim):
        holding = [row for row in rows if figure in numbers_in(" ".join(value for _, value in row_cells(row)))]
        if holding and figure not in outside and all(_in_unnamed_column_of_row(claim, row, question) for row in holding):
            return True
    return False


@functools.lru_cache(maxsize=256)
def _passage_rows(passage: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """The table rows of ``passage`` with their column heads (``pages.page_lines``), and the figures it prints
    outside them (a figure also in prose may be backed there)."""
    rows = [line for line in page_lines(passage) if line.kind == "row" and len(row_cells(line.text)) >= 2]
    outside, at = [], 0
    for row in rows:
        outside.append(passage[at : row.start])
        at = max(at, row.end)
    outside.append(passage[at:])
    return tuple(row.text for row in rows), frozenset(numbers_in(" ".join(outside)))


def _in_unnamed_column_of_row(claim: str, passage: str, question: ParsedQuestion) -> bool:
    """``in_unnamed_column`` for one row line."""
    cells = row_cells(passage)
    if len(cells) < 2:
        return False
    named = [value for head, value in cells if cells_module.names_column(head, cells_module.words_of(claim), years_in(claim))]
    if not named:
        named = [value for head, value in cells if cells_module.names_column(head, question.cell_words, question.years_written)]
    if not named:
        return False
    in_named = {n for value in named for n in numbers_in(value)}
    in_row = {n for _, value in cells for n in numbers_in(value)}
    return any(figure in in_row and figure not in in_named for figure in numbers_in(claim) - years_in(claim))


def support_scores(sentence: str, sources: list[Hit], question: str | ParsedQuestion = "", unknown: set[str] = frozenset()) -> list[float]:
    """How well each source supports a sentence: its word overlap divided by SUPPORT_MIN_OVERLAP, so >= 1
    means supported (1 for a restated question with its answer beside what was asked); 0 when the sentence
    has a detail the source cannot back (``unbacked_detail``): similar wording is no support for a figure
    the passage lacks.
    A sentence with a word of ``unknown`` (the question's ``strangers``) is backed by none."""
    question = as_read(question)
    claim = strip_markers(sentence)
    words = set(tokenize(claim))
    if unknown & {without_possessive(w.lower()) for w in WRITTEN_WORD.findall(claim)}:
        return [0.0] * len(sources)
    subject = question.subject_words  # the question's subject ("Ulta Beauty", "FY2023"): the tokens of its names, its years
    scores = []
    for hit in sources:
        if unbacked_detail(claim, hit.text, question) or in_unnamed_column(claim, hit.text, question):
            scores.append(0.0)
            continue
        passage_words = set(tokenize(hit.text))
        # neither the question's subject nor words pointing at the source need be repeated by the passage
        source_words = _SOURCE_WORDS if rules.on("source_words") else frozenset()
        needed = words - ((subject | source_words) - passage_words)
        # Rule: a sentence is backed by a passage that holds most of its words (SUPPORT_MIN_OVERLAP of them)
        overlap = len(needed & passage_words) / len(needed) if len(needed) >= 2 and rules.on("overlap_measure") else 0.0
        restated = 1.0 if answer_beside_question(claim, hit.text, question, hit.doc_name) else 0.0
        scores.append(max(overlap / config.SUPPORT_MIN_OVERLAP, restated))
    return scores


def verify_answer(answer: str, sources: list[Hit], question: str | ParsedQuestion = "") -> list[CheckedSentence]:
    """Check every sentence of ``answer`` to ``question`` against the numbered ``sources`` ([1] is sources[0]).
    ``question``: as qa.py read it (question.parse_question: the query, its instructions apart), or a text read whole."""
    question = as_read(question)
    sentences = split_sentences(answer)
    if not sentences or not sources:
        return [CheckedSentence(s, [], None) for s in sentences]
    unknown = strangers(question, sources)
    sources = in_digits(sources)
    checked = []
    for said in sentences:
        cited = parse_citations(said)
        sentence = in_digits_as_asked(said, question)
        fabricated = [n for n in cited if not 1 <= n <= len(sources)]
        # Rule: a calculation line is arithmetic that calc.py works out, not a claim a page could back.
        # No judged ✓ rests on it (no person is asked to judge a line the checker leaves unjudged); it pays
        # on dev677 and fresh_fb, whose 7 and 2 calculation lines (40 in 12 judged sets) would each be shown
        # ⚠ without it, the app's own arithmetic flagged as unbacked.
        arithmetic = rules.on("arithmetic_lines_unjudged") and calc.is_arithmetic_line(sentence)
        if len(tokenize(strip_markers(sentence))) < config.SUPPORT_MIN_WORDS or arithmetic:
            pointed = [] if arithmetic else [
                Citation(n, sources[n - 1].doc_name, sources[n - 1].page, sources[n - 1].collection, True)
                for n in cited if 1 <= n <= len(sources) and bare_figure_backed(sentence, sources[n - 1].text, question)]
            checked.append(CheckedSentence(said, pointed, True if pointed else None, fabricated))
            continue
        scores = support_scores(sentence, sources, question, unknown)
        citations = [
            Citation(n, sources[n - 1].doc_name, sources[n - 1].page, sources[n - 1].collection, scores[n - 1] >= 1)
            for n in cited
            if 1 <= n <= len(sources)
        ]
        if any(c.verified for c in citations):
            citations = [c for c in citations if c.verified]  # co-cited pages that do not back it add only noise
        else:
            best = max(range(len(scores)), key=scores.__getitem__)
            if scores[best] >= 1:  # no marker, or a wrong one: attribute the sentence to the page that backs it
                hit = sources[best]
                citations.append(Citation(best + 1, hit.doc_name, hit.page, hit.collection, True, inferred=True))
        supported = any(c.verified for c in citations)
        checked.append(CheckedSentence(said, citations, supported, fabricated))
    return checked


def in_digits(sources: list[Hit]) -> list[Hit]:
    """Rule: a number written in words is the figure its digits write ("seven working days" backs "7 working days").
    The sources as the checker reads them: their numbers in words written in digits (``text_utils.number_words_as_digits``),
    as each sentence is read (``in_digits_as_asked``). With the rule off, the sources as they are."""
    if not rules.on("figures_in_words"):
        return sources
    return [dataclasses.replace(hit, text=number_words_as_digits(hit.text)) for hit in sources]


def in_digits_as_asked(sentence: str, question: ParsedQuestion) -> str:
    """A sentence as the checker reads it: its numbers in words written in digits, but for those the question writes
    ("the two plants" restates "Where are the two plants?": no figure the page must print). With the rule off, as it is."""
    if not rules.on("figures_in_words"):
        return sentence
    return number_words_as_digits(sentence, keep=question.words)
