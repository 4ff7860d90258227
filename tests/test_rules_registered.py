"""Every "Rule:" line in the product is a registered rule (rules.py): its principle, its unit test, its switch.

A rule is written where its code is, as a line that opens a docstring line or a comment with "Rule: ".
Its principle is that line's first sentence, exactly: from after "Rule: " up to the period that ends it
(a period inside brackets or quotes ends nothing), the lines it runs on read as one, the period left off;
a sentence with no period ends with its comment or its docstring paragraph. The registered principle of
the rule is that text, word for word.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

import rules
from test_qa import facts  # noqa: F401  (a fixture: the answer path's rules are shown on its facts)
from test_retriever import filings  # noqa: F401  (a fixture: the retriever's rules are shown on its filings)

ROOT = Path(__file__).resolve().parent.parent
_NOT_PRODUCT = {"tests", "evaluation", "__pycache__", "venv", "node_modules", "site-packages"}
_COMMENT_RULE = re.compile(r"#\s*Rule: (?P<text>.*)$")  # a comment, on a line of its own or after code
_DOCSTRING_RULE = re.compile(r'^\s*(?P<opens>[rRuU]?""")?\s*Rule: (?P<text>.*)$')  # a docstring's line, its first or another


def product_files() -> list[Path]:
    """Every .py file of the product: outside tests/, evaluation/ and hidden or installed folders."""
    return sorted(path for path in ROOT.rglob("*.py")
                  if not any(part in _NOT_PRODUCT or part.startswith(".") for part in path.relative_to(ROOT).parts[:-1]))


def first_sentence(text: str) -> str:
    """The text up to the period that ends its first sentence, that period left off; a period inside brackets
    or quotes ("Rs. 1,039", "It rose 5%.") ends nothing.

    first_sentence('a lookup ("error 88.") is read. Then more') -> 'a lookup ("error 88.") is read'
    """
    depth, quoted = 0, False
    for at, char in enumerate(text):
        if char == '"':
            quoted = not quoted
        elif not quoted and char in "([":
            depth += 1
        elif not quoted and char in ")]":
            depth = max(0, depth - 1)
        elif char == "." and not depth and not quoted and (at + 1 == len(text) or text[at + 1].isspace()):
            return text[:at].strip()
    return text.strip()


def rule_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, principle) of each "Rule:" line of a file: its first sentence, read on over the lines
    it runs on (the comment's next comment lines, or the rest of the docstring's paragraph)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    for index, line in enumerate(lines):
        docstring = _DOCSTRING_RULE.match(line)
        if docstring and (docstring.group("opens") or _in_docstring(lines, index)):
            text, in_comment = docstring.group("text"), False
        elif comment := _COMMENT_RULE.search(line):
            text, in_comment = comment.group("text"), True
        else:
            continue
        ended = '"""' in text
        text = text.split('"""')[0]
        for following in lines[index + 1 :]:
            if ended or first_sentence(text) != text.strip():  # its period is on the lines read
                break
            following = following.strip()
            if in_comment:
                if not following.startswith("#"):
                    break
                following = following.lstrip("#").strip()
            if not following or following.startswith('"""'):
                break
            ended = '"""' in following
            text += " " + following.split('"""')[0]
        found.append((index + 1, " ".join(first_sentence(text).split())))
    return found


def _in_docstring(lines: list[str], index: int) -> bool:
    """Does line ``index`` stand inside a triple-quoted string (an odd number of them opened above it)?"""
    return sum(line.count('"""') for line in lines[:index]) % 2 == 1


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


RULE_LINES = [(path, number, principle) for path in product_files() for number, principle in rule_lines(path)]
for _module in sorted({_module_name(path) for path, _, _ in RULE_LINES}):
    importlib.import_module(_module)  # each module registers its rules where they are written
REGISTERED = {rule.principle: rule for rule in rules.REGISTRY.values()}


