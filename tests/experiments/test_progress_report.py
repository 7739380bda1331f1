"""Where a sweep stands (experiments/extrapolation/progress_report.py)."""

import pytest

from experiments.extrapolation import progress_report
from experiments.extrapolation import report as report_lib
from experiments.extrapolation import run_summary
from experiments.extrapolation import runs as runs_lib

DYCK = runs_lib.TaskSpec("dyck", later_kinds=("fire", "cope"), chosen_kinds=("rope+fire",))
LISTOPS = runs_lib.TaskSpec("listops_depth", later_kinds=("fire", "cope"))
ARITHMETIC = runs_lib.TaskSpec("modular_arithmetic")
PRESET = runs_lib.Preset(tasks=(DYCK, LISTOPS, ARITHMETIC), kinds=("rope", "alibi"),
                         seeds=(0, 1), protocol_tasks=("dyck",))
BUDGETS = {"dyck": {"budget": 100}, "listops_depth": {"budget": 200},
           "modular_arithmetic": {"budget": None}}


def _summary(task, kind, seed, seconds, arm="scratch", hour=1):
  return dict(task=task, kind=kind, arm=arm, group=kind, seed=seed, splits={},
              seconds=seconds, date=f"2026-12-05 {hour:02d}:00 UTC")


def _rows(markdown):
  lines = [line for line in markdown.splitlines() if line.startswith("| ")][2:]
  return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_each_part_counts_its_landed_runs_in_the_order_the_sweep_runs_them():
  summaries = [_summary("dyck", kind, seed, 100.0, hour=seed + 1)
               for kind in ("rope", "alibi") for seed in (0, 1)]
  summaries += [_summary("dyck", "bifocal_heads", 0, 50.0, arm="surgery", hour=5),
                _summary("dyck", "fire", 0, 300.0), _summary("dyck", "fire", 1, 500.0),
                _summary("dyck", "cope", 0, 1000.0),
                _summary("listops_depth", "rope", 0, 900.0)]
  table = run_summary.cells(summaries)
  costs = {"rope": [1.0, 1.0], "alibi": [0.9, 1.2], "fire": [2.0, 1.5], "cope": [3.0, 6.0]}
  rows = _rows(progress_report.progress_table(PRESET, table, BUDGETS, costs))
  # modular_arithmetic was not learned: never run, not counted.
  assert [r[:4] for r in rows] == [
      ["dyck", "2 kinds", "4 / 4", "2"],
      ["dyck", "the paper's protocol (surgery, continue)", "1 / 4", "0-1"],
      ["listops_depth", "2 kinds", "1 / 4", "0-1"],
      ["dyck", "the roster (2 kinds)", "3 / 4", "1-2"],
      ["dyck", "chosen from the results: `rope+fire`", "0 / 2", "0"],
      ["listops_depth", "the roster (2 kinds)", "0 / 4", "0"]]
  assert rows[0][4] == "2026-12-05 02:00 UTC" and rows[0][5] == "-"
  # dyck's roster: cope seed 1 at cope's own median (its step cost unused).
  assert rows[3][5] == f"{1000 / 3600:.1f}"
  # listops_depth's kinds: rope seed 1 at rope's 900 s; alibi, never run
  # there, at its slower step-time reading (1.2) times the task's pace (rope's
  # 900 / 1.0, the only kind run there), not at its dyck runs' ratio.
  assert rows[2][5] == f"{(900 + 2 * 900 * 1.2) / 3600:.1f}"
  # listops's roster: fire at 900 x 2.0 per seed, cope 900 x 6.0.
  assert rows[5][5] == f"{2 * 900 * (2.0 + 6.0) / 3600:.1f}"
  # dyck's pace: the median over rope (100 / 1), alibi (100 / 1.2), fire
  # (400 / 2), cope (1000 / 6): (100 + 1000 / 6) / 2.
  pace = (100 + 1000 / 6) / 2
  # The protocol: surgery seed 1 at its own run's 50 s; `continue`'s rope, not
  # run in that arm, at the task's pace.
  assert rows[1][5] == f"{(50 + 2 * pace) / 3600:.1f}"
  assert progress_report.run_seconds(table, runs_lib.Run(DYCK, "rope", 0, arm="continue"),
                                     costs) == pytest.approx(pace)
  # The chosen mixed kind at its slower part's cost (fire's 2.0).
  assert rows[4][5] == f"{2 * 2.0 * pace / 3600:.1f}"
  assert progress_report.run_seconds(table, runs_lib.Run(DYCK, "rope+fire", 0),
                                     costs) == pytest.approx(2.0 * pace)


