"""The door to domain knowledge (domains.py): the generic path names no domain's terms, and one switch turns a domain off."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import calc
import config
import domains
import finance
import reading
import routing
from pages import page_lines
from question import parse_question

REPO = Path(__file__).resolve().parents[1]
# The answer path and what it calls. text_utils.py is left out on purpose: it reads a year however text writes
# it ("FY2019", "fiscal 2019"), which is reading, not knowing what a fiscal year is for.
GENERIC = ["retriever.py", "evidence.py", "context.py", "qa.py", "question.py", "routing.py", "calc.py", "pages.py", "domains.py",
           "checker.py", "rules.py", "overview.py"]
# What only the finance domain may know: statements, their line items, measures and fiscal years.
FINANCE_TERMS = re.compile(r"statement|balance.?sheet|cash.?flow|income|fiscal|\bfy|10-?k|10-?q|ebitda|turnover|margin|"
                           r"capex|revenue|liabilit|inventor|financial|\bmeasure(?!_)|measured\b", re.IGNORECASE)


def code_words(path: Path) -> list[str]:
    """The names and string literals of a module's code; docstrings and comments (examples, history) left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    # a rule's registration (rules.py) quotes its docstring's "Rule:" line and the record where it pays
    registered = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "register" and isinstance(node.func.value, ast.Name) and node.func.value.id == "rules"
                  for given in [*node.args, *(keyword.value for keyword in node.keywords)] for arg in ast.walk(given)}
    words = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.append(node.id)
        elif isinstance(node, ast.Attribute):
            words.append(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.arg)):
            words.append(getattr(node, "name", None) or node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings | registered:
            words.append(node.value)
    return words


@pytest.mark.parametrize("module", GENERIC)
def test_the_generic_answer_path_names_no_statement_measure_or_fiscal_year(module):
    found = sorted({word for word in code_words(REPO / module) if FINANCE_TERMS.search(word)})
    assert found == [], f"{module} knows finance: {found}"


def test_the_finance_terms_are_found_where_they_live():
    assert any(FINANCE_TERMS.search(word) for word in code_words(REPO / "finance.py"))  # the check can see them


BALANCE_SHEET = "\n".join(["CONSOLIDATED BALANCE SHEETS", "2021", "2020"] + [
    cell for label in ("Cash", "Receivables", "Inventories", "Total current assets", "Payables", "Total current liabilities")
    for cell in (label, "1,000", "900")])


def test_one_switch_turns_the_finance_domain_off(monkeypatch):
    question = "What is the current ratio in 2021? Base your answer on the balance sheet."
    assert parse_question(question).hints == ["balance sheet"] and domains.page_marks(BALANCE_SHEET) == ["balance sheet"]
    assert domains.prompt_notes(question) and calc.asks_calculation("What is the inventory turnover?")
    assert routing.document_profile("a.pdf", ["ACME Form 10-K for the fiscal year ended May 31, 2021"]).own_year == "2021"
    monkeypatch.setattr(config, "DOMAINS", "")
    assert parse_question(question).hints == [] and domains.page_marks(BALANCE_SHEET) == []
    assert domains.prompt_notes(question) == [] and not calc.asks_calculation("What is the inventory turnover?")
    assert domains.line_ranking(parse_question(question), page_lines(BALANCE_SHEET)) is None and domains.answer_in_code(question, []) is None
    profile = routing.document_profile("a.pdf", ["ACME Form 10-K for the fiscal year ended May 31, 2021"])
    assert profile.own_year == "" and profile.doc_type == "" and profile.wording == "plain"
    assert "Formula" not in reading.build_messages(question, [], [])[-1].content


def test_an_unknown_domain_is_a_plain_error(monkeypatch):
    monkeypatch.setattr(config, "DOMAINS", "finance,contracts")
    with pytest.raises(config.SettingError, match="contracts"):
        domains.active()


def test_the_finance_hooks_answer_through_the_door():
    assert domains.pages_needed("What is the inventory turnover?") == finance.statements_measured("What is the inventory turnover?")
    assert domains.in_wording("Capex in FY2019?", "plain") == "Capex in 2019?" and domains.wordings()[0] == "plain"
