"""The mechanism probes' tables, rebuilt from the committed run summaries.

`eval.py --probe` (`bifocal_jax/evaluation/probe.py`) records, per run, linear probes of
the nesting depth and each head's attention weight on the matching opening
bracket at every closing bracket (`match_mass`, per layer and head). Two
tables come from them:

  * `probe_table`: per cell, means over seeds (the depth probe at the last
    layer; the matching-bracket mass averaged by eye);
  * `same_heads_table`: each eye's heads against *the same heads* of the
    RoPE run of that seed. Every kind of one seed starts from the same
    weights (`tests/experiments/test_probe_report.py` checks it), and within a bifocal
    run an eye is also a set of head indices (the spectral heads are the last
    ones), so a gap between a run's two eyes can be which heads they are
    rather than what their frequencies learned. Paired by head and seed, the
    difference is what the position scheme changed in those heads. The paper
    says spectral eyes "track long-range recursive depth": that predicts a
    spectral eye above RoPE's same heads, and above its own run's geometric
    eye net of theirs (the `spectral - geometric` row).

The surgery arm is paired with the `continue` arm (both start from the same
trained RoPE checkpoint); every other scratch cell with `rope (scratch)`.
"""

from __future__ import annotations

import functools
import json

import numpy as np

from bifocal_jax.evaluation import stats
from bifocal_jax.evaluation.probe import FAR
from experiments.extrapolation import runs as runs_lib
from experiments.extrapolation.report_tables import fmt_interval, markdown_table, scratch_first

# The cell each arm's heads are set against: the same seed's RoPE run that
# started from the same weights.
REFERENCE = {"scratch": ("scratch", "rope"), "surgery": ("continue", "rope")}
# The `position.kind`s whose models of one seed start from RoPE's weights
# (theirs plus, for some, frequencies or slopes). The others draw parameters
# of their own first (`learnt`'s table, `t5`'s buckets, `fire`'s MLP, ...),
# which moves every later draw: their heads have no RoPE twin.
# A mixed kind `a+b` starts as RoPE when both do (`starts_as_rope`).
# `tests/experiments/test_probe_report.py` checks both against the models.
STARTS_AS_ROPE = frozenset({
    "nope", "rope", "partial_rope", "p_rope", "randomized_rope", "spectral", "bifocal", "alibi",
    "randomized_alibi", "sin_cos", "randomized_sin_cos", "cope", "stickbreaking"})
SPLITS = ("test_depth", "valid")


def probe_table(groups: dict) -> str:
  """Per cell, mean over seeds: the depth probe's accuracy at the last layer
  (held-out `valid`, `test_depth`, and its depths deeper than any fitted),
  for ListOps the open-operator probe's the same way, and each eye's
  attention on the matching bracket at closing positions of `test_depth` (a
  uniform head's weight on one key beside it). A seed probed on its run
  trained again (`rerun.py --attach_probe`) is counted as such."""
  probes_of = {cell: [s["probe"] for s in runs.values() if s.get("probe")]
               for cell, runs in scratch_first(groups)}
  # Seeds probed on a model trained again (`rerun.py --attach_probe`).
  reruns_of = {cell: sum(bool(s.get("probe") and s.get("probe_rerun")) for s in runs.values())
               for cell, runs in scratch_first(groups)}
  columns = [("depth", "valid", "accuracy"), ("depth", "test_depth", "accuracy"),
             ("depth", "test_depth", "unseen_accuracy")]
  header = ["position (arm)", "seeds", "depth probe, last layer: valid", "test_depth",
            "test_depth, unseen depths"]
  if any(p.get("operator") for probes in probes_of.values() for p in probes):
    columns += [("operator", "valid", "accuracy"), ("operator", "test_depth", "accuracy"),
                ("operator", "test_depth", "unseen_accuracy")]
    header += ["operator probe, last layer: valid", "test_depth", "test_depth, unseen depths"]
  header += ["matching-bracket mass on test_depth, by eye", "uniform head"]
  rows = [header, ["---"] * len(header)]
  for (arm, group), probes in probes_of.items():
    if not probes:
      continue
    reruns = reruns_of[arm, group]
    row = [f"{group} ({arm})", f"{len(probes)}" + (f" ({reruns} on a rerun)" if reruns else "")]
    for probe_name, split, key in columns:
      values = [p[probe_name][split][key][-1] for p in probes if p.get(probe_name)]
      values = [v for v in values if v is not None]
      row.append(fmt_interval(stats.seed_interval(values)) if values else "-")
    eyes = sorted({e for p in probes for e in p["by_eye"]["test_depth"]["match_mass"]})
    cells = []
    for eye in eyes:
      values = [p["by_eye"]["test_depth"]["match_mass"].get(eye) for p in probes]
      values = [v for v in values if v is not None]
      cells.append(f"{eye} {np.mean(values):.3f}" if values else f"{eye} -")
    row.append(", ".join(cells) or "-")
    row.append(f"{np.mean([p['uniform_mass']['test_depth'] for p in probes]):.3f}")
    rows.append(row)
  return markdown_table(rows) if len(rows) > 2 else ""


