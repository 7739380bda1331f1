"""The training loop and its parts, for a single run and for a population.

`run(config, workdir, ckpt, job, state, start, window, hooks)` reads top to
bottom: per step the next batch, the train step, the metrics window; at log
steps the window's means are written (with an evaluation of `valid` at
evaluation steps), at checkpoint steps the state is saved, hooks run, and a
signal or a preemption notice ends the loop early. One save after the loop
keeps its last step. What differs between a single run and a population (the
step, the batches, the logs, the save) is the `Job`'s; `bifocal_jax.train`
builds both, with the evaluator.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence

import jax
import numpy as np
from absl import logging

from bifocal_jax.nn import model as model_lib
from bifocal_jax.tasks import pipeline
from bifocal_jax.training import checkpoint as checkpoint_lib
from bifocal_jax.training import metrics as metrics_lib
from bifocal_jax.training import population
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps
from bifocal_jax.training import init_from
from bifocal_jax.training import workdir as workdir_lib

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


@dataclasses.dataclass
class Job:
  """What `run` drives: a single run (`_train`) or a population
  (`_train_population`) differ only in these."""
  train_step: Callable  # (state, global batch) -> (state, step metrics)
  batches: Iterator  # this process's batches
  to_global: Callable  # a local batch -> the global batch on the mesh
  meter: metrics_lib.Throughput
  log: Callable  # (step, window, rates, state, *, with_valid) -> the logged record
  save: Callable  # (step, state, window, *, force=False) -> whether a save began
  close: Callable[[], None]
  is_main: bool = True


def run(config, workdir: str, ckpt, job: Job, state, start: int, window: metrics_lib.MetricsWindow,
        hooks: Sequence[Hook]) -> dict:
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
            if evaluate:
              bar.write(progress_line(step, config.steps, summary))
          elif job.is_main:
            print(progress_line(step, config.steps, summary), flush=True)
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
  summary["step"] = step
  return summary


# The validation scores a progress line and the run's summary show, in this
# order (Dyck's closing-bracket accuracy first, as its results tables).
VALID_SHOWN = (("valid_close_accuracy", "close"), ("valid_token_accuracy", "token"),
               ("valid_sequence_accuracy", "seq"))


def valid_scores(record: dict) -> str:
  """`close 0.436, token 0.696, seq 0.161`: the validation scores of a logged record."""
  return ", ".join(f"{name} {record[key]:.3f}" for key, name in VALID_SHOWN if key in record)


def progress_line(step: int, total: int, record: dict) -> str:
  """One logged step for the user: its loss, speed and (at evaluations) validation scores."""
  line = f"step {step}/{total}: loss {record['loss']:.4f}, {record['tokens_per_sec']:,.0f} tokens/s"
  scores = valid_scores(record)
  return line + (f"; valid {scores}" if scores else "")


def restore_or_init(config, workdir, task, mesh, ckpt, source):
  """`(setup, state, start step, data iterator, metrics window)`: from the
  newest intact checkpoint, else fresh (or from `init_from`'s source run)."""
  params = None
  if source is not None and not ckpt.steps():
    params = init_from.load_params(config, source, mesh)
  s, state = state_lib.setup(config, mesh, task=task, params_override=params)
  restored = ckpt.restore_latest(s.abstract_state)
  if restored is None:
    return s, state, 0, data_iterator(config, task, start_step=0), metrics_lib.MetricsWindow()
  start, state, meta = restored
  data_iter = data_iterator(config, task, start_step=0)
  if meta.get("process_count") != jax.process_count() or not ckpt.restore_data(start, data_iter):
    # Iterator state is tied to the process layout: rebuild at the step instead.
    data_iter = data_iterator(config, task, start_step=start)
  _announce_resume(workdir, start)
  return s, state, start, data_iter, metrics_lib.MetricsWindow.from_json(meta.get("metrics_window"))


def train_buckets(config, task) -> tuple[int, ...]:
  return tuple(config.buckets) or pipeline.length_buckets(task.max_sequence_length("train"))


def data_iterator(config, task, *, start_step: int):
  """This process's training batches from `start_step` on (a grain iterator)."""
  return iter(
      pipeline.train_dataset(task, batch_size_per_process=config.batch_size // jax.process_count(),
                             seed=config.seed, buckets=train_buckets(config, task),
                             process_index=jax.process_index(), process_count=jax.process_count(),
                             start_step=start_step, examples=config.data.examples,
                             lengths=config.data.lengths, length_groups=config.data.length_groups,
                             prefetch=config.prefetch))


def flops_per_token(config, task) -> Callable[[int], float]:
  """The model's FLOPs per token of a batch padded to a width (for MFU)."""

  def at_width(width: int) -> float:
    return model_lib.flops_per_token(config.model, vocab_size=task.vocab_size, seq_len=width)

  return at_width


def save(ckpt, config, data_iter, step: int, state, window: metrics_lib.MetricsWindow, *,
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


def _announce_resume(workdir: str, start: int) -> None:
  """Once per run: printed by process 0, logged by the others."""
  if jax.process_index() == 0:
    print(f"resuming {workdir} from step {start}", flush=True)
  else:
    logging.info("resuming %s from step %d", workdir, start)


def finished_step(config, ckpt) -> int | None:
  """The step of `ckpt`'s newest checkpoint when the run is already done (it
  is at `config.steps` or past it, and intact); else None, and the run
  resumes (or falls back past a damaged checkpoint) as usual."""
  saved = ckpt.steps()
  if saved and saved[-1] >= config.steps and ckpt.is_intact(saved[-1]):
    return saved[-1]
  return None


def _announce_preemption(why: str, step: int, workdir: str, is_main: bool) -> None:
  message = (f"preempted ({why}): saved step {step} in {workdir}; re-run the same command to "
             "resume")
  logging.warning(message)
  if is_main:
    print(message, flush=True)


def _progress(config, start: int, is_main: bool):
  """A tqdm bar where one can be seen (`config.progress_bar`, stderr a
  terminal); elsewhere (logs, tests, notebooks' captured output) each logged
  step is a line (`progress_line`)."""
  if not (is_main and config.progress_bar and sys.stderr.isatty()):
    return None
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  return tqdm(total=config.steps, initial=start, desc="train", dynamic_ncols=True)


def restore_or_init_population(config, workdir, task, mesh, ckpt):
  """`(population, stacked state, start step, metrics window)`."""
  pop = population.setup(config, mesh, task=task)
  restored = ckpt.restore_latest(pop.setup.abstract_state)
  if restored is None:
    return pop, population.initial_state(pop), 0, metrics_lib.MetricsWindow()
  start, state, meta = restored
  _announce_resume(workdir, start)
  return pop, state, start, metrics_lib.MetricsWindow.from_json(meta.get("metrics_window"))


def check_population_finite(size: int, state) -> None:
  bad = population.nonfinite_members(state)
  if len(bad) == size:
    raise steps.NonFiniteError("every member of the population went non-finite (" + "; ".join(
        f"member {i}: {what} at step {s}" for i, (s, what) in sorted(bad.items())) +
                               "); stopped, the last good checkpoint is kept")


def save_population(ckpt, config, step: int, state, window: metrics_lib.MetricsWindow, *,
                    force: bool = False) -> bool:
  """`save` for a population: frozen members are saved as frozen (their last
  good state); the data need not be, being a function of the step."""
  check_population_finite(len(population.members(config)), state)
  meta = dict(process_count=1, step=step, config=workdir_lib.config_to_json(config),
              metrics_window=window.to_json())
  return ckpt.save(step, state, None, population.recorded_trajectories(state), meta, force=force)
