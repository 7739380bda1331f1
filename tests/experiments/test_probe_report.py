"""The probes' report: each eye set against the same heads of the RoPE run of its seed."""

import numpy as np
import pytest
from flax import nnx

from bifocal_jax import configs
from bifocal_jax.nn import positions
from bifocal_jax.training import state
from bifocal_jax import tasks

from experiments.extrapolation import probe_report


def _weights(kind: str, **position) -> dict[str, np.ndarray] | None:
  config = configs.load_file("dyck", "tiny")
  config.position.kind = kind
  config.position.update(position)
  try:
    model = state.build_model(config, tasks.get_task(config.task))
  except ValueError:  # a kind the causal decoder does not take
    return None
  return {"/".join(map(str, path)): np.asarray(v[...])
          for path, v in nnx.state(model, nnx.Param).flat_state()}


def test_the_kinds_that_start_as_rope_are_those_whose_shared_weights_are_ropes():
  rope = _weights("rope")
  same = set()
  for kind in positions.POSITION_KINDS:
    weights = _weights(kind)
    if weights is None:
      continue
    shared = [k for k in rope if k in weights]
    assert len(shared) == len(rope), kind  # every kind has RoPE's layers
    if all(np.array_equal(weights[k], rope[k]) for k in shared):
      same.add(kind)
  assert same == probe_report.STARTS_AS_ROPE
  pairs = _weights("bifocal", split="pairs")
  assert all(np.array_equal(pairs[k], rope[k]) for k in rope)
  for mixed in ("rope+alibi", "spectral+cope", "rope+fire", "t5+rope"):
    weights = _weights(mixed)
    assert probe_report.starts_as_rope(mixed) == all(
        np.array_equal(weights[k], rope[k]) for k in rope), mixed
  assert probe_report.starts_as_rope("rope+alibi") and not probe_report.starts_as_rope("rope+fire")


def _probed(kind, seed, masses, eyes, arm="scratch", group=None, record_eyes=True):
  probe = dict(match_mass={"test_depth": masses, "valid": masses})
  if record_eyes:
    probe["eyes"] = eyes
  return dict(task="dyck", kind=group or kind, arm=arm, group=group or kind, seed=seed,
              config="configs/dyck.py", overrides={"position.kind": kind, "seed": seed},
              probe=probe)


def _row(table, first, eye):
  for line in table.splitlines():
    cells = [c.strip() for c in line.split("|")[1:-1]]
    if cells[:2] == [first, eye]:
      return cells
  raise AssertionError(f"no row {first}, {eye} in\n{table}")


def test_an_eye_is_set_against_the_same_heads_not_the_whole_rope_model():
  # RoPE's last two heads attend to the matching bracket (0.30), its first two
  # do not (0.05). A bifocal run whose spectral heads are those last two and
  # did exactly what RoPE's did has a 0.25 gap between its eyes that is the
  # heads', not the frequencies': paired by head, both eyes differ by zero.
  rng = np.random.default_rng(0)
  geo, spec = ["geometric"] * 2, ["spectral"] * 2
  groups = {("scratch", "rope"): {}, ("scratch", "bifocal_heads"): {},
            ("scratch", "spectral"): {}}
  for seed in range(4):
    rope = [[float(m) for m in np.array([0.05, 0.05, 0.30, 0.30]) + rng.normal(0, 0.01, 4)]
            for _ in range(2)]
    groups["scratch", "rope"][seed] = _probed("rope", seed, rope, [geo + geo] * 2)
    groups["scratch", "bifocal_heads"][seed] = _probed(
        "bifocal", seed, rope, [geo + spec] * 2, group="bifocal_heads")
    lifted = [[m + 0.1 + 0.002 * seed for m in layer] for layer in rope]
    groups["scratch", "spectral"][seed] = _probed("spectral", seed, lifted, [spec + spec] * 2)
  table = probe_report.same_heads_table(groups)
  spectral = _row(table, "bifocal_heads (scratch)", "spectral")
  assert spectral[2:4] == ["4", "4"]  # two heads in each of two layers, four seeds
  assert spectral[4] == spectral[5] and abs(float(spectral[4]) - 0.30) < 0.01
  assert spectral[6].startswith("+0.000 [")
  geometric = _row(table, "bifocal_heads (scratch)", "geometric")
  assert abs(float(geometric[5]) - 0.05) < 0.01 and geometric[6].startswith("+0.000 [")
  assert _row(table, "bifocal_heads (scratch)", "spectral - geometric, each net of RoPE's")[
      6].startswith("+0.000 [")
  lifted = _row(table, "spectral (scratch)", "spectral")
  assert lifted[6].startswith("**+0.103 [") and lifted[8].startswith("**+0.103 [")
  assert spectral[7] == lifted[7] == "-"  # no probe recorded the far pairs
  # The far pairs (>= 16 apart) on their own, where the summaries have them:
  # all-spectral heads gain there and nowhere else; a cell without is "-".
  for seed, run in groups["scratch", "spectral"].items():
    rope = groups["scratch", "rope"][seed]["probe"]["match_mass"]["test_depth"]
    run["probe"]["match_mass"] = {split: rope for split in ("test_depth", "valid")}
    run["probe"]["match_mass_far"] = {"test_depth": [[m + 0.2 for m in layer] for layer in rope]}
    groups["scratch", "rope"][seed]["probe"]["match_mass_far"] = {"test_depth": rope}
  table = probe_report.same_heads_table(groups)
  lifted = _row(table, "spectral (scratch)", "spectral")
  assert lifted[6].startswith("+0.000 [") and lifted[7].startswith("4: **+0.200 [")
  assert _row(table, "bifocal_heads (scratch)", "spectral")[7] == "-"
  assert "rope (scratch)" not in table  # the reference is not set against itself


