"""Evaluation of trained runs: held-out splits and the published Dyck data.

`Evaluator` is the one definition of evaluation: the training loop's periodic
evaluation, `evaluate(workdir)` (and `eval.py`, flag parsing around it) and
the benchmarks all score through it. It scores `metrics.accuracy_counts` per
example (`steps.make_eval_step`), tallied on the host by sequence length and
nesting depth (`Tally`); anything producing logits, a model or a reference
predictor, goes through the same tally (`score_batches`). `evaluate(workdir)`
restores a run's checkpoint (`load_run`; a population's members:
`load_members`) and scores it on the task's held-out splits and/or on
published Dyck files.

Long strings (the published `k8_m20.test` reaches 5,133 tokens) are streamed
in memory-bounded batches (`budget_batches`); the text tables and the CHE
curve of a results file are `eval_report`'s.

Results JSON, `DIR/eval/results.json` (or `--out`). Each evaluation updates
the file: splits evaluated now replace those of the same name, and results of
another checkpoint step are dropped.

  workdir, step, task, position_kind
  position        the scheme's one name (`positions.scheme_name`: bifocal with
                  its split, `bifocal_heads`)
  member          a population's member only: its index (the results are
                  `DIR/members/<i>/eval/results.json`)
  che_score       Deletang et al.'s score: the mean over lengths of per-length
                  token accuracy, from the CHE protocol's entry `che`
                  (`CheProtocol`) if evaluated, else from `test_length`;
                  never pooled with other splits; null if neither
  che_ci95        its 95% bootstrap interval
  splits: {name: split results}   task splits by name; published files by
                                  their file name (e.g. `k8_m20.test`); the
                                  CHE protocol as `che` (with its `split`,
                                  `stride`, `per_length`)
  spectrum        with --spectrum: `spectrum.spectrum_report` plus `plots`
                  ({name: PNG path})
  probe           with --probe: `probe.probe_report` (linear probes of the
                  nesting depth per layer, attention on the matching bracket
                  per head; its plot in `plots`)

  split results:
    source                  "task", or the published file's path
    examples, tokens        strings and scored (masked) tokens
    token_accuracy          argmax accuracy over scored tokens
    sequence_accuracy       fraction of strings with every scored token right
    loss                    mean token cross-entropy
    che_score               mean over the split's lengths of token accuracy
    by_length, by_depth     {"L" or "d": token accuracy} (string keys)
    by_length_tokens, by_depth_tokens    {key: scored tokens} (for pooling)
    close_accuracy          Dyck only: Yao et al.'s metric, the fraction of
                            scored positions where p(correct close) /
                            p(any close) > 0.8
    close_sequence_accuracy Dyck only: strings with every position so
    ci95                    {accuracy name: [low, high]}: 95% bootstrap
                            interval over the examples of each accuracy
                            above (`stats.bootstrap_ci`)
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import ml_collections

from bifocal_jax.evaluation import spectrum as spectrum_lib
from bifocal_jax.training import atomic_files
from bifocal_jax.training import checkpoint as checkpoint_lib
from bifocal_jax.training import config as config_lib
from bifocal_jax.evaluation import budget_batches
from bifocal_jax.evaluation.evaluator import CheProtocol, Evaluator
from bifocal_jax.evaluation import report as eval_report
from bifocal_jax.training import population as population_lib
from bifocal_jax.evaluation import probe as probe_lib
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import workdir as workdir_lib
from bifocal_jax.nn import positions
from bifocal_jax.tasks import external

RESULTS_FILE = "results.json"

# ----------------------------------------------------------------------------
# Runs.
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
  """A restored run: its config, an `Evaluator` of its setup, and its parameters.

  A population's member (`member` its index) has its own single-run config
  and writes its results under `members/<i>/` (`directory`).
  """
  workdir: str
  config: ml_collections.ConfigDict
  evaluator: Evaluator
  params: Any
  step: int
  member: int | None = None

  @property
  def setup(self) -> state_lib.Setup:
    return self.evaluator.setup

  @property
  def directory(self) -> str:
    """Where its results go: the workdir, or the member's directory in it."""
    if self.member is None:
      return self.workdir
    return population_lib.member_dir(self.workdir, self.member)


