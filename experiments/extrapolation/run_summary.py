"""What a finished run leaves behind: its state in the workdir and its summary.

A run's workdir (`OUT/<task>/<arm>/<group>/seed<N>`) holds `config.json`,
`metrics.jsonl`, its checkpoints, the evaluation's `eval/results.json` (and
one per earlier checkpoint evaluated), and the sweep's `train.log` /
`eval.log`, each command's output ending in a `TOOK` line. `summary_of`
turns a finished run into the small JSON record committed under
`results/<preset>/` (task, kind, arm, seed, steps, the config
overrides, per split its accuracy with a 95% interval over examples, the
curve over checkpoints under `at_steps`, the learned spectra, the probes'
headline numbers, for a randomized kind whether it drew per layer); the
report reads those records alone (`load_summaries`, `cells`, `load_budgets`).
`calibration_record` and `convergence_budget` turn a calibration run's curve
into a step budget.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import glob
import json
import os
import platform
import subprocess
from collections.abc import Sequence

import ml_collections
import numpy as np

from bifocal_jax.nn import positions
from experiments.extrapolation.runs import LEARNED, REPO, Run, TaskSpec, checkpoint_results_path

TOOK = "# took "  # the line `_execute` appends to a log when its command ends
BUDGETS_FILE = "budgets.json"
SUMMARY_KEYS = ("task", "arm", "group", "seed", "splits")


def read_json(path: str):
  """A JSON file's contents; None if it is missing or unreadable (a run in flight)."""
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, json.JSONDecodeError):
    return None


def trained(workdir: str) -> bool:
  """Whether the final checkpoint exists (a preempted trainer also exits 0)."""
  config = read_json(os.path.join(workdir, "config.json"))
  steps = None if config is None else config.get("steps")
  return steps is not None and os.path.isdir(os.path.join(workdir, "checkpoints", str(steps)))


def trained_fraction(workdir: str) -> float:
  """How much of its training a run's workdir holds: its latest checkpoint's
  step over its budget (`config.json`'s `steps`), 0.0 without either (a run
  stopped part-way resumes from that checkpoint)."""
  config = read_json(os.path.join(workdir, "config.json"))
  steps = None if config is None else config.get("steps")
  try:
    saved = [int(name) for name in os.listdir(os.path.join(workdir, "checkpoints"))
             if name.isdigit()]  # Orbax's finished saves; temporary ones have suffixes
  except OSError:
    saved = []
  if not isinstance(steps, int) or steps <= 0 or not saved:
    return 0.0
  return min(max(saved) / steps, 1.0)


def read_metrics(workdir: str) -> list[dict]:
  records = []
  try:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      for line in f:
        try:
          records.append(json.loads(line))
        except json.JSONDecodeError:
          continue  # a line cut by a kill
  except OSError:
    pass
  return records


def summary_path(results_dir: str, run: Run) -> str:
  return os.path.join(results_dir, run.name + ".json")


def _split_summary(r: dict) -> dict:
  ci = r.get("ci95", {})
  out = dict(accuracy=r["token_accuracy"], ci95=ci.get("token_accuracy"),
             sequence_accuracy=r["sequence_accuracy"], examples=r["examples"],
             che_score=r.get("che_score"), che_ci95=ci.get("che_score"),
             by_length=r["by_length"], by_depth=r["by_depth"])
  if "close_accuracy" in r:
    out.update(close_accuracy=r["close_accuracy"], close_ci95=ci.get("close_accuracy"))
  return out


def _checkpoint_split_summary(r: dict) -> dict:
  """A split at one checkpoint: `_split_summary` without the per-length curve."""
  return {k: v for k, v in _split_summary(r).items() if k != "by_length"}