def head_eyes(summary: dict) -> list[list[str]] | None:
  """Each head's eye, per layer, of a probed run (`bifocal_jax.evaluation.probe.head_eyes`):
  as its summary recorded them, or, for summaries written before they were
  recorded, from the model its config and overrides build (None without them)."""
  recorded = summary["probe"].get("eyes")
  if recorded is not None:
    return recorded
  if summary.get("overrides") is None:
    return None
  overrides = {k: v for k, v in summary["overrides"].items() if k != "seed"}
  return _eyes_of_config(summary["config"], json.dumps(overrides, sort_keys=True))


@functools.cache
def _eyes_of_config(config_spec: str, overrides_json: str) -> list[list[str]]:
  # Shapes only (`nnx.eval_shape`): the eyes are static module attributes.
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from bifocal_jax.evaluation import attention_trace
  from bifocal_jax.training import state
  from bifocal_jax import tasks
  config = runs_lib.load_config(config_spec, json.loads(overrides_json))
  model = nnx.eval_shape(lambda: state.build_model(config, tasks.get_task(config.task)))
  return [attention_trace.head_eyes(block.attn) for block in model.blocks]


def position_kind(summary: dict) -> str | None:
  """The run's `position.kind` (None when its summary has no overrides)."""
  return (summary.get("overrides") or {}).get("position.kind")


def starts_as_rope(kind: str | None) -> bool:
  """Whether a model of `position.kind` starts from RoPE's weights for the
  same seed (a mixed kind `a+b` does when both of its kinds do)."""
  return kind is not None and all(part in STARTS_AS_ROPE for part in kind.split("+"))


def _eye_masses(summary: dict, split: str,
                name: str = "match_mass") -> dict[str, list[tuple[int, int, float]]]:
  """{eye: [(layer, head, matching-bracket mass)]} over the heads with weights
  (`name`: `match_mass`, or `match_mass_far` for the pairs far apart)."""
  masses = summary["probe"].get(name, {}).get(split)
  eyes = head_eyes(summary) if masses is not None else None
  if eyes is None:
    return {}
  if [len(layer) for layer in masses] != [len(layer) for layer in eyes]:
    raise ValueError(
        f"{summary.get('task')}/{summary.get('arm')}/{summary.get('group')}/seed"
        f"{summary.get('seed')}: its probe's {split} masses per layer and head "
        f"({[len(layer) for layer in masses]}) do not match its heads' eyes "
        f"({[len(layer) for layer in eyes]})")
  out: dict[str, list] = {}
  for layer, (layer_masses, layer_eyes) in enumerate(zip(masses, eyes)):
    for head, (mass, eye) in enumerate(zip(layer_masses, layer_eyes)):
      if mass is not None:
        out.setdefault(eye, []).append((layer, head, mass))
  return out


