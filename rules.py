"""The answer path's rules by name: each with the principle it states and the unit test that shows it.

A module registers its rules where they are written (``checker.py``, ``routing.py``); the lab
switches a rule off by name, for a block, without touching the module:

    with rules.off({"denial"}):
        checker.verify_answer(answer, sources, question)   # as if the denial rule were not written

Switched off, a rule that withholds a ✓ lets everything through, and one that grants a ✓ (an
exemption) or reads the text grants nothing. With nothing switched off every rule is in force.
What is switched off is held per context (``contextvars``), so the lab's switches never reach
another thread of the app. A rule's code asks ``on(name)``, or wears ``@switch(name, stand_in=...)``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Rule:
    name: str
    principle: str  # as its "Rule: ..." line states it where it is written
    test: str  # the unit test that shows it: "tests/test_checker.py::test_rule_..."
    forbids: bool = False  # it withholds a ✓ (switched off: lets everything through); else it grants one or reads the text
    switchable: bool = True  # False: registered only, its code does not ask whether it is on
    pays_on: str = ""  # where it was shown to pay: "docs/experiments/<record>.md: <set>, <figure before -> after>" (a test asks one of every rule)


REGISTRY: dict[str, Rule] = {}
_switched_off: ContextVar[frozenset[str]] = ContextVar("rules_switched_off", default=frozenset())


def register(name: str, principle: str, test: str, *, forbids: bool = False, switchable: bool = True, pays_on: str = "") -> Rule:
    """Add a rule to ``REGISTRY``; a name names one rule."""
    rule = Rule(name, principle, test, forbids, switchable, pays_on)
    # the same rule again is no error: a module imported anew (Streamlit re-imports an edited one) registers again
    if REGISTRY.get(name, rule) != rule:
        raise ValueError(f"two rules are registered as {name!r}")
    REGISTRY[name] = rule
    return rule


def on(name: str) -> bool:
    """Is rule ``name`` in force (not switched off by ``off``)? An unknown name is an error: a misspelt
    switch would otherwise leave its rule in force whatever the lab asks."""
    if name not in REGISTRY:
        raise KeyError(f"no rule {name!r}")
    return name not in _switched_off.get()


@contextlib.contextmanager
def off(names: Iterable[str]) -> Iterator[None]:
    """Within the block, the named rules are switched off (besides any switched off around it)."""
    names = frozenset(names)
    if unknown := sorted(names - REGISTRY.keys()):
        raise ValueError(f"no rule named {', '.join(unknown)}; the rules: {', '.join(REGISTRY)}")
    if fixed := sorted(n for n in names if not REGISTRY[n].switchable):
        raise ValueError(f"rule {', '.join(fixed)} is registered only: it cannot be switched off")
    token = _switched_off.set(_switched_off.get() | names)
    try:
        yield
    finally:
        _switched_off.reset(token)


def switch(name: str, stand_in: object) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A decorator: the function states rule ``name`` and answers ``stand_in`` while the rule is switched off."""
    if name not in REGISTRY:
        raise KeyError(f"no rule {name!r}")

    def wrap(rule: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(rule)
        def in_force(*args: P.args, **kwargs: P.kwargs) -> R:
            return rule(*args, **kwargs) if name not in _switched_off.get() else stand_in
        return in_force
    return wrap
