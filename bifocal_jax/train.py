"""Training: `train_and_evaluate(config, workdir)`, the whole job as a function.

`_train` restores the newest checkpoint or initialises, then `_loop` reads
top to bottom: per step the next batch, the train step, the metrics window;
at log steps the window's means are written (with an evaluation of `valid` at
evaluation steps), at checkpoint steps the state is saved, hooks run, and a
signal or a preemption notice ends the loop early. One save after the loop
keeps its last step.

A population (`config.population`; `population` has its parts) goes
through `_train_population`: the same `_loop` over the members' stacked
state, with per-member logs (`_MemberLogs`).

Everything else has its own module: `state` (the model, the train state,
`Setup`), `steps` (the jit-compiled steps), `evaluate.Evaluator` (all
evaluation), `workdir` (which run a directory holds), `init_from`
(fine-tuning a `rope` run by Surgical Integration), `checkpoint` (Orbax).
The command line is `bifocal_jax/cli/train.py` (flag parsing around this
module), run as `python -m bifocal_jax.train` (the lines below), `bifocal-train`
or a checkout's `train.py`; notebooks call `train_and_evaluate` directly.
"""

from __future__ import annotations

if __name__ == "__main__":  # `python -m bifocal_jax.train`: the command, before JAX starts
  from bifocal_jax.cli import train as _train_cli  # pylint: disable=g-import-not-at-top
  _train_cli.run()  # exits

import dataclasses
import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import jax
import ml_collections
import numpy as np
from absl import logging

from bifocal_jax import atomic_files
from bifocal_jax import checkpoint as checkpoint_lib
from bifocal_jax import config as config_lib
from bifocal_jax import evaluate
from bifocal_jax import init_from
from bifocal_jax import length_groups
from bifocal_jax import metrics as metrics_lib
from bifocal_jax import model as model_lib
from bifocal_jax import population
from bifocal_jax import sharding as sharding_lib
from bifocal_jax import state as state_lib
from bifocal_jax import steps
from bifocal_jax import tasks
from bifocal_jax import workdir as workdir_lib
from bifocal_jax.tasks import pipeline

# What the periodic evaluation of `valid` logs (as `valid_<key>`).
VALID_METRICS = ("token_accuracy", "sequence_accuracy", "loss", "close_accuracy")

# `hook(step, saved, checkpointer)` runs after every step; `saved`: a save of
# this step began. Tests inject hooks (a signal at a given step, say).
Hook = Callable[[int, bool, checkpoint_lib.Checkpointer], None]


def is_due(step: int, every: int, last_step: int) -> bool:
  """Every `every` steps, and at the last step."""
  return step % every == 0 or step == last_step


class PreemptionGuard:
  """Turns SIGTERM/SIGINT into a flag the loop checks between steps.

  Single-process runs only: with several processes, each would see its signal
  at a different step, so there SIGTERM is left to JAX's preemption service,
  which agrees on one step for all of them (`Checkpointer.reached_preemption`).
  """

  def __init__(self, *, enabled: bool = True):
    self.enabled = enabled
    self.signal = None
    self._previous = {}

  def __enter__(self):
    if self.enabled and threading.current_thread() is threading.main_thread():
      for sig in (signal.SIGTERM, signal.SIGINT):
        self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def _handle(self, signum, frame):
    del frame
    if self.signal is not None:  # a second signal: stop now
      raise KeyboardInterrupt
    self.signal = signal.Signals(signum).name

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *, overwrite: bool = False,
                       hooks: Sequence[Hook] = ()) -> dict:
  """Trains (resuming from `workdir` if it holds a checkpoint).

  Returns the last logged metrics with `step`, plus `preempted_at` when a
  signal stopped the run (after saving it). Raises `config.ConfigError` or
  `workdir.WorkdirConflictError` before anything is written.
  """
  config_lib.validate(config, num_devices=jax.device_count(), num_processes=jax.process_count(),
                      workdir=workdir)
  task = tasks.get_task(config.task)
  # Checked before anything touches the workdir; used only if it has no checkpoint.
  source = init_from.source_config(config, task) if config.init_from else None
  workdir = os.path.abspath(workdir)
  workdir_lib.claim(workdir, config, overwrite=overwrite)
  mesh = sharding_lib.make_mesh(config.mesh)
  ckpt = checkpoint_lib.Checkpointer(workdir, save_every=config.checkpoint_every,
                                     keep=config.keep_checkpoints,
                                     async_save=config.async_checkpointing)
  with jax.set_mesh(mesh), ckpt:
    if population.is_population(config):
      return _train_population(config, workdir, task, mesh, ckpt, hooks)
    return _train(config, workdir, task, mesh, ckpt, source, hooks)