def same_heads_differences(cell: dict, reference: dict, split: str,
                           name: str = "match_mass") -> dict[str, dict]:
  """{eye: {"seeds", "heads", "mass": [...], "reference": [...]}}: per seed both
  cells probed, the mean matching-bracket mass (`name`) over the eye's heads
  in `cell` and over the same (layer, head) indices in `reference`."""
  out: dict[str, dict] = {}
  for seed in sorted(set(cell) & set(reference)):
    if not (cell[seed].get("probe") and reference[seed].get("probe")):
      continue
    ref_masses = reference[seed]["probe"].get(name, {}).get(split)
    if ref_masses is None:
      continue
    for eye, heads in _eye_masses(cell[seed], split, name).items():
      same = [ref_masses[layer][head] for layer, head, _ in heads]
      if any(m is None for m in same):
        continue
      row = out.setdefault(eye, dict(seeds=[], heads=len(heads), mass=[], reference=[]))
      row["seeds"].append(seed)
      row["mass"].append(float(np.mean([m for _, _, m in heads])))
      row["reference"].append(float(np.mean(same)))
  return out


def same_heads_table(groups: dict) -> str:
  """Per cell and eye, the matching-bracket mass against the same heads of
  the RoPE run of the same seed (`REFERENCE`), paired over seeds; for a run
  with spectral and geometric eyes also their difference, each net of RoPE's
  same heads. **Bold**: the 95% interval excludes zero."""
  header = ["position (arm)", "eye", "heads", "seeds", "test_depth: its heads",
            "RoPE's same heads", "difference", f"pairs >= {FAR} apart: seeds, difference",
            "valid: difference"]
  rows = [header, ["---"] * len(header)]

  def difference(row: dict | None, signed_seeds: bool = False) -> str:
    if not row:
      return "-"
    text = fmt_interval(stats.paired_difference(row["mass"], row["reference"]), signed=True)
    return f"{len(row['seeds'])}: {text}" if signed_seeds else text

  def net(rows: dict) -> dict | None:
    # Each eye minus RoPE's same heads, spectral's net minus geometric's.
    if not {"spectral", "geometric"} <= set(rows):
      return None
    spectral, geometric = rows["spectral"], rows["geometric"]
    return dict(seeds=spectral["seeds"],
                mass=np.subtract(spectral["mass"], spectral["reference"]),
                reference=np.subtract(geometric["mass"], geometric["reference"]))

  for (arm, group), runs in scratch_first(groups):
    reference = groups.get(REFERENCE.get(arm))
    if (reference is None or (arm, group) == REFERENCE.get(arm)
        or not all(starts_as_rope(position_kind(s)) for s in runs.values())):
      continue
    tested, far, valid = (same_heads_differences(runs, reference, split, name)
                          for split, name in (("test_depth", "match_mass"),
                                              ("test_depth", "match_mass_far"),
                                              ("valid", "match_mass")))
    for eye, row in sorted(tested.items()):
      rows.append([f"{group} ({arm})", eye, str(row["heads"]), str(len(row["seeds"])),
                   f"{np.mean(row['mass']):.3f}", f"{np.mean(row['reference']):.3f}",
                   difference(row), difference(far.get(eye), True), difference(valid.get(eye))])
    if net(tested):
      rows.append([f"{group} ({arm})", "spectral - geometric, each net of RoPE's", "-",
                   str(len(tested["spectral"]["seeds"])), "-", "-", difference(net(tested)),
                   difference(net(far), True), difference(net(valid))])
  return markdown_table(rows) if len(rows) > 2 else ""


def kind_mass(summary: dict, name: str, split: str = "test_depth") -> float | None:
  """A probed run's `name` mass on `split`, the mean over its eyes (each eye's
  mean over its heads; None where no head has weights)."""
  by_eye = summary["probe"]["by_eye"].get(split, {}).get(name) or {}
  values = [v for v in by_eye.values() if v is not None]
  return float(np.mean(values)) if values else None


