"""The report rebuilt from the summaries alone (experiments/extrapolation/report.py
and its parts): intervals and paired verdicts, the protocol, rankings across
model sizes and tasks, randomized and mixed kinds, probes, leaderboards with
step times, training time, plots, and the generated block of RESULTS.md.
Summaries are written by hand (no training)."""

import dataclasses
import json
import os

import pytest

from extrapolation_helpers import PRESET, TASK, table_rows

from experiments.extrapolation import leaderboard_report as leaderboard_lib
from experiments.extrapolation import report as report_lib
from experiments.extrapolation import report_pages
from experiments.extrapolation import run_summary
from experiments.extrapolation import sweep as ex
from experiments.extrapolation import training_time_report as training_time_lib

def _summary(group, seed, arm="scratch", loss_offset=0.0, **accuracy):
  kind = group.split("_frozen")[0]
  splits = {name: dict(accuracy=a, ci95=[a - 0.01, a + 0.01], by_length={"50": a},
                       by_depth={"0": a}) for name, a in accuracy.items()}
  out = dict(task="odds_first", kind=kind, arm=arm, group=group, seed=seed, steps=400, budget=400,
             config="configs/odds_first.py", final_train_loss=0.1 * (seed + 1) + loss_offset, splits=splits,
             seconds=60.0, date=f"2026-11-30 1{seed}:00 UTC")
  if kind == "bifocal_heads":
    out["spectrum"] = dict(drift=0.1, harmonic_score=0.2 + 0.01 * seed, fraction_explained=0.5,
                           geometric_score=0.1, final=[[1.0, 0.1]])
  return out