def summary_of(run: Run, out: str, budget: int, seconds: float) -> dict | None:
  """The committed record of a finished run; None unless its evaluation is
  complete (the final step, every split the task asks for)."""
  workdir = run.workdir(out)
  config = read_json(os.path.join(workdir, "config.json")) or {}
  results = read_json(os.path.join(workdir, "eval", "results.json"))
  if (results is None or results.get("step") != config.get("steps")
      or not all(name in results.get("splits", {}) for name in run.task.split_names)):
    return None
  at_steps = {}
  for step in run.checkpoint_steps(budget):
    earlier = read_json(checkpoint_results_path(workdir, step)) or {}
    if (earlier.get("step") != step
        or not all(name in earlier.get("splits", {}) for name in run.task.split_names)):
      return None
    at_steps[str(step)] = {name: _checkpoint_split_summary(earlier["splits"][name])
                           for name in run.task.split_names}
  if at_steps:  # the curve ends at the final evaluation
    at_steps[str(config["steps"])] = {
        name: _checkpoint_split_summary(results["splits"][name]) for name in run.task.split_names}
  losses = [r["loss"] for r in read_metrics(workdir) if "loss" in r]
  spectrum = results.get("spectrum") or {}
  summary = dict(
      task=run.task.name, kind=run.kind, arm=run.arm, group=run.group, seed=run.seed,
      steps=config["steps"], budget=budget, config=run.task.config,
      overrides={k: v for k, v in run.overrides(out, budget).items()
                 if k not in ("init_from", "progress_bar")},
      source=run.source().name if run.source() else None,
      final_train_loss=losses[-1] if losses else None,
      splits={name: _split_summary(results["splits"][name]) for name in run.task.split_names},
      **({"at_steps": at_steps} if at_steps else {}),
      seconds=round(seconds, 1), eval_seconds=round(logged_seconds(workdir, ("eval",)), 1),
      date=datetime.datetime.now(datetime.timezone.utc).strftime(
          "%Y-%m-%d %H:%M UTC"), machine=f"{platform.node()} ({os.cpu_count()} cores)",
      commit=_git_commit())
  if spectrum.get("heads"):
    summary["spectrum"] = dict(
        drift=spectrum["drift"], max_drift=spectrum["max_drift"],
        harmonic_score=float(np.mean([h["fit"]["score"] for h in spectrum["heads"]])),
        fraction_explained=float(np.mean([h["fit"]["fraction_explained"]
                                          for h in spectrum["heads"]])),
        geometric_score=spectrum["geometric_fit"]["score"],
        final=[h["frequencies"] for h in spectrum["heads"]])
  draws_per_layer = position_draws_per_layer(config.get("position") or {})
  if draws_per_layer is not None:
    summary["draws_per_layer"] = draws_per_layer
  if run.task.probe:
    if "probe" not in results:
      return None
    summary["probe"] = probe_summary(results["probe"])
  return summary


def position_draws_per_layer(position: dict) -> bool | None:
  """For a randomized kind, whether the run drew its positions anew in every
  layer (`position.draw_per_layer` resolved by its scheme); None for other
  kinds and for configs written before the key existed (one draw then)."""
  kind = position.get("kind")
  if "draw_per_layer" not in position or not positions.is_valid_kind(kind):
    return None
  scheme = positions.get(kind)
  if not scheme.randomized:
    return None
  return scheme.draws_per_layer(ml_collections.ConfigDict(position))


def probe_summary(report: dict) -> dict:
  """The headline numbers of `eval.py --probe` (`bifocal_jax.evaluation.probe`): per
  split, the depth (and ListOps operator) probe's accuracy per layer and at
  the unseen depths, and the attention on the matching and top-of-stack
  brackets per eye and per head (`match_mass`, `match_mass_far`, `top_mass`:
  the same-heads pairing), with each head's eye."""
  out = dict(layers=report["layers"], fitted_max_depth=report["fitted_max_depth"])
  for name in ("depth", "operator"):
    if report.get(name):
      out[name] = {split: dict(accuracy=[layer["accuracy"] for layer in layers],
                               unseen_accuracy=[layer.get("unseen_accuracy") for layer in layers])
                   for split, layers in report[name].items()}
  attention = report["attention"]
  out["by_eye"] = attention["by_eye"]
  out["uniform_mass"] = attention["uniform_mass"]
  out["match_mass"] = attention["match_mass"]
  out["top_mass"] = attention["top_mass"]  # per head: the same-heads pairing on the top of stack
  if "match_mass_far" in attention:  # probes from before it have the mean over all pairs only
    out["match_mass_far"] = attention["match_mass_far"]
  out["eyes"] = attention["eyes"]  # which heads `match_mass`'s are: the same-heads pairing
  return out


def _git_commit() -> str | None:
  try:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                          capture_output=True, timeout=10).stdout.strip() or None
  except (OSError, subprocess.SubprocessError):
    return None