@dataclasses.dataclass
class _Job:
  """What `_loop` drives: a single run (`_train`) or a population
  (`_train_population`) differ only in these."""
  train_step: Callable  # (state, global batch) -> (state, step metrics)
  batches: Iterator  # this process's batches
  to_global: Callable  # a local batch -> the global batch on the mesh
  meter: metrics_lib.Throughput
  log: Callable  # (step, window, rates, state, *, with_valid) -> the logged record
  save: Callable  # (step, state, window, *, force=False) -> whether a save began
  close: Callable[[], None]
  is_main: bool = True


def _loop(config, workdir: str, ckpt, job: _Job, state, start: int,
          window: metrics_lib.MetricsWindow, hooks: Sequence[Hook]) -> dict:
  """The training loop, from step `start` to `config.steps`: step, log (and
  evaluate) when due, save when due, run the hooks, stop early on a signal or
  a preemption notice; one save after the loop keeps the last step."""
  bar = _progress(config, start, job.is_main)
  summary, stop = {}, None
  step = saved = start
  with PreemptionGuard(enabled=jax.process_count() == 1) as guard:
    try:
      while step < config.steps:
        batch = next(job.batches)
        state, step_metrics = job.train_step(state, job.to_global(batch))
        step += 1
        window.add(step_metrics)
        job.meter.count(batch)
        # An evaluation step logs too, whether or not `log_every` divides it.
        evaluate = is_due(step, config.eval_every, config.steps)
        if evaluate or is_due(step, config.log_every, config.steps):
          summary = job.log(step, window, job.meter.rates(), state, with_valid=evaluate)
          window = metrics_lib.MetricsWindow()
          job.meter.reset()
          if bar is not None:
            bar.set_postfix(loss=f"{summary['loss']:.4f}", tok_s=f"{summary['tokens_per_sec']:.0f}")
        if bar is not None:
          bar.update(1)
        if step % config.checkpoint_every == 0 and job.save(step, state, window):
          saved = step
        for hook in hooks:
          hook(step, saved == step, ckpt)
        stop = guard.signal or ("preemption notice" if ckpt.reached_preemption(step) else None)
        if stop:
          break
      if saved != step:
        job.save(step, state, window, force=True)
      ckpt.wait()
    finally:
      if bar is not None:
        bar.close()
      job.close()
  if stop:
    _announce_preemption(stop, step, workdir, job.is_main)
    summary["preempted_at"] = step
  elif job.is_main:  # whatever the progress bar: where the run went
    print(f"trained to step {step}: wrote {workdir} (metrics.jsonl, checkpoints/)", flush=True)
  summary["step"] = step
  return summary