def across_kinds_table(groups: dict, split: str = "test_depth") -> str:
  """Per scratch kind, over its probed seeds whose heads all have weights:
  attention on the top-of-stack bracket (`top_mass`: the open bracket the
  next closing bracket must match) and on the matching bracket
  (`match_mass`), each the mean over the kind's eyes, beside the kind's
  accuracy on `split` over the same seeds (closing brackets where the
  summaries have them); then Spearman's rank correlation across kinds of each
  mass with that accuracy, with its two-sided permutation p-value
  (`stats.spearman_permutation_p`). A correlation across kinds is not a
  cause: the kinds differ in more than where their heads look."""
  scratch = {group: [s for s in runs.values() if s.get("probe")]
             for (arm, group), runs in groups.items() if arm == "scratch"}
  scratch = {group: probed for group, probed in scratch.items() if probed}
  if not scratch:
    return ""
  metric = ("close_accuracy" if any("close_accuracy" in s["splits"].get(split, {})
                                    for probed in scratch.values() for s in probed) else "accuracy")
  rows, masses, accuracy = [], {"top_mass": {}, "match_mass": {}}, {}
  for group, probed in scratch.items():
    # Seeds probed before a kind's weights were read have none: left out of every column.
    weighted = [(s, top, match) for s in probed
                if (top := kind_mass(s, "top_mass", split)) is not None
                and (match := kind_mass(s, "match_mass", split)) is not None
                and s["splits"].get(split, {}).get(metric) is not None]
    if not weighted:
      rows.append([group, f"0 of {len(probed)}", "-", "-", "-"])
      continue
    accuracy[group] = float(np.mean([s["splits"][split][metric] for s, _, _ in weighted]))
    masses["top_mass"][group] = float(np.mean([top for _, top, _ in weighted]))
    masses["match_mass"][group] = float(np.mean([match for _, _, match in weighted]))
    rows.append([group, f"{len(weighted)} of {len(probed)}", f"{masses['top_mass'][group]:.3f}",
                 f"{masses['match_mass'][group]:.3f}", f"{accuracy[group]:.3f}"])
  if len(accuracy) < 3:
    return ""
  rows.sort(key=lambda row: -accuracy.get(row[0], -1.0))
  correlations = []
  for name, label in (("top_mass", "top-of-stack"), ("match_mass", "matching-bracket")):
    rho = stats.spearman(masses[name], accuracy)
    if rho is not None:
      p = stats.spearman_permutation_p(masses[name], accuracy)
      correlations.append(f"{label} mass with accuracy: rho {rho:+.2f} over "
                          f"{len(masses[name])} kinds (permutation p = {p:.3g})")
  name = "closing-bracket accuracy" if metric == "close_accuracy" else "accuracy"
  header = ["position", "seeds with weights, of those probed", f"top-of-stack mass on {split}",
            f"matching-bracket mass on {split}", f"{split} {name}, same seeds"]
  table = markdown_table([header, ["---"] * len(header), *rows])
  return table + ("\n\nSpearman's rank correlation across kinds: " + "; ".join(correlations)
                  + "." if correlations else "")


def section(groups: dict) -> str:
  """The probes' part of a task's report ("" when no run was probed)."""
  parts = []
  means = probe_table(groups)
  if means:
    parts += ["Mechanism probes (`eval.py --probe`, `bifocal_jax/evaluation/probe.py`; 256 strings a "
              "split; mean over seeds):", "", means]
  paired = same_heads_table(groups)
  if paired:
    parts += ["", "Matching-bracket mass at closing brackets, each eye against the same heads "
              "(layer and index) of the RoPE run of the same seed, which started from the same "
              "weights (`experiments/extrapolation/probe_report.py`; surgery against continue; kinds that draw "
              "parameters of their own first have no such twin and are left out); mean over "
              "seeds, paired difference [95% interval]:", "", paired]
  across = across_kinds_table(groups)
  if across:
    parts += ["", "Where the heads look, across kinds (scratch runs; each kind's mean over its "
              "seeds whose heads have weights and over its eyes; kinds best on `test_depth` first; heads of a "
              "data-dependent kind have weights only in runs probed since 2026-12-05 04:00 UTC):",
              "", across]
  return "\n".join(parts)