def load_run(workdir: str, *, step: int | None = None, member: int | None = None,
             memory_budget: int = budget_batches.DEFAULT_MEMORY_BUDGET,
             max_batch_size: int | None = None) -> Run:
  """Restores the latest checkpoint of `workdir` (or the one at `step`);
  of a population, member `member` (`load_members`).

  The mesh is rebuilt for this machine's devices (all on the data axis), so a
  run trained on another topology evaluates here.
  """
  workdir, config, mesh = _run_config(workdir)
  if config_lib.is_population(config):
    if member is None:
      raise ValueError(f"workdir={workdir!r} holds a population of "
                       f"{len(population_lib.members(config))} members: name one "
                       "(eval.py --member i, or --member all)")
    runs, frozen = load_members(workdir, step=step, members=(member,), memory_budget=memory_budget,
                                max_batch_size=max_batch_size)
    if frozen:
      raise ValueError(f"member={member}: {frozen[member]}")
    return runs[0]
  if member is not None:
    raise ValueError(f"member={member}: workdir={workdir!r} holds a single run, not a "
                     "population: evaluate it without naming a member")
  with jax.set_mesh(mesh):
    s, _ = state_lib.setup(config, mesh)
  step, state = _restore(workdir, step, s.abstract_state, mesh)
  evaluator = Evaluator(s, memory_budget=memory_budget, max_batch_size=max_batch_size)
  return Run(workdir, config, evaluator, state["params"], int(step))


def load_members(workdir: str, *, step: int | None = None, members: Sequence[int] | None = None,
                 memory_budget: int = budget_batches.DEFAULT_MEMORY_BUDGET,
                 max_batch_size: int | None = None) -> tuple[list[Run], dict[int, str]]:
  """`(runs, frozen)`: a population's members (default: all) as `Run`s sharing
  one compiled evaluation step, restored from one checkpoint; members that
  went non-finite are not returned but listed in `frozen` ({index: why})."""
  workdir, config, mesh = _run_config(workdir)
  if not config_lib.is_population(config):
    raise ValueError(f"workdir={workdir!r} holds a single run, not a population: evaluate it "
                     "without naming a member")
  all_members = population_lib.members(config)
  members = range(len(all_members)) if members is None else members
  for i in members:
    if not 0 <= i < len(all_members):
      raise ValueError(f"member={i}: the population has members 0..{len(all_members) - 1}")
  with jax.set_mesh(mesh):
    pop = population_lib.setup(config, mesh)
  step, state = _restore(workdir, step, pop.setup.abstract_state, mesh)
  bad = population_lib.nonfinite_members(state)
  frozen = {
      i: f"{all_members[i]} went non-finite ({bad[i][1]}) at step {bad[i][0]} and was "
         "frozen there: not evaluated" for i in members if i in bad
  }
  evaluator = None
  runs = []
  for i in members:
    if i in frozen:
      continue
    member_setup = pop.member_setup(i)
    evaluator = (Evaluator(member_setup, memory_budget=memory_budget, max_batch_size=max_batch_size)
                 if evaluator is None else evaluator.for_setup(member_setup))
    runs.append(
        Run(workdir, member_setup.config, evaluator, population_lib.member_tree(state["params"], i),
            int(step), member=i))
  return runs, frozen


def _run_config(workdir: str):
  """`(absolute workdir, its config on this machine's mesh, the mesh)`."""
  workdir = os.path.abspath(workdir)
  config = workdir_lib.load_config(workdir)
  config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, model=1))
  return workdir, config, sharding_lib.make_mesh(config.mesh)


def _restore(workdir: str, step: int | None, abstract_state, mesh):
  """`(step, state)` of the latest checkpoint of `workdir`, or of `step`."""
  with checkpoint_lib.Checkpointer.read_only(workdir) as ckpt:
    steps_saved = ckpt.steps()
    if not steps_saved:
      raise ValueError(f"workdir={workdir!r}: no checkpoint in {ckpt.directory} yet; re-run "
                       "its training command to train (and save) it")
    if step is not None and step not in steps_saved:
      raise ValueError(f"step={step}: no checkpoint at that step in {workdir} "
                       f"(steps {steps_saved})")
    with jax.set_mesh(mesh):
      if step is None:
        step, state, _ = ckpt.restore_latest(abstract_state)
      else:
        state, _ = ckpt.restore(step, abstract_state)
  return step, state


CHE_RESULTS = "che"  # the name of the CHE protocol's entry in `splits`