def test_only_same_start_cells_with_weights_are_paired_and_surgery_against_continue():
  geo = [["geometric"] * 2]
  groups = {
      ("scratch", "rope"): {s: _probed("rope", s, [[0.1, 0.2]], geo) for s in range(2)},
      ("continue", "rope"): {s: _probed("rope", s, [[0.5, 0.5]], geo, arm="continue")
                             for s in range(2)},
      ("surgery", "bifocal_heads"): {
          s: _probed("bifocal", s, [[0.5, 0.6 + 0.01 * s]], [["geometric", "spectral"]],
                     arm="surgery", group="bifocal_heads") for s in range(2)},
      ("scratch", "fire"): {s: _probed("fire", s, [[0.3, 0.3]], [["fire"] * 2])
                            for s in range(2)},
      ("scratch", "cope"): {s: _probed("cope", s, [[None, None]], [["cope"] * 2])
                            for s in range(2)},
  }
  table = probe_report.same_heads_table(groups)
  assert "fire" not in table  # its own parameters moved every later draw: no RoPE twin
  assert "cope" not in table  # data-dependent weights: no masses to pair
  assert _row(table, "bifocal_heads (surgery)", "geometric")[5:7] == ["0.500", "+0.000 [+0.000, +0.000]"]
  spectral = _row(table, "bifocal_heads (surgery)", "spectral")
  assert spectral[5] == "0.500" and spectral[6].startswith("**+0.105 [")


def test_eyes_come_from_the_config_when_the_summary_did_not_record_them():
  geo = ["geometric"] * 2
  heads = _probed("bifocal", 0, [[0.1] * 4] * 2, None, record_eyes=False)
  heads["overrides"].update({"position.split": "heads", "model.num_heads": 4,
                             "model.num_layers": 2})
  assert probe_report.head_eyes(heads) == [geo + ["spectral"] * 2] * 2
  heads["overrides"]["position.spectral_heads"] = 1
  assert probe_report.head_eyes(heads) == [geo + ["geometric", "spectral"]] * 2
  pairs = _probed("bifocal", 0, [[0.1] * 4], None, record_eyes=False)
  pairs["overrides"].update({"position.split": "pairs", "model.num_heads": 4,
                             "model.num_layers": 1})
  assert probe_report.head_eyes(pairs) == [["pairs"] * 4]
  recorded = _probed("bifocal", 0, [[0.1]], [["spectral"]])
  assert probe_report.head_eyes(recorded) == [["spectral"]]  # recorded eyes win
  del recorded["probe"]["eyes"], recorded["overrides"]
  assert probe_report.head_eyes(recorded) is None
  rope = {s: _probed("rope", s, [[0.1, 0.2]], [geo]) for s in range(2)}
  bad = {s: _probed("spectral", s, [[0.1, 0.2]], [["spectral"]]) for s in range(2)}
  with pytest.raises(ValueError, match=r"dyck/scratch/spectral/seed0: .* head \(\[2\]\) do not match its heads' eyes \(\[1\]\)"):
    probe_report.same_heads_table({("scratch", "rope"): rope, ("scratch", "spectral"): bad})
  with pytest.raises(ValueError, match="override 'model.no_such_key': not a key of configs/dyck.py"):
    probe_report.head_eyes(dict(heads, overrides={"model.no_such_key": 1}))