def _train(config, workdir, task, mesh, ckpt, source, hooks) -> dict:
  """A single run: `_loop` over the train state of `state.setup`."""
  s, state, start, data_iter, window = _restore_or_init(config, workdir, task, mesh, ckpt, source)
  is_main = jax.process_index() == 0
  if is_main:
    workdir_lib.truncate_metrics(workdir, start)
  evaluator = evaluate.Evaluator(s)
  writer = metrics_lib.MetricWriter(workdir, enabled=is_main, start_step=start)

  def log(step, window, rates, state, *, with_valid):
    summary = window.means(step, s.schedules) | rates
    if with_valid:
      summary |= _evaluate_valid(evaluator, state, config)
    writer.write(step, summary)
    steps.check_finite(state)
    return summary

  grouped = config.data.length_groups > 1
  train_step = length_groups.TrainStep(s) if grouped else steps.make_train_step(s)
  if config.precompile and jax.process_count() == 1:
    train_step = _precompile(config, task, s, train_step, evaluator, state)
  elif not grouped:  # (a grouped step compiles ahead itself with several processes)
    train_step = sharding_lib.compile_ahead(train_step, "train_step")
  job = _Job(
      train_step=train_step, batches=data_iter,
      to_global=functools.partial(steps.to_global_batch, mesh=mesh),
      meter=metrics_lib.Throughput(flops_per_token=_flops_per_token(config, task),
                                   peak_flops=config.peak_flops), log=log,
      save=functools.partial(_save, ckpt, config, data_iter), close=writer.close, is_main=is_main)
  return _loop(config, workdir, ckpt, job, state, start, window, hooks)


def _restore_or_init(config, workdir, task, mesh, ckpt, source):
  """`(setup, state, start step, data iterator, metrics window)`: from the
  newest intact checkpoint, else fresh (or from `init_from`'s source run)."""
  params = None
  if source is not None and not ckpt.steps():
    params = init_from.load_params(config, source, mesh)
  s, state = state_lib.setup(config, mesh, task=task, params_override=params)
  restored = ckpt.restore_latest(s.abstract_state)
  if restored is None:
    return s, state, 0, _data_iterator(config, task, start_step=0), metrics_lib.MetricsWindow()
  start, state, meta = restored
  data_iter = _data_iterator(config, task, start_step=0)
  if meta.get("process_count") != jax.process_count() or not ckpt.restore_data(start, data_iter):
    # Iterator state is tied to the process layout: rebuild at the step instead.
    data_iter = _data_iterator(config, task, start_step=start)
  logging.info("resumed from step %d", start)
  if jax.process_index() == 0:
    print(f"resuming {workdir} from step {start}", flush=True)
  return s, state, start, data_iter, metrics_lib.MetricsWindow.from_json(meta.get("metrics_window"))


def _precompile(config, task, s, train_step, evaluator, state):
  """Compiles, before the first step and in parallel threads
  (`steps.compile_in_parallel`), the programs the run will need: the train
  step at the widths its batches will likely have (every bucket under the
  per-batch length curriculum or with length groups; with lengths drawn per
  example, nearly every batch holds a long example, so the last bucket) and
  the evaluation step of `valid`. Other widths compile when first seen, as
  without it. Returns the train step; `evaluator` runs its compiled program."""
  buckets = _train_buckets(config, task)
  grouped = isinstance(train_step, length_groups.TrainStep)
  if grouped:
    jobs = train_step.compile_jobs(buckets)
  else:
    widths = buckets if config.data.lengths == "per_batch" else buckets[-1:]
    jobs = steps.train_step_jobs(s, train_step, widths)
  jobs["valid"] = evaluator.compile_job(state["params"], "valid", num_examples=config.eval_examples)
  start = time.perf_counter()
  compiled = steps.compile_in_parallel(jobs, mesh=s.mesh)
  logging.info("compiled %d programs in parallel in %.1f s", len(compiled),
               time.perf_counter() - start)
  eval_args = jobs["valid"][1]
  evaluator.use_compiled({eval_args[1]["inputs"].shape: compiled.pop("valid")[0]})
  if grouped:
    train_step.use_compiled(compiled)
    return train_step
  return steps.Precompiled(train_step, {
      w: c[0] for (_, w), c in compiled.items()
  }, key_fn=steps.batch_width)


def _train_buckets(config, task) -> tuple[int, ...]:
  return tuple(config.buckets) or pipeline.length_buckets(task.max_sequence_length("train"))