def che_score(splits: dict[str, dict]) -> tuple[float | None, list[float] | None]:
  """The run's CHE score and its 95% interval: the protocol's (`CheProtocol`)
  when it was evaluated, else `test_length`'s mean over its lengths; never
  pooled with other splits (`test_depth` is reported on its own)."""
  for name in (CHE_RESULTS, "test_length"):
    r = splits.get(name)
    if r is not None and r.get("che_score") is not None:
      return r["che_score"], r.get("ci95", {}).get("che_score")
  return None, None


def results_path(workdir: str, step: int | None = None) -> str:
  """`DIR/eval/results.json`; with `step` (`evaluate_steps`), that
  checkpoint's own file, `DIR/eval/results_step<step>.json`."""
  name = RESULTS_FILE if step is None else f"results_step{step}.json"
  return os.path.join(os.path.abspath(workdir), "eval", name)


def at_step(run: Run, step: int) -> Run:
  """`run` (a single run, not a population's member) restored at checkpoint
  `step`, sharing its compiled evaluation step."""
  if run.member is not None:
    raise ValueError(f"step={step}: a population's member is restored with load_members")
  _, state = _restore(run.workdir, step, run.setup.abstract_state, run.setup.mesh)
  return dataclasses.replace(run, params=state["params"], step=int(step))


def evaluate_steps(workdir: str, steps: Sequence[int], **options) -> dict[int, dict]:
  """`evaluate` at each checkpoint of `steps`, in one process: the run is set
  up and its evaluation step compiled once (a checkpoint's evaluation in its
  own process paid both every time). Each step's results go to
  `results_path(workdir, step)`; returns {step: results}.

  `options`: `evaluate`'s, but not `step`, `member` or `out`.
  """
  for name in ("step", "member", "out"):
    if name in options:
      raise ValueError(f"{name}=: evaluate_steps evaluates a single run's checkpoints "
                       "each into its own results file")
  steps = sorted(set(steps))
  if not steps:
    raise ValueError("steps=[]: name at least one checkpoint step")
  workdir = os.path.abspath(workdir)
  with checkpoint_lib.Checkpointer.read_only(workdir) as ckpt:
    missing = [s for s in steps if s not in ckpt.steps()]
    if missing:
      raise ValueError(f"steps={missing}: no checkpoint at those steps in {workdir} "
                       f"(steps {ckpt.steps()})")
  budget = options.get("memory_budget", budget_batches.DEFAULT_MEMORY_BUDGET)
  run = load_run(workdir, step=steps[0], memory_budget=budget,
                 max_batch_size=options.get("max_batch_size"))
  results = {}
  for step in steps:
    run = run if run.step == step else at_step(run, step)
    results[step] = evaluate(run, out=results_path(run.directory, step), **options)
  return results


def evaluate(workdir: str | Run, *, step: int | None = None, member: int | None = None,
             splits: Sequence[str] | None = None, num_examples: int | None = None,
             dyck_files: Sequence[str] = (), che: bool | None = None,
             che_protocol: CheProtocol = CheProtocol(), spectrum: bool = False, probe: bool = False,
             probe_examples: int = probe_lib.DEFAULT_EXAMPLES, out: str | None = None,
             memory_budget: int = budget_batches.DEFAULT_MEMORY_BUDGET,
             max_batch_size: int | None = None, data_dir: str | None = None,
             log: Callable[[str], None] = print) -> dict:
  """Evaluates a run and writes (merges into) its results JSON; returns the results.

  `workdir`: a run directory (its checkpoint at `step`, default the latest, is
  restored; of a population, member `member`, whose results go to
  `members/<i>/eval/`) or an already restored `Run`.
  `splits`: task splits to score (default: every held-out one, i.e. all but
  `train`; none by default when `dyck_files` are given). `num_examples`: cap
  per task split. `che`: evaluate `che_protocol` (by default, for tasks that
  draw examples at a given length when neither `splits` nor `dyck_files` is
  given; it takes the place of sampling its split). `spectrum`: add the
  spectral analysis and its plots. `probe`: add the probes of nesting depth
  (`probe.probe_report`, `probe_examples` examples of each split) and their
  plot. `dyck_files`: paths, or the bare names of
  published files (`k8_m10.test`), found in `data_dir` (default: the data
  directory, `external.published.data_dir()`).
  """
  try:
    dyck_files = [external.published.resolve(f, data_dir) for f in dyck_files]
  except FileNotFoundError as e:
    raise ValueError(str(e)) from None
  if isinstance(workdir, Run):
    run = workdir
    if step is not None and step != run.step:
      raise ValueError(f"step={step}: the given run was restored at step {run.step}")
  else:
    run = load_run(workdir, step=step, member=member)
  task = run.setup.task
  if che is None:
    che = splits is None and not dyck_files and getattr(task, "supports_length", False)
  che = che_protocol if che else None
  if splits is None:
    splits = () if dyck_files else tuple(
        n for n in task.split_names if n != "train" and not (che and n == che.split))
  for name in splits:
    task.split(name)  # a clear error for an unknown split, before any work
  if che:
    che.check(task)
  if probe:
    probe_lib.check_task(task)
  out = out or results_path(run.directory)
  results = _previous_results(run, out)
  evaluator = run.evaluator.with_batching(memory_budget=memory_budget,
                                          max_batch_size=max_batch_size)
  _score(evaluator, run, results, splits=splits, num_examples=num_examples, dyck_files=dyck_files,
         che=che, out_dir=os.path.dirname(out), log=log)
  if spectrum:
    results["spectrum"] = _spectrum(run, os.path.dirname(out), log)
  if probe:
    results["probe"] = probe_lib.probe_report(run, num_examples=probe_examples,
                                              out_dir=os.path.dirname(out))
    log(probe_lib.format_report(results["probe"]))

  os.makedirs(os.path.dirname(out), exist_ok=True)
  atomic_files.write_json_atomically(out, results, indent=1, sort_keys=False, allow_nan=False)
  log(eval_report.format_results(results))
  log(f"wrote {out}")
  for path in _plots_written(results, che=bool(che), spectrum=spectrum, probe=probe):
    log(f"wrote {path}")
  return results


