"""Where a sweep stands (benchmarks/progress_report.py)."""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import extrapolation_report  # pylint: disable=g-import-not-at-top,wrong-import-position
import extrapolation_runs as runs_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
import progress_report  # pylint: disable=g-import-not-at-top,wrong-import-position

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
  table = extrapolation_report.cells(summaries)
  rows = _rows(progress_report.progress_table(PRESET, table, BUDGETS))
  # modular_arithmetic was not learned: never run, not counted.
  assert [r[:4] for r in rows] == [
      ["dyck", "2 kinds", "4 / 4", "2"],
      ["dyck", "the paper's protocol (surgery, continue)", "1 / 4", "0-1"],
      ["listops_depth", "2 kinds", "1 / 4", "0-1"],
      ["dyck", "the roster (2 kinds)", "3 / 4", "1-2"],
      ["dyck", "chosen from the results: `rope+fire`", "0 / 2", "0"],
      ["listops_depth", "the roster (2 kinds)", "0 / 4", "0"]]
  assert rows[0][4] == "2026-12-05 02:00 UTC" and rows[0][5] == "-"
  # dyck's roster: cope seed 1 at cope's own median.
  assert rows[3][5] == f"{1000 / 3600:.1f}"
  # listops_depth's kinds: rope seed 1 at rope's 900 s; alibi, never run there,
  # at listops rope's 900 s times alibi's cost over rope on dyck (100 / 100).
  assert rows[2][5] == f"{(900 + 900 + 900) / 3600:.1f}"
  # listops's roster: fire at 900 x (400 / 100) per seed, cope 900 x 10.
  assert rows[5][5] == f"{2 * (3600 + 9000) / 3600:.1f}"
  # The protocol's surgery arm timed by its own run; the continue arm: nothing yet.
  assert rows[1][5] == "?"
  # The chosen mixed kind has run nowhere: no estimate.
  assert rows[4][5] == "?"


def test_a_task_not_yet_calibrated_says_so_and_the_section_names_its_estimate():
  table = extrapolation_report.cells([_summary("dyck", "rope", 0, 100.0)])
  rows = _rows(progress_report.progress_table(PRESET, table, {"dyck": {"budget": 100}}))
  assert {r[0]: r[5] for r in rows if r[1] == "2 kinds"}["modular_arithmetic"] == (
      "not calibrated")
  text = progress_report.progress_section(PRESET, table, BUDGETS)
  assert text.startswith("Progress, in the order the sweep runs its parts.")
  assert "counted once chosen" not in text  # the preset has no `extend`


def test_the_report_opens_with_the_progress_table(tmp_path):
  report = extrapolation_report.report(PRESET, str(tmp_path), step_costs_file=None)
  assert "| dyck | 2 kinds | 0 / 4 | 0 | - | not calibrated |" in report
