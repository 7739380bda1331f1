"""docs/roster.md's table has one row per position kind of the registry, and
its step-cost column is what the leaderboards print from the committed
benchmark files (`leaderboard_report.step_costs`): no number written by hand."""

import pathlib
import re

from bifocal_jax.nn import positions
from experiments.extrapolation import leaderboard_report

ROSTER = pathlib.Path(__file__).resolve().parent.parent / "docs" / "roster.md"
COST_HEADER = "step time / RoPE's (default / large)"


def _cost_rows() -> dict[str, str]:
  """{kind: its cost cell} of every table whose last column is the step cost."""
  rows, in_cost_table = {}, False
  for line in ROSTER.read_text().splitlines():
    if not line.startswith("|"):
      in_cost_table = False
      continue
    cells = [c.strip() for c in line.strip("|").split("|")]
    if cells[-1] == COST_HEADER:
      in_cost_table = True
    elif in_cost_table and (kind := re.fullmatch(r"`([\w+]+)`", cells[0])):
      assert kind[1] not in rows, f"{kind[1]} has two rows"
      rows[kind[1]] = cells[-1]
  return rows


def test_every_kind_has_one_row():
  rows = _cost_rows()
  assert set(positions.POSITION_KINDS) <= set(rows)
  assert all(positions.is_valid_kind(kind) for kind in rows)


def test_the_cost_column_is_the_benchmarks():
  configs, costs = leaderboard_report.step_costs()
  assert configs == ("default", "large")
  for kind, cell in _cost_rows().items():
    expected = " / ".join(f"{r:.2f}x" for r in costs[kind]) if kind in costs else "not measured"
    assert cell == expected, f"{kind}: the roster says {cell!r}, the benchmarks {expected!r}"