def _data_iterator(config, task, *, start_step: int):
  """This process's training batches from `start_step` on (a grain iterator)."""
  return iter(
      pipeline.train_dataset(task, batch_size_per_process=config.batch_size // jax.process_count(),
                             seed=config.seed, buckets=_train_buckets(config, task),
                             process_index=jax.process_index(), process_count=jax.process_count(),
                             start_step=start_step, examples=config.data.examples,
                             lengths=config.data.lengths, length_groups=config.data.length_groups,
                             prefetch=config.prefetch))


def _flops_per_token(config, task) -> Callable[[int], float]:
  """The model's FLOPs per token of a batch padded to a width (for MFU)."""

  def at_width(width: int) -> float:
    return model_lib.flops_per_token(config.model, vocab_size=task.vocab_size, seq_len=width)

  return at_width


def _evaluate_valid(evaluator: evaluate.Evaluator, state, config) -> dict:
  results = evaluator.split(state["params"], "valid", num_examples=config.eval_examples)
  return {f"valid_{k}": results[k] for k in VALID_METRICS if k in results}


def _save(ckpt, config, data_iter, step: int, state, window: metrics_lib.MetricsWindow, *,
          force: bool = False) -> bool:
  """Saves `state` as of `step` (never a state past a non-finite step); False
  when the checkpointer skips the step."""
  steps.check_finite(state)
  trajectory = jax.device_get(state["trajectory"])
  count = int(trajectory["count"])
  recorded = dict(steps=np.asarray(trajectory["steps"][:count]),
                  frequencies=np.asarray(trajectory["frequencies"][:count]))
  meta = dict(process_count=jax.process_count(), step=step,
              config=workdir_lib.config_to_json(config), metrics_window=window.to_json())
  return ckpt.save(step, state, data_iter, recorded, meta, force=force)


def _announce_preemption(why: str, step: int, workdir: str, is_main: bool) -> None:
  message = (f"preempted ({why}): saved step {step} in {workdir}; re-run the same command to "
             "resume")
  logging.warning(message)
  if is_main:
    print(message, flush=True)


def _progress(config, start: int, is_main: bool):
  if not (is_main and config.progress_bar):
    return None
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  return tqdm(total=config.steps, initial=start, desc="train", dynamic_ncols=True)


# ----------------------------------------------------------------------------
# Populations: many runs of one config as one program (`bifocal_jax.population`).
# ----------------------------------------------------------------------------


def _train_population(config, workdir, task, mesh, ckpt, hooks) -> dict:
  """`_loop` over a population's stacked state: per-member logs
  (`_MemberLogs`); a member gone non-finite is frozen and reported while the
  others train on. One process (validated)."""
  pop, state, start, window = _restore_or_init_population(config, workdir, task, mesh, ckpt)
  batches = population.train_batches(pop, task, buckets=_train_buckets(config, task),
                                     start_step=start)
  logs = _MemberLogs(pop, workdir, start, state)

  def close():
    logs.close()
    if hasattr(batches, "close"):  # worker processes (population.data_workers)
      batches.close()

  job = _Job(
      train_step=population.make_train_step(pop), batches=batches,
      to_global=functools.partial(population.to_global_batch, mesh=mesh),
      meter=metrics_lib.Throughput(flops_per_token=_flops_per_token(config, task),
                                   peak_flops=config.peak_flops), log=logs.write,
      save=functools.partial(_save_population, ckpt, config), close=close)
  return _loop(config, workdir, ckpt, job, state, start, window, hooks)


def _restore_or_init_population(config, workdir, task, mesh, ckpt):
  """`(population, stacked state, start step, metrics window)`."""
  pop = population.setup(config, mesh, task=task)
  restored = ckpt.restore_latest(pop.setup.abstract_state)
  if restored is None:
    return pop, population.initial_state(pop), 0, metrics_lib.MetricsWindow()
  start, state, meta = restored
  logging.info("resumed from step %d", start)
  print(f"resuming {workdir} from step {start}", flush=True)
  return pop, state, start, metrics_lib.MetricsWindow.from_json(meta.get("metrics_window"))