def _plots_written(results: dict, *, che: bool, spectrum: bool, probe: bool) -> list[str]:
  """The paths of the plots this evaluation wrote (results merged from an
  earlier one may name others)."""
  paths = [results["splits"][CHE_RESULTS]["plot"]] if che else []
  for name, wanted in (("spectrum", spectrum), ("probe", probe)):
    if wanted:
      paths += results[name].get("plots", {}).values()
  return paths


def _previous_results(run: Run, out: str) -> dict:
  """A results record for `run`, holding the splits (and spectrum, probe) that
  `out` already has for the same run, step and member; a record of another
  step is dropped."""
  results = dict(workdir=run.workdir, step=run.step, task=run.setup.task.name,
                 position_kind=run.config.position.kind,
                 position=positions.scheme_name(run.config.position), che_score=None, che_ci95=None,
                 splits={})
  if run.member is not None:
    results["member"] = run.member
  if os.path.exists(out):
    with open(out) as f:
      previous = json.load(f)
    if (previous.get("step") == run.step and previous.get("workdir") == run.workdir and
        previous.get("member") == run.member):
      results["splits"].update(previous.get("splits", {}))
      for name in ("spectrum", "probe"):
        if name in previous:
          results[name] = previous[name]
  return results


def _score(evaluator: Evaluator, run: Run, results: dict, *, splits, num_examples, dyck_files, che,
           out_dir: str, log) -> None:
  """Scores the task splits, the Dyck files and the CHE protocol into `results`."""
  task = run.setup.task
  for name in splits:
    n = None if num_examples is None else min(num_examples, task.split(name).size)
    results["splits"][name] = evaluator.split(run.params, name, num_examples=n)
    log(f"evaluated {name}: {results['splits'][name]['examples']} examples")
  for path in dyck_files:
    results["splits"][os.path.basename(path)] = evaluator.dyck_file(run.params, path)
    log(f"evaluated {path}")
  if che:
    results["splits"][CHE_RESULTS] = curve = evaluator.che_protocol(run.params, che)
    curve["plot"] = eval_report.plot_che_curve(curve, os.path.join(out_dir, "che_curve.png"))
    log(f"evaluated the CHE protocol: {len(che.lengths(task))} lengths of {che.split} x "
        f"{che.per_length} examples")
  results["che_score"], results["che_ci95"] = che_score(results["splits"])


def _spectrum(run: Run, out_dir: str, log) -> dict:
  """The spectral analysis of the run's recorded trajectory, with its plots."""
  recorded_steps, frequencies = spectrum_lib.load_trajectory(run.workdir, step=run.step,
                                                             member=run.member)
  report = spectrum_lib.spectrum_report(recorded_steps, frequencies)
  if report["heads"]:
    report["plots"] = spectrum_lib.spectrum_plots(recorded_steps, frequencies, out_dir)
  log(spectrum_lib.format_spectrum_report(report))
  return report