def test_the_rule_lines_are_found_and_read_to_the_end_of_their_sentence():
    assert len(RULE_LINES) >= 60
    assert {path.name for path, _, _ in RULE_LINES} >= {"checker.py", "finance.py", "routing.py", "cells.py", "ingest.py"}
    assert "rules.py" not in {path.name for path, _, _ in RULE_LINES}  # its docs about the convention state no rule
    assert first_sentence('a line ("It rose 5%.", "As a result, ...") is read. The rest') == 'a line ("It rose 5%.", "As a result, ...") is read'
    assert first_sentence("an abbreviation's period ends no sentence (\"Rs. 1,039 million\", \"Fig. 3\").") == (
        "an abbreviation's period ends no sentence (\"Rs. 1,039 million\", \"Fig. 3\")")
    principles = {principle for _, _, principle in RULE_LINES}
    # a docstring's sentence over two lines, and one that ends with its docstring paragraph
    assert ("a measure the question joins to another quantity (to, less, plus, per, a margin, a share of) is only a part of what it asks"
            in principles)
    assert "a sentence is backed by a passage that holds most of its words (SUPPORT_MIN_OVERLAP of them)" in principles


@pytest.mark.parametrize("path, number, principle", RULE_LINES,
                         ids=[f"{path.relative_to(ROOT)}:{number}" for path, number, _ in RULE_LINES])
def test_every_rule_line_is_a_registered_rule(path, number, principle):
    registered = principle in REGISTERED
    assert registered, f'{path.relative_to(ROOT)}:{number} "Rule: {principle}" is registered by no rule'


def test_every_registered_rule_is_stated_by_a_rule_line():
    stated = {principle for _, _, principle in RULE_LINES}
    assert [name for name, rule in rules.REGISTRY.items() if rule.principle not in stated] == []


def test_every_registered_rule_names_a_test_that_exists():
    for name, rule in rules.REGISTRY.items():
        path, _, test = rule.test.partition("::")
        assert path.startswith("tests/test_") and test, (name, rule.test)
        assert (ROOT / path).is_file(), (name, rule.test)
        assert re.search(rf"^def {re.escape(test)}\(", (ROOT / path).read_text(encoding="utf-8"), re.MULTILINE), (name, rule.test)


def _own_test(name: str):
    path, _, test = rules.REGISTRY[name].test.partition("::")
    return getattr(importlib.import_module(Path(path).stem), test)  # tests/ is on the path, as for conftest


# A rule whose test needs a store, a model or a server is slow to show switched off, as its own test is
SWITCHED = [pytest.param(name, id=name, marks=[pytest.mark.slow] if inspect.signature(_own_test(name)).parameters else [])
            for name, rule in rules.REGISTRY.items() if rule.switchable]


@pytest.mark.parametrize("name", SWITCHED)
def test_a_rule_switched_off_by_name_fails_its_own_test(name, request):
    """Each switchable rule's own test fails without it: the switch reaches the rule, and the test tests it.
    A test that takes fixtures is given them here (its module's own fixtures are imported above) and is run
    switched off only: switched on, it runs in its own module."""
    own_test = _own_test(name)
    fixtures = list(inspect.signature(own_test).parameters)
    if not fixtures:
        own_test()  # in force: passes
    given = {fixture: request.getfixturevalue(fixture) for fixture in fixtures}  # outside the block: a missing one is no failure of the rule
    with rules.off({name}), pytest.raises((Exception, pytest.fail.Exception)):  # an assertion, or an answer the test cannot read
        own_test(**given)
    assert rules.on(name)  # switched back on after the block


def test_every_rule_names_the_record_where_it_was_shown_to_pay():
    """A rule no judged set shows to pay goes (issue 57): each names the docs/experiments record, and the set and
    figure, where it paid ("docs/experiments/<record>.md: <set>, <figure before -> after>")."""
    for name, rule in rules.REGISTRY.items():
        record, _, figure = rule.pays_on.partition(": ")
        assert record.startswith("docs/experiments/") and (ROOT / record).is_file(), (name, rule.pays_on)
        assert figure.strip(), (name, rule.pays_on)