class _MemberLogs:
  """A population's metrics: `members/<i>/metrics.jsonl` as member i's single
  run logs them (its `config.json` beside), and `metrics.jsonl` with the step
  rates of the whole population, the mean loss of the members still training
  and each one's (`member_losses`, null once frozen). A member that went
  non-finite is reported once (a line, and a `nonfinite` record in its
  metrics) and no longer logged; when every member has, `NonFiniteError`."""

  def __init__(self, pop: population.Population, workdir: str, start: int, state):
    self.pop, self.config = pop, pop.config
    for member in pop.members:
      directory = population.member_dir(workdir, member.index)
      os.makedirs(directory, exist_ok=True)
      atomic_files.write_json_atomically(
          os.path.join(directory, workdir_lib.CONFIG_FILE),
          workdir_lib.config_to_json(population.member_config(self.config, member)))
      workdir_lib.truncate_metrics(directory, start)
    workdir_lib.truncate_metrics(workdir, start)
    self.writer = metrics_lib.MetricWriter(workdir, start_step=start)
    self.member_writers = [
        metrics_lib.MetricWriter(population.member_dir(workdir, m.index), start_step=start)
        for m in pop.members
    ]
    first = evaluate.Evaluator(pop.member_setup(0))
    self.evaluators = [first.for_setup(pop.member_setup(i)) for i in range(pop.size)]
    self.schedules = pop.schedules
    self.frozen = population.nonfinite_members(state)  # reported before a resume

  def write(self, step: int, window: metrics_lib.MetricsWindow, rates: dict, state, *,
            with_valid: bool) -> dict:
    self._report_nonfinite(step, state)
    member_rates = dict(rates, tokens_per_sec=rates["tokens_per_sec"] / self.pop.size)
    losses = [None] * self.pop.size
    for i, member_window in enumerate(window.members()):
      if i in self.frozen:
        continue
      summary = member_window.means(step, self.schedules[i]) | member_rates
      if with_valid:
        member_state = dict(params=population.member_tree(state["params"], i))
        summary |= _evaluate_valid(self.evaluators[i], member_state, self.config)
      self.member_writers[i].write(step, summary)
      losses[i] = summary["loss"]
    training = [loss for loss in losses if loss is not None]
    record = dict(loss=float(np.mean(training)), member_losses=losses,
                  members_training=len(training)) | rates
    self.writer.write(step, record)
    return record

  def _report_nonfinite(self, step: int, state) -> None:
    bad = population.nonfinite_members(state)
    for i, (bad_step, what) in sorted(bad.items()):
      if i in self.frozen:
        continue
      message = (f"{self.pop.members[i]}: non-finite {what} at step {bad_step}; frozen at its "
                 f"last good state, {self.pop.size - len(bad)} members train on")
      logging.warning(message)
      print(message, flush=True)
      self.member_writers[i].write(step, dict(nonfinite=what, nonfinite_step=bad_step))
    self.frozen = bad
    _check_population_finite(self.pop.size, state)

  def close(self) -> None:
    for writer in (self.writer, *self.member_writers):
      writer.close()


def _check_population_finite(size: int, state) -> None:
  bad = population.nonfinite_members(state)
  if len(bad) == size:
    raise steps.NonFiniteError("every member of the population went non-finite (" + "; ".join(
        f"member {i}: {what} at step {s}" for i, (s, what) in sorted(bad.items())) +
                               "); stopped, the last good checkpoint is kept")


def _save_population(ckpt, config, step: int, state, window: metrics_lib.MetricsWindow, *,
                     force: bool = False) -> bool:
  """`_save` for a population: frozen members are saved as frozen (their last
  good state); the data need not be, being a function of the step."""
  _check_population_finite(len(population.members(config)), state)
  meta = dict(process_count=1, step=step, config=workdir_lib.config_to_json(config),
              metrics_window=window.to_json())
  return ckpt.save(step, state, None, population.recorded_trajectories(state), meta, force=force)
