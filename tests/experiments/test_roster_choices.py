"""The converged sweep's choices from the roster's results (experiments/extrapolation/
roster_rules.py, the command roster_choices.py)."""

import json
import os

import pytest

from experiments.extrapolation import presets as presets_lib
from experiments.extrapolation import roster_choices
from experiments.extrapolation import roster_rules
from experiments.extrapolation import runs as runs_lib

ROSTER = ("fire", "cope", "t5", "kerple_log", "sin_cos", "learnt")
PRESET = runs_lib.Preset(
    tasks=(runs_lib.TaskSpec("dyck", later_kinds=ROSTER),
           runs_lib.TaskSpec("listops_depth", later_kinds=ROSTER),
           runs_lib.TaskSpec("dyck_5layer", config_name="dyck", kinds=("rope", "alibi"))),
    kinds=("rope", "alibi", "nope", "spectral"), seeds=(0, 1), extend=roster_rules.extend)
# Dyck: closing-bracket accuracy on k8_m20.test and test_depth alike. sin_cos
# is best but absolute (it does not mix); alibi is the best candidate (X).
# kerple_log and learnt tie: the five best take kerple_log (alphabetical).
DYCK = dict(sin_cos=0.95, alibi=0.85, fire=0.80, cope=0.70, t5=0.60, nope=0.6, spectral=0.5,
            rope=0.4, kerple_log=0.3, learnt=0.3)
# listops_depth test_depth: rope (rotary) and alibi (X) aside, t5 is best (Y).
LISTOPS = dict(rope=0.95, sin_cos=0.99, alibi=0.9, t5=0.85, fire=0.8, cope=0.7, nope=0.5,
               spectral=0.9, kerple_log=0.6, learnt=0.4)


def _write(results, task, kind, seed, splits):
  path = os.path.join(results, task, "scratch", kind, f"seed{seed}.json")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(dict(task=task, kind=kind, arm="scratch", group=kind, seed=seed, splits=splits), f)


def _results(tmp_path, skip=()):
  results = str(tmp_path)
  for seed in (0, 1):
    for kind, a in DYCK.items():
      if ("dyck", kind, seed) not in skip:
        _write(results, "dyck", kind, seed, {
            "valid": dict(accuracy=1.0, close_accuracy=0.1),  # not a held-out split
            "test_depth": dict(accuracy=0.0, close_accuracy=a),
            "k8_m20.test": dict(accuracy=0.0, close_accuracy=a + 0.01 * seed)})
    for kind, a in LISTOPS.items():
      if ("listops_depth", kind, seed) not in skip:
        _write(results, "listops_depth", kind, seed, {"test_depth": dict(accuracy=a)})
  return results


def _chosen(preset):
  return {t.name: t.chosen_kinds for t in preset.tasks}


@pytest.fixture
def by_the_rule(monkeypatch):
  """The rules applied to the results, as before any choice was made."""
  monkeypatch.setattr(roster_rules, "MADE", {})


def test_choices_by_the_fixed_rules_once_the_roster_is_complete(tmp_path, by_the_rule):
  extended = PRESET.resolved(_results(tmp_path))
  mixed = ("rope+alibi", "spectral+alibi", "rope+t5")
  assert _chosen(extended) == {"dyck": mixed, "listops_depth": mixed,
                              "dyck_5layer": ("sin_cos", "fire", "cope", "t5", "kerple_log")}
  names = {r.name for r in extended.runs()}
  assert {"dyck/scratch/spectral+alibi/seed1", "listops_depth/scratch/rope+t5/seed0",
          "dyck_5layer/scratch/kerple_log/seed1"} <= names
  assert extended.resolved(_results(tmp_path)) == extended  # applied twice: the same


def test_no_choice_before_the_cells_it_reads_are_complete(tmp_path, by_the_rule):
  # One listops seed short: the five best (Dyck alone) are chosen, the pairings not.
  extended = PRESET.resolved(_results(tmp_path / "a", skip={("listops_depth", "fire", 1)}))
  assert _chosen(extended)["dyck"] == () and _chosen(extended)["listops_depth"] == ()
  assert len(_chosen(extended)["dyck_5layer"]) == 5
  # One Dyck seed short: nothing.
  assert PRESET.resolved(_results(tmp_path / "b", skip={("dyck", "learnt", 0)})) == PRESET
  assert roster_rules.missing(PRESET, {}, ("dyck",))[0] == "dyck/rope (0 of 2 seeds)"
  # A preset restricted to Dyck (--tasks) chooses no pairings: it cannot read listops_depth.
  complete = _results(tmp_path / "c")
  only_dyck = PRESET.only(["dyck", "dyck_5layer"]).resolved(complete)
  assert _chosen(only_dyck)["dyck"] == () and len(_chosen(only_dyck)["dyck_5layer"]) == 5


def test_mixed_pairings_need_two_candidates():
  table = {"dyck": {("scratch", "rope"): {}}, "listops_depth": {("scratch", "rope"): {}}}
  with pytest.raises(ValueError, match="mixed pairings: 0 candidate kinds, 2 needed"):
    roster_rules.mixed_pairings(table)


def test_choices_once_made_stay_whatever_the_results_become(tmp_path):
  """A roster kind rerun (its cells short again) or another kind's results
  change nothing: the preset's chosen runs are the ones registered."""
  made = {name: roster_rules.MADE[name] for name in ("dyck", "listops_depth", "dyck_5layer")}
  for skip in ((), {("dyck", "learnt", 0)}, {("listops_depth", "fire", 1)}):
    extended = PRESET.resolved(_results(tmp_path / str(len(skip)), skip=skip))
    assert _chosen(extended) == made


def test_the_converged_preset_takes_the_choices_made():
  resolved = presets_lib.PRESETS["converged"].resolved(roster_choices.RESULTS)
  made = roster_rules.MADE  # first; the pre-registered question's runs after them
  assert _chosen(resolved)["dyck_5layer"][:5] == made["dyck_5layer"]
  assert _chosen(resolved)["dyck"][:3] == made["dyck"]


def test_the_command_prints_each_choice_and_the_rules_answer_today(capsys):
  assert roster_choices.main() == 0
  lines = capsys.readouterr().out.splitlines()
  assert [line.split(":")[0] for line in lines] == [
      "five best on the 5-layer model, as made",
      "five best on the 5-layer model, by the rule on today's roster",
      "mixed pairings, as made", "mixed pairings, by the rule on today's roster"]
  assert all("not yet;" in line or "+" in line or "," in line for line in lines), lines