def test_without_step_costs_a_kind_not_run_is_expected_at_the_longest_run_or_unknown():
  table = run_summary.cells([_summary("dyck", "rope", 0, 100.0),
                                      _summary("dyck", "alibi", 0, 400.0),
                                      _summary("dyck", "bifocal_heads", 0, 50.0, arm="surgery")])
  rows = {r[1]: r[5] for r in _rows(progress_report.progress_table(PRESET, table, BUDGETS))
          if r[0] == "dyck"}
  assert rows["the roster (2 kinds)"] == f"{4 * 400 / 3600:.1f}"  # fire, cope: the longest
  # `continue` has no run of its own arm and no step costs to scale rope by.
  assert rows["the paper's protocol (surgery, continue)"] == "?"


def test_a_task_not_yet_calibrated_says_so_and_the_section_names_its_estimate():
  table = run_summary.cells([_summary("dyck", "rope", 0, 100.0)])
  rows = _rows(progress_report.progress_table(PRESET, table, {"dyck": {"budget": 100}}))
  assert {r[0]: r[5] for r in rows if r[1] == "2 kinds"}["modular_arithmetic"] == (
      "not calibrated")
  text = progress_report.progress_section(PRESET, table, BUDGETS)
  assert text.startswith("Progress, in the order the sweep runs its parts.")
  assert "counted once chosen" not in text  # the preset has no `extend`


def test_the_report_opens_with_the_progress_table(tmp_path):
  report = report_lib.report(PRESET, str(tmp_path), step_costs_file=None)
  assert "| dyck | 2 kinds | 0 / 4 | 0 | - | not calibrated |" in report


def test_first_run_check_expects_each_kind_as_if_it_had_not_run():
  table = run_summary.cells([
      _summary("dyck", "rope", 0, 100.0), _summary("dyck", "rope", 1, 300.0),
      _summary("dyck", "alibi", 0, 400.0), _summary("dyck", "fire", 0, 900.0),
      _summary("dyck", "rope", 0, 5.0, arm="continue")])  # not from scratch: not counted
  costs = {"rope": [1.0], "alibi": [2.0, 1.5], "fire": [3.0]}
  ratios = progress_report.first_run_check(table["dyck"], costs)
  # Paces (median time over slowest cost): rope 200, alibi 200, fire 300.
  # rope, as if not run: median(200, 300) = 250 over its median 200 s.
  assert ratios["rope"] == pytest.approx(250 / 200)
  assert ratios["alibi"] == pytest.approx(2.0 * 250 / 400)
  assert ratios["fire"] == pytest.approx(3.0 * 200 / 900)
  # A kind the step benchmark has not timed is not checked.
  assert set(progress_report.first_run_check(table["dyck"], {"rope": [1.0], "alibi": [2.0]})
             ) == {"rope", "alibi"}


def test_a_run_in_length_groups_is_expected_from_the_runs_trained_so():
  """Once a run in length groups has landed on a task, its pending runs in
  groups are timed from those (faster) runs only; before, from every run."""
  grouped = runs_lib.TaskSpec("listops_depth", overrides=(("data.length_groups", 4),))
  plain = [_summary("listops_depth", kind, seed, 800.0) for kind in ("rope", "alibi")
           for seed in (0, 1)]
  costs = {"rope": [1.0], "alibi": [1.0], "fire": [2.0]}
  before = run_summary.cells(plain)
  assert progress_report.run_seconds(before, runs_lib.Run(grouped, "fire", 0),
                                     costs) == pytest.approx(1600.0)
  fast = dict(_summary("listops_depth", "rope", 2, 300.0), overrides={"data.length_groups": 4})
  after = run_summary.cells(plain + [fast])
  # fire: the pace of the grouped runs only (rope's 300 s), alibi too (its own runs were plain).
  assert progress_report.run_seconds(after, runs_lib.Run(grouped, "fire", 0),
                                     costs) == pytest.approx(600.0)
  assert progress_report.run_seconds(after, runs_lib.Run(grouped, "alibi", 2),
                                     costs) == pytest.approx(300.0)
  # A plain run of the task is still timed from the plain runs.
  assert progress_report.run_seconds(after, runs_lib.Run(LISTOPS, "alibi", 2),
                                     costs) == pytest.approx(800.0)