def _write(results, summaries):
  for s in summaries:
    path = os.path.join(results, s["task"], s["arm"], s["group"], f"seed{s['seed']}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      json.dump(s, f)


def test_report_rows_and_pairings_of_a_mixed_kind(tmp_path):
  results = str(tmp_path)
  rope = [0.50, 0.60, 0.55]
  _write(results, [_summary("rope", i, valid=0.9, test_length=a) for i, a in enumerate(rope)] +
         [_summary("rope+cope", i, valid=0.9, test_length=a + 0.05) for i, a in enumerate(rope)])
  assert os.path.isfile(os.path.join(results, "odds_first", "scratch", "rope+cope", "seed0.json"))
  preset = ex.Preset(tasks=(TASK,), kinds=("rope", "rope+cope"), seeds=(0, 1, 2),
                     protocol_tasks=())
  markdown = report_lib.report(preset, results)
  assert table_rows(markdown, "rope+cope |")[0][1] == "3"
  assert table_rows(markdown, "rope+cope (scratch) - rope (scratch)")[0][4].startswith("**+0.050 [")


def test_report_intervals_paired_verdicts_and_plots(tmp_path):
  results = str(tmp_path)
  rope = [0.50, 0.60, 0.55, 0.65, 0.58]
  _write(results, [_summary("rope", i, valid=0.9, test_length=a) for i, a in enumerate(rope)]
         # bifocal: +0.05 on every seed on test_length (decided), noise on valid (not).
         # Its final training loss 0.05 lower on every seed (decided).
         + [_summary("bifocal_heads", i, valid=0.9 + (-1) ** i * 0.01, test_length=a + 0.05,
                     loss_offset=-0.05) for i, a in enumerate(rope)]
         + [_summary("bifocal_heads", i, "surgery", valid=0.9, test_length=0.6) for i in range(3)]
         + [_summary("rope", i, "continue", valid=0.9, test_length=0.6) for i in range(3)])
  with open(os.path.join(results, "budgets.json"), "w") as f:
    json.dump({"odds_first": {"budget": 400, "max_steps": 3000, "curve": [[400, 0.93]]}}, f)
  markdown = report_lib.report(PRESET, results)
  assert "Runs summarised: 16 (of the 10 the preset makes" in markdown  # seeds beyond its two
  assert table_rows(markdown, "odds_first")[0][1:] == ["400", "0.930", "3000"]
  rope_row = table_rows(markdown, "rope |")[0]
  assert rope_row[1:3] == ["5", "5/5"] and rope_row[5].startswith("0.576 [")
  assert table_rows(markdown, "bifocal_heads |")[0][2] == "3/5"  # seeds at valid 0.89 did not fit
  # The other arms' own accuracies, each cell labelled with its arm.
  surgery_row = table_rows(markdown, "bifocal_heads (surgery) |")[0]
  assert surgery_row[1:3] == ["3", "3/3"] and surgery_row[5].startswith("0.600")
  assert table_rows(markdown, "rope (continue) |")[0][1] == "3"
  bifocal_vs_rope = table_rows(markdown, "bifocal_heads (scratch) - rope (scratch)")[0]
  assert bifocal_vs_rope[1] == "5"
  assert bifocal_vs_rope[2].startswith("**-0.050 [")    # final train loss: decided
  assert not bifocal_vs_rope[3].startswith("**")        # valid: within noise
  assert bifocal_vs_rope[4].startswith("**+0.050 [")    # test_length: decided
  protocol = table_rows(markdown, "bifocal_heads (surgery) - rope (continue)")[0]
  assert protocol[1] == "3" and protocol[4] == "+0.000 [+0.000, +0.000]"
  assert "Learned spectra" in markdown and "bifocal_heads (scratch)" in markdown
  assert os.path.getsize(os.path.join(results, "plots", "extrapolation_odds_first.png")) > 5000


def test_report_reads_the_protocol_in_closing_bracket_accuracy_too(tmp_path):
  """Dyck-like summaries (with `close_accuracy`): the protocol's paired table
  comes twice, token accuracy (loss first) and closing-bracket accuracy."""
  results = str(tmp_path)
  summaries = []
  for seed in range(3):
    for group, arm, token, close in (("bifocal_heads", "surgery", 0.80, 0.70 + 0.01 * seed),
                                     ("rope", "continue", 0.80, 0.60)):
      s = _summary(group, seed, arm, valid=0.9, test_length=token)
      s["splits"]["valid"]["close_accuracy"] = 0.9
      s["splits"]["test_length"]["close_accuracy"] = close
      summaries.append(s)
  _write(results, summaries)
  markdown = report_lib.report(PRESET, results)
  token, close = table_rows(markdown, "bifocal_heads (surgery) - rope (continue)")
  assert token[1] == "3" and token[4] == "+0.000 [+0.000, +0.000]"  # loss, valid, test_length
  assert len(close) == 4 and close[2] == "+0.000 [+0.000, +0.000]"  # valid, test_length
  assert close[3].startswith("**+0.110 [")
  assert (markdown.index("The paper's protocol:") < markdown.index("| bifocal_heads (surgery) -")
          < markdown.index("The same, closing-bracket accuracy:"))


def test_report_compares_rankings_of_one_task_at_two_model_sizes(tmp_path):
  """Tasks sharing a config file (`dyck`, `dyck_5layer`): each kind's mean and
  rank at both sizes, the ranks' correlation, and each size's paired
  difference from rope; a preset with one size has no such section."""
  results = str(tmp_path)
  small, large = ex.TaskSpec("dyck"), ex.TaskSpec("dyck_5layer", config_name="dyck")
  # test_length means: small alibi 0.9 > nope 0.8 > rope 0.7; large rope 0.95 > alibi > nope.
  means = {"dyck": {"rope": 0.7, "alibi": 0.9, "nope": 0.8},
           "dyck_5layer": {"rope": 0.95, "alibi": 0.9, "nope": 0.6}}
  summaries = []
  for task, by_kind in means.items():
    for kind, mean in by_kind.items():
      for seed in range(3):
        noise = 0.01 * (seed - 1) if kind == "nope" else 0.0  # nope - rope: not decided
        s = _summary(kind, seed, valid=0.99, test_length=mean + noise * (task == "dyck") * 10)
        s.update(task=task, config="configs/dyck.py", steps=4000 if task == "dyck" else 2000,
                 overrides={"model.num_layers": 2 if task == "dyck" else 5})
        summaries.append(s)
  _write(results, summaries)
  preset = ex.Preset(tasks=(small, large), kinds=("rope", "alibi", "nope"), seeds=(0, 1, 2))
  markdown = report_lib.report(preset, results)
  section = markdown.split("### Model size", 1)[1]
  assert "`dyck` (2 layers, 4,000 steps) against `dyck_5layer` (5 layers, 2,000 steps)" in section
  ranking, differences = section.split("Minus `rope` on each side", 1)
  rows = {r[0]: r[1:] for r in table_rows(ranking, "") if r[0] not in ("position", "---")}
  assert rows["rope"][:2] == ["3 / 3", "0.700 (3) / 0.950 (1)"]
  assert rows["alibi"][1] == "0.900 (1) / 0.900 (2)"
  assert rows["nope"][1] == "0.800 (2) / 0.600 (3)"
  assert rows["rank correlation (Spearman)"][1] == "-0.50"
  diff_rows = {r[0]: r[1] for r in table_rows(differences, "") if r[0] in ("alibi", "nope")}
  assert diff_rows == {"alibi": "**+0.200** / **-0.050**", "nope": "+0.100 / **-0.350**"}
  only_small = ex.Preset(tasks=(small,), kinds=("rope", "alibi", "nope"), seeds=(0, 1, 2))
  assert "### Model size" not in report_lib.report(only_small, results)


def test_report_sets_the_rankings_of_two_tasks_side_by_side_each_in_its_metric(tmp_path):
  """`Preset.cross_task`: each kind's mean and rank on both tasks, Dyck's in
  closing-bracket accuracy and ListOps' in token accuracy, the ranks'
  correlation and its permutation p; no pair named, no section."""
  results = str(tmp_path)
  dyck, listops = ex.TaskSpec("dyck"), ex.TaskSpec("listops_depth")
  # test_depth: dyck close accuracy nope > alibi > rope > fire (token accuracy
  # the reverse, unread); listops alibi > rope > fire > nope.
  close = {"rope": 0.8, "alibi": 0.9, "nope": 0.95, "fire": 0.7}
  listops_means = {"rope": 0.8, "alibi": 0.85, "nope": 0.6, "fire": 0.7}
  summaries = []
  for kind in close:
    for seed in range(3):
      s = _summary(kind, seed, valid=0.99, test_depth=1.0 - close[kind])
      s["splits"]["test_depth"]["close_accuracy"] = close[kind] + 0.01 * (seed - 1)
      s.update(task="dyck", config="configs/dyck.py")
      o = _summary(kind, seed, valid=0.99, test_depth=listops_means[kind])
      o.update(task="listops_depth", config="configs/listops_depth.py")
      summaries += [s, o]
  _write(results, summaries)
  preset = ex.Preset(tasks=(dyck, listops), kinds=tuple(close), seeds=(0, 1, 2),
                     cross_task=(("dyck", "listops_depth"),))
  section = report_lib.report(preset, results, link_base=str(tmp_path)).split(
      "### Across tasks", 1)[1]
  assert ("`dyck` (closing-bracket accuracy) against `listops_depth` (token accuracy)"
          in section)
  assert "![dyck against listops_depth](plots/across_dyck_listops_depth.png)" in section
  assert os.path.getsize(tmp_path / "plots" / "across_dyck_listops_depth.png") > 0
  ranking, differences = section.split("Minus `rope` on each side", 1)
  rows = {r[0]: r[1:] for r in table_rows(ranking, "") if r[0] not in ("position", "---")}
  assert list(rows)[:4] == ["alibi", "rope", "fire", "nope"]  # by listops_depth's mean
  assert rows["nope"] == ["3 / 3", "0.950 (1) / 0.600 (4)"]
  assert rows["alibi"][1] == "0.900 (2) / 0.850 (1)"
  # Ranks (1, 2, 3, 4) against (4, 1, 2, 3): sum of squared rank differences
  # 12, rho = 1 - 12 / 10 = -0.2. Of the 24 orders of 4, 22 have |rho| >= 0.2
  # (sum <= 8 or >= 12: 11 each), so the exact p is 22 / 24.
  assert rows["rank correlation (Spearman)"][1] == "-0.20"
  assert rows["its permutation p (two-sided)"][1] == "0.92"
  diff_rows = {r[0]: r[1] for r in table_rows(differences, "") if r[0] in ("alibi", "nope")}
  assert diff_rows["nope"] == "**+0.150** / **-0.200**"
  plain = dataclasses.replace(preset, cross_task=())
  assert "### Across tasks" not in report_lib.report(plain, results)


def test_report_pairs_randomized_encodings_with_their_bases_and_across_tasks(tmp_path):
  """Each `randomized_<kind>` against `<kind>` in its task's paired tables, and
  across the tasks scored by the Chomsky-hierarchy protocol: the paired mean of
  `che_score` per (task, pair), their best seeds, and the mean over the rows."""
  results = str(tmp_path)
  summaries = []
  # odds_first: randomized_rope +0.10 on every seed (decided), best 0.75 against 0.60;
  # bucket_sort: randomized_alibi -0.02 .. +0.02 (not decided), best 0.92 against 0.90.
  for task, base, randomized in (("odds_first", "rope", (0.10, 0.10, 0.10)),
                                 ("bucket_sort", "alibi", (-0.02, 0.0, 0.02))):
    for seed in range(3):
      for kind, score in ((base, 0.5 + 0.05 * seed + 0.3 * (task == "bucket_sort")),
                          (f"randomized_{base}", None)):
        value = score if score is not None else (0.5 + 0.05 * seed + 0.3 * (task == "bucket_sort")
                                                 + randomized[seed])
        s = _summary(kind, seed, valid=0.9, che=value)
        s["task"] = task
        s["splits"]["che"]["che_score"] = value
        summaries.append(s)
  summaries.append(_summary("randomized_learnt", 0, valid=0.9, che=0.7))  # no `learnt`: unpaired
  _write(results, summaries)
  preset = ex.Preset(tasks=(ex.TaskSpec("odds_first", ("valid",)),
                            ex.TaskSpec("bucket_sort", ("valid",))),
                     kinds=("rope", "alibi"), seeds=(0, 1, 2))
  markdown = report_lib.report(preset, results)
  in_task = table_rows(markdown, "randomized_rope (scratch) - rope (scratch)")[0]
  assert in_task[1] == "3" and in_task[4].startswith("**+0.100 [")  # loss, valid, che
  assert "randomized_learnt (scratch) - learnt" not in markdown
  section = markdown.split("### Randomization", 1)[1]
  rows = {(r[0], r[1]): r[2:] for r in table_rows(section, "") if r[0] not in ("task", "---")}
  assert rows[("odds_first", "randomized_rope - rope")][:2] == ["3", "**+0.100 [+0.100, +0.100]**"]
  assert rows[("odds_first", "randomized_rope - rope")][2] == "0.700 / 0.600 (+0.100)"
  bucket = rows[("bucket_sort", "randomized_alibi - alibi")]
  assert bucket[1].startswith("+0.000 [") and not bucket[1].startswith("**")
  assert bucket[2] == "0.920 / 0.900 (+0.020)"
  assert rows[("mean over the 2 rows", "")][1:] == ["+0.050", "(+0.060)"]
  without = ex.Preset(tasks=(ex.TaskSpec("odds_first", ("valid",)),), kinds=("rope",),
                      seeds=(0,))
  _write(str(tmp_path / "plain"), [_summary("rope", 0, valid=0.9, che=0.5)])
  assert "### Randomization" not in report_lib.report(without, str(tmp_path / "plain"))


def test_report_pairs_a_mixed_kind_with_each_of_its_kinds(tmp_path):
  """`rope+alibi` against `rope` and against `alibi`, token and closing-bracket
  accuracy; a mix whose second kind never ran is paired with the first only;
  `spectral+alibi` also against `rope+alibi` (other eyes beside the same heads)."""
  results = str(tmp_path)
  summaries = []
  # valid: rope 0.5, alibi 0.7, rope+alibi 0.6 on every seed; closing brackets
  # rope+alibi 0.05 above alibi on every seed
  for seed in range(3):
    for kind, valid in (("rope", 0.5), ("alibi", 0.7), ("rope+alibi", 0.6),
                        ("rope+fire", 0.55), ("spectral+alibi", 0.62)):
      s = _summary(kind, seed, valid=valid + 0.01 * seed)
      s["splits"]["valid"]["close_accuracy"] = valid + 0.01 * seed + 0.15 * (kind == "rope+alibi")
      summaries.append(s)
  _write(results, summaries)
  preset = ex.Preset(tasks=(ex.TaskSpec("odds_first", ("valid",)),),
                     kinds=("rope", "alibi", "rope+alibi", "rope+fire", "spectral+alibi"),
                     seeds=(0, 1, 2))
  section = report_lib.report(preset, results).split("Mixed-scheme heads", 1)[1]
  token, closing = section.split("The same, closing-bracket accuracy", 1)
  token = token.split("\n\n", 2)[1]
  rows = {r[0]: r[1:] for r in table_rows(token, "rope+")}
  assert rows["rope+alibi (scratch) - alibi (scratch)"][2] == "**-0.100 [-0.100, -0.100]**"
  assert rows["rope+alibi (scratch) - rope (scratch)"][2] == "**+0.100 [+0.100, +0.100]**"
  assert list(rows) == ["rope+alibi (scratch) - rope (scratch)",
                        "rope+alibi (scratch) - alibi (scratch)",
                        "rope+fire (scratch) - rope (scratch)"]  # no fire run to pair with
  spectral = {r[0]: r[1:] for r in table_rows(token, "spectral+alibi")}
  assert list(spectral) == ["spectral+alibi (scratch) - alibi (scratch)",
                            "spectral+alibi (scratch) - rope+alibi (scratch)"]  # no spectral run
  assert spectral["spectral+alibi (scratch) - rope+alibi (scratch)"][2] == (
      "**+0.020 [+0.020, +0.020]**")
  close_rows = {r[0]: r[1:] for r in table_rows(closing, "rope+alibi")}
  assert close_rows["rope+alibi (scratch) - alibi (scratch)"][1] == "**+0.050 [+0.050, +0.050]**"


def test_report_probe_table_means_per_cell_scratch_arms_first(tmp_path):
  results = str(tmp_path)
  summaries = []
  for group, arm, depth, eyes in (("rope", "continue", 0.3, {"geometric": 0.02}),
                                  ("rope", "scratch", 0.2, {"geometric": 0.04}),
                                  ("bifocal_heads", "surgery", 0.4,
                                   {"geometric": 0.01, "spectral": 0.03})):
    for seed in range(2):
      s = _summary(group, seed, arm, valid=0.9)
      s["probe"] = dict(
          depth={"valid": dict(accuracy=[0.5, 0.9]),
                 "test_depth": dict(accuracy=[0.1, depth + 0.1 * seed],
                                    unseen_accuracy=[0.0, None])},
          by_eye={"test_depth": dict(match_mass=eyes)}, uniform_mass={"test_depth": 0.05})
      summaries.append(s)
  _write(results, summaries)
  markdown = report_lib.report(PRESET, results)
  table = markdown.split("Mechanism probes", 1)[1]
  rows = [row for row in table_rows(table, "") if row[0].endswith(")")][1:4]
  assert [row[0] for row in rows] == ["rope (scratch)", "rope (continue)",
                                      "bifocal_heads (surgery)"]
  assert rows[0][1] == "2" and rows[0][2] == "0.900 [0.900, 0.900]"
  assert rows[0][3].startswith("0.250 [") and rows[2][3].startswith("0.450 [")
  assert rows[0][4] == "-"  # no seed had an unseen depth
  assert rows[2][5] == "geometric 0.010, spectral 0.030" and rows[2][6] == "0.050"


def test_report_leaderboards_rank_the_kinds_and_count_the_seeds_at_the_target(tmp_path):
  results = str(tmp_path)
  rope = [0.50, 0.60, 0.55]
  _write(results, [_summary("rope", i, valid=0.9, test_length=a) for i, a in enumerate(rope)]
         + [_summary("alibi", i, valid=0.9, test_length=a + 0.3) for i, a in enumerate(rope)]
         + [_summary("nope", i, valid=0.9, test_length=a + (-1) ** i * 0.02)
            for i, a in enumerate(rope)]
         # t5: +0.01, -0.03, +0.01 against alibi seed by seed: not told apart
         + [_summary("t5", i, valid=0.9, test_length=a + 0.29 + (-1) ** i * 0.02)
            for i, a in enumerate(rope)])
  with open(os.path.join(results, "budgets.json"), "w") as f:
    json.dump({"odds_first": {"budget": 400, "max_steps": 3000, "curve": [[400, 0.93]]}}, f)
  preset = ex.Preset(tasks=(TASK,), kinds=("rope", "alibi", "nope", "t5"), seeds=(0, 1, 2),
                     leaderboards=True, targets=(("odds_first", "test_length", 0.85),
                                                 ("dyck", "test_length", 0.5)))
  markdown = report_lib.report(preset, results)
  board = [row for row in table_rows(markdown, "") if row[0] in ("1", "2", "3", "4")]
  # test_length only: valid is not ranked
  assert [row[1] for row in board] == ["alibi", "t5", "nope", "rope"]
  alibi, t5, nope, rope_row = board
  assert alibi[3].startswith("0.850 [") and alibi[4].startswith("**+0.300 [")
  assert not nope[4].startswith("**") and rope_row[4] == "-"
  # minus the first: alibi itself none; t5 undecided; nope and rope decidedly behind
  assert alibi[5] == "-" and t5[5].startswith("-0.003 [") and not t5[5].startswith("**")
  assert nope[5].startswith("**-0.293 [") and rope_row[5].startswith("**-0.300 [")
  assert ("Not told apart from the first, alibi (the paired interval includes zero): t5."
          in markdown)
  # alibi's seeds: 0.80, 0.90, 0.85 against the target 0.85 (this task's, not dyck's)
  assert [row[6] for row in board] == ["2/3", "2/3", "0/3", "0/3"]
  assert "Reaching 0.85 on `test_length` (any seed): alibi (2/3), t5 (2/3)." in markdown
  assert "Leaderboards" not in report_lib.report(dataclasses.replace(preset, leaderboards=False),
                                                 results)


def test_leaderboard_ranks_each_seeds_mean_over_the_held_out_splits(tmp_path):
  results = str(tmp_path)
  # alibi leads test_length, nope test_depth; over both, nope (0.75) ahead of alibi (0.70).
  # rope's seed 2 lacks test_depth: its mean counts seeds 0-1 only.
  scores = {"rope": ((0.5, 0.5), (0.6, 0.5), (0.55, None)),
            "alibi": ((0.9, 0.5), (0.9, 0.5), (0.9, 0.5)),
            "nope": ((0.6, 0.9), (0.6, 0.9), (0.6, 0.9))}
  _write(results, [_summary(kind, i, valid=0.9, test_length=a,
                            **({} if b is None else {"test_depth": b}))
                   for kind, seeds in scores.items() for i, (a, b) in enumerate(seeds)])
  groups = run_summary.cells(run_summary.load_summaries(results))["odds_first"]
  board = leaderboard_lib.leaderboard(groups, ["valid", "test_length", "test_depth"], {})
  overall = board.split("The mean over the held-out splits (`test_length`, `test_depth`;", 1)[1]
  rows = [row for row in table_rows(overall, "") if row[0] in ("1", "2", "3")]
  assert [(row[1], row[2], row[3].split(" ")[0]) for row in rows] == [
      ("nope", "3", "0.750"), ("alibi", "3", "0.700"), ("rope", "2", "0.525")]
  assert rows[1][5].startswith("**-0.050 [")  # alibi minus nope, the same each seed
  # rope: -0.25 and -0.20 over two seeds, too few to call
  assert "Not told apart from the first, nope (the paired interval includes zero): rope." in (
      overall)
  # one held-out split: no mean board
  assert "The mean over" not in leaderboard_lib.leaderboard(groups, ["valid", "test_length"], {})


def test_report_plots_every_kind_against_two_targets(tmp_path):
  results = str(tmp_path / "runs")
  _write(results, [_summary(kind, i, valid=0.9, test_length=a + 0.01 * i, test_depth=b)
                   for kind, a, b in (("rope", 0.5, 0.6), ("alibi", 0.8, 0.7)) for i in range(3)])
  with open(os.path.join(results, "budgets.json"), "w") as f:
    json.dump({"odds_first": {"budget": 400, "max_steps": 3000, "curve": [[400, 0.93]]}}, f)
  preset = ex.Preset(tasks=(TASK,), kinds=("rope", "alibi"), seeds=(0, 1, 2), leaderboards=True,
                     targets=(("odds_first", "test_length", 0.85),
                              ("odds_first", "test_depth", 0.9)))
  markdown = report_lib.report(preset, results, link_base=str(tmp_path))
  assert "![odds_first: every kind against both targets](runs/plots/targets_odds_first.png)" in (
      markdown)
  assert os.path.getsize(tmp_path / "runs" / "plots" / "targets_odds_first.png") > 0
  # One target: the leaderboards, no plot.
  one = dataclasses.replace(preset, targets=preset.targets[:1])
  assert "every kind against both targets" not in report_lib.report(one, results)
  groups = run_summary.cells(run_summary.load_summaries(results))["odds_first"]
  assert leaderboard_lib.targets_plot("odds_first", groups, {"test_length": 0.85, "che": 0.5},
                                      str(tmp_path / "none.png")) is None  # no kind has `che`


def test_leaderboard_step_time_column_from_the_step_benchmark(tmp_path):
  results = str(tmp_path / "runs")
  _write(results, [_summary(kind, i, valid=0.9, test_length=a + 0.1 * i)
                   for kind, a in (("rope", 0.5), ("alibi", 0.8), ("bifocal_heads", 0.6),
                                   ("nope", 0.7)) for i in range(2)])
  step_file = str(tmp_path / "step_all_kinds.json")
  with open(step_file, "w") as f:
    json.dump({"results": [
        {"config": "default", "bifocal_over_rope": 1.2, "kinds_over_rope": {"alibi": 0.99}},
        {"config": "large", "bifocal_over_rope": 1.1, "kinds_over_rope": {"alibi": 1.5}}]}, f)
  costs = leaderboard_lib.step_costs(step_file)
  assert costs == (("default", "large"),
                   {"rope": [1.0, 1.0], "bifocal": [1.2, 1.1], "alibi": [0.99, 1.5]})
  groups = run_summary.cells(run_summary.load_summaries(results))["odds_first"]
  board = leaderboard_lib.leaderboard(groups, ["valid", "test_length"], {}, costs)
  assert "step time / rope (default / large)" in board
  last = {row[1]: row[-1] for row in table_rows(board, "") if row[0] in "1234"}
  # bifocal_heads is position.kind bifocal; nope was not measured
  assert last == {"alibi": "0.99x / 1.50x", "nope": "-", "bifocal_heads": "1.20x / 1.10x",
                  "rope": "1.00x / 1.00x"}
  assert "step time" not in leaderboard_lib.leaderboard(groups, ["test_length"], {})
  assert leaderboard_lib.step_costs(str(tmp_path / "absent.json")) == ((), {})
  # a later file adds the kinds the first did not measure, against its own RoPE
  later = str(tmp_path / "step_mixed.json")
  with open(later, "w") as f:
    json.dump({"results": [
        {"config": "default", "bifocal_over_rope": 9.0, "kinds_over_rope": {"alibi": 9.0,
                                                                            "rope+alibi": 1.3}},
        {"config": "large", "bifocal_over_rope": 9.0, "kinds_over_rope": {"alibi": 9.0,
                                                                          "rope+alibi": 1.4}}]}, f)
  both = leaderboard_lib.step_costs(f"{step_file},{tmp_path / 'absent.json'},{later}")
  assert both == (("default", "large"), {**costs[1], "rope+alibi": [1.3, 1.4]})
  with open(later, "w") as f:
    json.dump({"results": [{"config": "default", "bifocal_over_rope": 1.0,
                            "kinds_over_rope": {"rope+alibi": 1.3}}]}, f)
  with pytest.raises(ValueError, match=r"step_mixed.json: its configs \['default'\] are not "
                     r"the first file's \['default', 'large'\]"):
    leaderboard_lib.step_costs(f"{step_file},{later}")
  with open(step_file, "w") as f:
    json.dump({"results": [{"config": "default"}]}, f)
  with pytest.raises(ValueError, match="step_all_kinds.json: not a step_benchmark.py result"):
    leaderboard_lib.step_costs(step_file)


def test_report_training_time_table_plot_and_convergence_budgets(tmp_path):
  results = str(tmp_path)
  summaries = []
  for kind, late in (("rope", 0.7), ("alibi", 0.9)):
    for seed in range(3):
      s = _summary(kind, seed, valid=0.95, test_length=late)
      s["at_steps"] = {str(step): {name: dict(accuracy=a, ci95=[a - 0.01, a + 0.01], examples=16)
                                   for name, a in (("valid", 0.9), ("test_length", acc))}
                       for step, acc in ((100, 0.5), (200, 0.6), (400, late + 0.01 * seed))}
      summaries.append(s)
  _write(results, summaries)
  with open(os.path.join(results, "budgets.json"), "w") as f:
    json.dump({"odds_first": {"budget": 400, "max_steps": 800, "just_fit": 100, "interval": 50,
                              "curve": [[400, 0.95]]}}, f)
  # A task to calibrate whose just-fit budget is to be read off its own curve.
  later = ex.TaskSpec("listops_depth", ("valid",), interval=500)
  preset = ex.Preset(tasks=(dataclasses.replace(TASK, just_fit=100), later),
                     kinds=("rope", "alibi"), seeds=(0, 1, 2), converged=0.002)
  markdown = report_lib.report(preset, results)
  assert "gained less than 0.002 over the last quarter" in markdown
  assert table_rows(markdown, "odds_first")[0][1:] == ["400", "0.950", "800", "50", "100"]
  assert table_rows(markdown, "listops_depth")[0][1:] == ["not calibrated yet", "-", "-", "500", "-"]
  alibi = {row[1]: row for row in table_rows(markdown, "alibi |") if len(row) == 4}
  assert list(alibi) == ["100", "200", "400"]
  assert alibi["400"][3].startswith("0.910 [") and alibi["100"][3].startswith("0.500")
  assert os.path.getsize(os.path.join(results, "plots", "training_time_odds_first.png")) > 5000


def test_report_ranks_kinds_at_each_step_and_correlates_first_with_last():
  def cell(*by_step):  # two seeds, equal values, at steps 100, 200, 400
    at = {str(s): {"test_length": dict(accuracy=a, ci95=None, examples=16)}
          for s, a in zip((100, 200, 400), by_step)}
    return {seed: {"at_steps": at} for seed in (0, 1)}

  # rope falls from first to last, alibi rises; nope and rope tie at step 200.
  scratch = {"rope": cell(0.9, 0.7, 0.5), "alibi": cell(0.5, 0.8, 0.95),
             "nope": cell(0.7, 0.7, 0.6)}
  table = training_time_lib.ranks_over_training_time(scratch, ["test_length"], "accuracy")
  rows = {row[0]: row[1] for row in table_rows(table, "")}
  assert rows["position"] == "test_length (100, 200, 400)"
  assert rows["rope"] == "1 / 2 / 3" and rows["alibi"] == "3 / 1 / 1"
  assert rows["nope"] == "2 / 2 / 2"  # a tie shares the better rank
  assert rows["rank correlation, step 100 with 400"] == "-1.00"  # 1,2,3 -> 3,2,1
  ties = {k: cell(0.5, 0.5, v) for k, v in (("rope", 0.1), ("alibi", 0.2), ("nope", 0.3))}
  assert table_rows(training_time_lib.ranks_over_training_time(ties, ["test_length"], "accuracy"),
               "rank correlation")[0][1] == "-"  # all tied at the first step
  assert training_time_lib.ranks_over_training_time({"rope": scratch["rope"]}, ["test_length"],
                                             "accuracy") == ""


def test_report_blocks_of_two_presets_live_side_by_side(tmp_path):
  path = str(tmp_path / "RESULTS.md")
  report_pages.replace_block(path, "cpu table")
  report_pages.replace_block(path, "converged table", "converged")
  report_pages.replace_block(path, "cpu table 2", "cpu")
  text = open(path).read()
  assert "cpu table 2" in text and "converged table" in text and "cpu table\n" not in text


def test_report_pairs_the_added_seeds_of_an_extension_alone(tmp_path):
  """Seeds 0-1 favour bifocal attention by 0.2, the added seeds 2-4 by 0.01 on
  every seed: the replication table shows the added seeds' difference only."""
  results = str(tmp_path)
  preset = ex.Preset(tasks=(TASK,), kinds=("rope", "bifocal_heads"), seeds=(0, 1),
                     seed_extensions=(("odds_first", (2, 3, 4), ("rope", "bifocal_heads")),))
  rope = [0.5, 0.6, 0.55, 0.65, 0.58]
  gain = [0.2, 0.2, 0.01, 0.01, 0.01]
  _write(results, [_summary("rope", i, valid=a) for i, a in enumerate(rope)]
         + [_summary("bifocal_heads", i, valid=a + g) for i, (a, g) in enumerate(zip(rope, gain))])
  markdown = report_lib.report(preset, results)
  rows = table_rows(markdown, "bifocal_heads (scratch) - rope (scratch)")
  assert [r[1] for r in rows] == ["5", "3"]           # every seed, then the added ones
  assert rows[0][3].startswith("+0.086")               # (2 * 0.2 + 3 * 0.01) / 5
  assert rows[1][3].startswith("**+0.010 [")           # the added seeds alone: decided
  assert "Seeds 2, 3, 4 alone" in markdown
  assert [r[1] for r in table_rows(markdown, "rope |")] == ["5", "3"]


def test_report_names_tasks_not_learned_and_not_calibrated(tmp_path):
  preset = ex.Preset(tasks=(TASK, ex.TaskSpec("parity_check")), kinds=("rope",), seeds=(0,))
  with open(os.path.join(tmp_path, "budgets.json"), "w") as f:
    json.dump({"odds_first": {"budget": None, "max_steps": 3000, "curve": [[3000, 0.6]]}}, f)
  markdown = report_lib.report(preset, str(tmp_path))
  assert table_rows(markdown, "odds_first")[0][1:] == ["**not learned**", "best 0.600", "3000"]
  assert table_rows(markdown, "parity_check")[0][1] == "not calibrated yet"
  assert "Runs summarised: 0 (of the 0 the preset makes" in markdown  # none learned


def test_replace_block_keeps_the_text_around_it(tmp_path):
  path = str(tmp_path / "RESULTS.md")
  report_pages.replace_block(path, "first")
  with open(path, "a") as f:
    f.write("\nverdict written by hand\n")
  with open(path) as f:
    text = f.read()
  with open(path, "w") as f:
    f.write("# title\n\n" + text)
  report_pages.replace_block(path, "second")
  with open(path) as f:
    text = f.read()
  assert "first" not in text and "second" in text
  assert text.startswith("# title") and "verdict written by hand" in text
  assert text.count(report_pages.BEGIN_MARK) == 1 and text.count(report_pages.END_MARK) == 1
