"""The decimal numbers a page quotes, and those of them its reference never prints.

`numbers(text)` finds them outside code spans, comments and link targets;
`unsourced(text, reference)` lists those of RESULTS.md that the reports
regenerated from the committed summaries do not print
(`tests/experiments/test_results_md.py`).
"""

from __future__ import annotations

import re

# Decimal numbers as prose quotes them: `0.990`, `+0.017`, `-0.128` (a sign
# only where no digit or word runs into it: `0.87-0.95` is two numbers).
_NUMBER = re.compile(r"(?<![\w.+-])[+-]?\d+\.\d+(?![\d.])|(?<=[\w-])\d+\.\d+(?![\d.])")
_CODE = re.compile(r"`[^`\n]*`|<!--.*?-->|\]\([^)]*\)", re.S)


def numbers(text: str) -> list[str]:
  """The decimal numbers of `text` outside code spans, comments and link targets."""
  return [m.group(0) for m in _NUMBER.finditer(_CODE.sub(" ", text))]


def unsourced(text: str, reference: str) -> list[str]:
  """The decimal numbers of `text` (RESULTS.md) that `reference` (the reports
  regenerated from the committed summaries) never prints: a hand-typed
  number, or one the data no longer gives."""
  known = set(numbers(reference))
  return [n for n in numbers(text) if n not in known]
