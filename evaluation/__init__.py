"""The lab: answer evaluation, benchmarks, rule ablations and the judged sets they read (see README.md here).

Run from the repository root as modules, so the app's modules import as they do for the app:
``python -m evaluation.eval_answers``, ``python -m evaluation.bench``, ``python -m evaluation.ablate_rules``.
"""