def calibration_record(task: TaskSpec, workdir: str, learned: float = LEARNED,
                       converged: float | None = None) -> dict | None:
  """`{max_steps, interval, curve, budget}` of a finished calibration run.

  Just fitted (`converged` None): `budget` is the first evaluated step whose
  valid token accuracy reaches `learned` (None: never, within `max_steps`).
  Converged (`converged`, a gain): `convergence_budget` below; the record
  also names the criterion and the task's just-fit budget.
  """
  if not trained(workdir):
    return None
  curve = [[r["step"], r["valid_token_accuracy"]] for r in read_metrics(workdir)
           if "valid_token_accuracy" in r]
  reached = [step for step, accuracy in curve if accuracy >= learned]
  if converged is not None:
    just_fit = task.just_fit or (reached[0] if reached else None)
    return dict(max_steps=task.max_steps, interval=task.interval, curve=curve,
                budget=convergence_budget(curve, task.max_steps, converged,
                                          min_steps=2 * (just_fit or 0)),
                just_fit=just_fit, criterion=f"valid accuracy gains < {converged:g} over "
                f"the last quarter of the steps, or {task.max_steps} steps")
  return dict(max_steps=task.max_steps, interval=task.interval, curve=curve,
              budget=reached[0] if reached else None)


def convergence_budget(curve: Sequence[Sequence[float]], max_steps: int, gain: float, *,
                       min_steps: int = 0) -> int:
  """The first evaluated step `s >= min_steps` at which valid accuracy has
  gained less than `gain` since the last evaluation at or before `0.75 s`
  (the last quarter of the steps), or `max_steps` if none has. `min_steps`
  (twice the just-fit budget) keeps an early plateau from passing for
  convergence."""
  for step, accuracy in curve:
    if step < min_steps:
      continue
    before = [a for s, a in curve if 0 < s <= 0.75 * step]
    if before and accuracy - before[-1] < gain:
      return int(step)
  return int(max_steps)


def logged_seconds(workdir: str, stages: Sequence[str] = ("train", "eval")) -> float:
  """The time of every command the sweeps ran in `workdir` (`TOOK` lines of
  its train and eval logs): a run stopped and resumed counts every segment."""
  total = 0.0
  for stage in stages:
    with contextlib.suppress(FileNotFoundError), open(os.path.join(workdir, f"{stage}.log")) as f:
      total += sum(float(line[len(TOOK):].split()[0]) for line in f if line.startswith(TOOK))
  return total


# ----------------------------------------------------------------------------
# Reading the committed summaries back (the report, the sweep, the roster choices).
# ----------------------------------------------------------------------------


def read_results_file(path: str) -> dict | None:
  """A JSON object of the results directory (a run summary, `budgets.json`):
  None if the file is absent; a ValueError naming it if it cannot be read or
  is not a JSON object (nothing is rewritten over it)."""
  try:
    with open(path) as f:
      data = json.load(f)
  except FileNotFoundError:
    return None
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f"{path}: not readable as JSON ({e}); fix it or restore it "
                     "(git checkout) before the sweep or its report reads it") from None
  if not isinstance(data, dict):
    raise ValueError(f"{path}: a JSON {type(data).__name__}, not an object")
  return data


def load_summaries(results_dir: str) -> list[dict]:
  """Every run summary under `results_dir` (`seed*.json`); a ValueError naming
  a file that is malformed or lacks a summary's keys."""
  out = []
  for path in sorted(glob.glob(os.path.join(results_dir, "**", "seed*.json"), recursive=True)):
    summary = read_results_file(path)
    lacking = [k for k in SUMMARY_KEYS if k not in summary]
    if lacking:
      raise ValueError(f"{path}: not a run summary (no {', '.join(lacking)})")
    out.append(summary)
  return out


def cells(summaries: list[dict]) -> dict:
  """{task: {(arm, group): {seed: summary}}}."""
  table: dict = collections.defaultdict(lambda: collections.defaultdict(dict))
  for s in summaries:
    table[s["task"]][(s["arm"], s["group"])][s["seed"]] = s
  return table


def load_budgets(results_dir: str) -> dict:
  """`budgets.json` of `results_dir` ({} before any calibration); a ValueError
  naming it if it is malformed, so that no calibration writes over it."""
  return read_results_file(os.path.join(results_dir, BUDGETS_FILE)) or {}