def test_the_means_table_has_the_operator_probe_where_the_task_has_one():
  def probed(seed, operator):
    layer = dict(accuracy=[0.2, 0.6 + 0.1 * seed], unseen_accuracy=[0.0, 0.1])
    probe = dict(depth={"valid": layer, "test_depth": layer},
                 by_eye={"test_depth": {"match_mass": {"geometric": 0.1}}},
                 uniform_mass={"test_depth": 0.05})
    if operator:
      probe["operator"] = {"valid": dict(layer, accuracy=[0.5, 0.9]),
                           "test_depth": dict(layer, accuracy=[0.5, 0.8], unseen_accuracy=[0.4, 0.7])}
    return dict(probe=probe)
  dyck = probe_report.probe_table({("scratch", "rope"): {s: probed(s, False) for s in range(2)}})
  assert "operator" not in dyck
  listops = probe_report.probe_table({("scratch", "rope"): {s: probed(s, True) for s in range(2)}})
  header = _row(listops, "position (arm)", "seeds")
  row = _row(listops, "rope (scratch)", "2")
  assert header[5] == "operator probe, last layer: valid" and len(row) == len(header) == 10
  assert row[2].startswith("0.650 [") and row[5:8] == [
      "0.900 [0.900, 0.900]", "0.800 [0.800, 0.800]", "0.700 [0.700, 0.700]"]
  assert row[8:] == ["geometric 0.100", "0.050"]
  rerun = {s: probed(s, False) for s in range(3)}
  rerun[2]["probe_rerun"] = {"date": "2026-12-06"}
  assert _row(probe_report.probe_table({("scratch", "rope"): rerun}), "rope (scratch)",
              "3 (1 on a rerun)")


def _across(kind, seed, top_by_eye, match_by_eye, close_accuracy):
  return dict(task="dyck", kind=kind, arm="scratch", group=kind, seed=seed,
              splits={"test_depth": dict(accuracy=0.0, close_accuracy=close_accuracy)},
              probe=dict(by_eye={"test_depth": dict(top_mass=top_by_eye,
                                                    match_mass=match_by_eye)}))


def test_across_kinds_sets_where_the_heads_look_beside_accuracy():
  # Five kinds whose top-of-stack mass rises with accuracy and whose
  # matching-bracket mass does not; bifocal's two eyes average; a kind without
  # weights (None) is listed but left out of the correlation; a seed without
  # weights or without a probe is left out of every column of its kind.
  groups = {}
  for i, kind in enumerate(["nope", "alibi", "t5", "fire", "kerple_log"]):
    groups["scratch", kind] = {s: _across(kind, s, {kind: 0.1 * (i + 1)}, {kind: 0.05 * (i % 2)},
                                          0.5 + 0.1 * i + 0.01 * s) for s in range(2)}
  groups["scratch", "bifocal_heads"] = {0: _across("bifocal_heads", 0, {"geometric": 0.1,
                                                                       "spectral": 0.2},
                                                   {"geometric": 0.0, "spectral": 0.0}, 0.55)}
  groups["scratch", "cope"] = {0: _across("cope", 0, {"cope": None}, {"cope": None}, 0.99)}
  groups["scratch", "fox"] = {0: _across("fox", 0, {"fox": None}, {"fox": None}, 0.10),
                              1: _across("fox", 1, {"fox": 0.9}, {"fox": 0.0}, 0.95)}
  unprobed = _across("nope", 5, {}, {}, 0.0)
  del unprobed["probe"]
  groups["scratch", "nope"][5] = unprobed
  table = probe_report.across_kinds_table(groups)
  rows = {r[0]: r for r in (
      [c.strip() for c in line.split("|")[1:-1]] for line in table.splitlines()
      if line.startswith("| ") and not line.startswith("| position") and "---" not in line)}
  assert list(rows)[0] == "fox" and list(rows)[-1] == "cope"
  assert rows["cope"][1:] == ["0 of 1", "-", "-", "-"]
  assert rows["fox"][1:] == ["1 of 2", "0.900", "0.000", "0.950"]  # the weighted seed alone
  assert rows["bifocal_heads"][2] == "0.150"  # the mean over its eyes
  assert rows["nope"][1] == "2 of 2" and rows["nope"][4] == "0.505"  # probed seeds only
  assert rows["kerple_log"][2:] == ["0.500", "0.000", "0.905"]
  assert "test_depth closing-bracket accuracy, same seeds" in table
  # Over 7 kinds with weights, top mass ranks exactly as accuracy: rho +1.00,
  # and 2 of the 5,040 orderings reach |rho| = 1.
  assert (f"top-of-stack mass with accuracy: rho +1.00 over 7 kinds (permutation p = "
          f"{2 / 5040:.3g})") in table
  assert "matching-bracket mass with accuracy: rho" in table
  assert probe_report.across_kinds_table({("scratch", "rope"): groups["scratch", "nope"]}) == ""
