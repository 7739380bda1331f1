r"""Training: `train_and_evaluate(config, workdir)`, the whole job as a function,
and the command around it.

  python -m bifocal_jax.train --config dyck --workdir DIR        (or `python train.py`, `bifocal-train`)
  python -m bifocal_jax.train --config dyck:tiny --config.position.kind=rope --workdir DIR

`--config` names a config of the package (`dyck`, `dyck:tiny`; see
`bifocal_jax.configs`) or a config file (`configs/dyck.py:tiny`). Any config
key can be overridden as `--config.KEY=VALUE`. Re-running the same command on
the same DIR resumes from its latest checkpoint. Outputs in DIR: `config.json`,
`metrics.jsonl`, `tensorboard/`, `checkpoints/`; the run ends with a summary
(final loss and validation scores, where it wrote, the command evaluating it).

Multi-process: on TPU pods `jax.distributed.initialize()` finds its peers; on
other clusters (and for tests on CPU) pass `--coordinator_address`,
`--num_processes` and `--process_id`. When a process of a multi-process run
dies, JAX's coordination service notices within `--heartbeat_timeout` seconds
and aborts the others (status 134): nothing hangs, and re-running resumes.
Exit statuses: `bifocal_jax.cli`.

The loop is `training.loop`; this module gives it the evaluator (the periodic
evaluation of `valid`, `evaluation.evaluate.Evaluator`) and the per-member
logs of a population (`_MemberLogs`). Notebooks call `train_and_evaluate`.
"""

from __future__ import annotations

if __name__ == "__main__":  # `python -m bifocal_jax.train`: set up the machine before JAX starts
  from bifocal_jax import machine  # pylint: disable=g-import-not-at-top
  machine.use_tuned_allocator()
  machine.use_compilation_cache()

import functools
import os
import shlex
import sys
import time
import traceback
from collections.abc import Sequence

import jax
import ml_collections
import numpy as np
from absl import app
from absl import flags
from absl import logging

from bifocal_jax import cli
from bifocal_jax import machine
from bifocal_jax import tasks
from bifocal_jax.nn import positions
from bifocal_jax.evaluation import evaluator as evaluator_lib
from bifocal_jax.training import atomic_files
from bifocal_jax.training import checkpoint as checkpoint_lib
from bifocal_jax.training import config as config_lib
from bifocal_jax.training import init_from
from bifocal_jax.training import length_groups
from bifocal_jax.training import loop
from bifocal_jax.training import metrics as metrics_lib
from bifocal_jax.training import population
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax.training import steps
from bifocal_jax.training import workdir as workdir_lib

Hook = loop.Hook

# What the periodic evaluation of `valid` logs (as `valid_<key>`).
VALID_METRICS = ("token_accuracy", "sequence_accuracy", "loss", "close_accuracy")


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str, *, overwrite: bool = False,
                       hooks: Sequence[Hook] = ()) -> dict:
  """Trains (resuming from `workdir` if it holds a checkpoint).

  Returns the last logged metrics with `step`, plus `preempted_at` when a
  signal stopped the run (after saving it). Raises `config.ConfigError` or
  `workdir.WorkdirConflictError` before anything is written.

  Process 0 prints a line when it starts, one per logged step (or a progress
  bar on a terminal), and at the end a summary: the final loss and
  validation scores, the time taken, where the outputs are and the command
  that evaluates them. A run already at `config.steps` says so in one line
  and returns its last logged metrics, building and compiling nothing.
  """
  started = time.perf_counter()
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
    done = loop.finished_step(config, ckpt)
    if done is not None:
      return _already_finished(config, workdir, done)
    if jax.process_index() == 0:
      print(
          f"training {workdir}: task {task.name}, position {positions.scheme_name(config.position)}, "
          f"{config.steps} steps of batch {config.batch_size}", flush=True)
    if population.is_population(config):
      summary, has_spectral = _train_population(config, workdir, task, mesh, ckpt, hooks)
    else:
      summary, has_spectral = _train(config, workdir, task, mesh, ckpt, source, hooks)
  if jax.process_index() == 0 and "preempted_at" not in summary:
    print(
        _summary(config, workdir, summary,
                 time.perf_counter() - started, has_spectral=has_spectral), flush=True)
  return summary


def eval_command(config, workdir: str) -> str:
  """The command that evaluates the run in `workdir` (each member of a population)."""
  command = f"python -m bifocal_jax.eval --workdir {shlex.quote(workdir)}"
  return command + (" --member all" if population.is_population(config) else "")


def _already_finished(config, workdir: str, step: int) -> dict:
  if jax.process_index() == 0:
    print(
        f"{workdir} already finished: it holds step {step} of {config.steps}, nothing to "
        f"train; evaluate it with: {eval_command(config, workdir)}", flush=True)
  records = metrics_lib.read_metrics(workdir)
  return dict(records[-1] if records else {}, step=step)


def _summary(config, workdir: str, record: dict, seconds: float, *, has_spectral: bool) -> str:
  """The end of a run, for its user: what it reached, where it wrote, what to run next."""
  step = record["step"]
  scores = loop.valid_scores(record)
  if population.is_population(config):
    scores = "each member's in members/<i>/metrics.jsonl"
  lines = [
      f"trained to step {step} in {seconds:.0f} s: final loss {record['loss']:.4f}" +
      (f"; valid {scores}" if scores else ""),
      f"  checkpoints  {checkpoint_lib.checkpoint_dir(workdir)}",
      f"  metrics      {os.path.join(workdir, workdir_lib.METRICS_FILE)} (and "
      f"{os.path.join(workdir, 'tensorboard')})",
      "  trajectory   " +
      (f"in each checkpoint: bifocal_jax.analysis.load_trajectory({workdir!r}); eval --spectrum "
       "plots it"
       if has_spectral else f"none (position {positions.scheme_name(config.position)} learns no "
       "frequencies)"),
      f"next: {eval_command(config, workdir)}",
  ]
  return "\n".join(lines)


def _train(config, workdir, task, mesh, ckpt, source, hooks) -> tuple[dict, bool]:
  """A single run: `loop.run` over the train state of `state.setup`; `(its
  summary, whether the model has spectral frequencies)`."""
  s, state, start, data_iter, window = loop.restore_or_init(config, workdir, task, mesh, ckpt,
                                                            source)
  is_main = jax.process_index() == 0
  if is_main:
    workdir_lib.truncate_metrics(workdir, start)
  evaluator = evaluator_lib.Evaluator(s)
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
  job = loop.Job(
      train_step=train_step, batches=data_iter,
      to_global=functools.partial(steps.to_global_batch, mesh=mesh),
      meter=metrics_lib.Throughput(flops_per_token=loop.flops_per_token(config, task),
                                   peak_flops=config.peak_flops), log=log,
      save=functools.partial(loop.save, ckpt, config,
                             data_iter), close=writer.close, is_main=is_main)
  return loop.run(config, workdir, ckpt, job, state, start, window, hooks), s.has_spectral


def _precompile(config, task, s, train_step, evaluator, state):
  """Compiles, before the first step and in parallel threads
  (`steps.compile_in_parallel`), the programs the run will need: the train
  step at the widths its batches will likely have (every bucket under the
  per-batch length curriculum or with length groups; with lengths drawn per
  example, nearly every batch holds a long example, so the last bucket) and
  the evaluation step of `valid`. Other widths compile when first seen, as
  without it. Returns the train step; `evaluator` runs its compiled program."""
  buckets = loop.train_buckets(config, task)
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


def _evaluate_valid(evaluator: evaluator_lib.Evaluator, state, config) -> dict:
  results = evaluator.split(state["params"], "valid", num_examples=config.eval_examples)
  return {f"valid_{k}": results[k] for k in VALID_METRICS if k in results}


# ----------------------------------------------------------------------------


def _train_population(config, workdir, task, mesh, ckpt, hooks) -> tuple[dict, bool]:
  """`loop.run` over a population's stacked state: per-member logs
  (`_MemberLogs`); a member gone non-finite is frozen and reported while the
  others train on. One process (validated)."""
  pop, state, start, window = loop.restore_or_init_population(config, workdir, task, mesh, ckpt)
  batches = population.train_batches(pop, task, buckets=loop.train_buckets(config, task),
                                     start_step=start)
  logs = _MemberLogs(pop, workdir, start, state)

  def close():
    logs.close()
    if hasattr(batches, "close"):  # worker processes (population.data_workers)
      batches.close()

  job = loop.Job(
      train_step=population.make_train_step(pop), batches=batches,
      to_global=functools.partial(population.to_global_batch, mesh=mesh),
      meter=metrics_lib.Throughput(flops_per_token=loop.flops_per_token(config, task),
                                   peak_flops=config.peak_flops), log=logs.write,
      save=functools.partial(loop.save_population, ckpt, config), close=close)
  return (loop.run(config, workdir, ckpt, job, state, start, window, hooks), pop.setup.has_spectral)


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
    first = evaluator_lib.Evaluator(pop.member_setup(0))
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
    loop.check_population_finite(self.pop.size, state)

  def close(self) -> None:
    for writer in (self.writer, *self.member_writers):
      writer.close()


# ----------------------------------------------------------------------------
# The command. Flags are defined when the command runs, not at import: a
# notebook or a test may import this module beside other absl programs.
# ----------------------------------------------------------------------------

_CONFIG = _WORKDIR = _OVERWRITE = _PRINT_CONFIG = None
_COORDINATOR = _NUM_PROCESSES = _PROCESS_ID = _HEARTBEAT = None


def define_flags() -> None:
  """The command's flags (once per process)."""
  global _CONFIG, _WORKDIR, _OVERWRITE, _PRINT_CONFIG
  global _COORDINATOR, _NUM_PROCESSES, _PROCESS_ID, _HEARTBEAT
  if _CONFIG is not None:
    return
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  _CONFIG = config_flags.DEFINE_config_file(
      "config", None, "Training config: a config of the package (dyck, dyck:tiny) or a file.",
      lock_config=True)
  _WORKDIR = flags.DEFINE_string(
      "workdir", None, "Run directory (checkpoints, metrics); required "
      "unless --print_config.")
  _PRINT_CONFIG = flags.DEFINE_bool(
      "print_config", False, "Print the resolved config (overrides applied) and exit: nothing "
      "trained or written.")
  _OVERWRITE = flags.DEFINE_bool("overwrite", False,
                                 "Replace a run with a different config in --workdir.")
  _COORDINATOR = flags.DEFINE_string(
      "coordinator_address", None, "host:port of process 0, for multi-process runs off TPU pods.")
  _NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes.")
  _PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
  _HEARTBEAT = flags.DEFINE_integer(
      "heartbeat_timeout", 30, "Seconds without a peer's heartbeat before a process gives up.")
  flags.mark_flags_as_required(["config"])  # --workdir: checked in `main` (not for --print_config)


def initialize_distributed() -> None:
  """`jax.distributed.initialize` with explicit flags, or auto-detected on TPU pods."""
  if _COORDINATOR is not None and _COORDINATOR.value:
    if _NUM_PROCESSES.value is None or _PROCESS_ID.value is None:
      cli.fail("--coordinator_address needs --num_processes and --process_id")
    jax.distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
                               heartbeat_timeout_seconds=_HEARTBEAT.value)
  elif os.environ.get("TPU_WORKER_HOSTNAMES") or os.environ.get("MEGASCALE_COORDINATOR_ADDRESS"):
    jax.distributed.initialize()


def run_training(config, workdir: str, *, overwrite: bool = False, hooks=()) -> int:
  """`train.train_and_evaluate` with expected failures as one line and an exit
  status (see the module docstring). `hooks`: see `loop.Hook`."""
  cli.quiet_library_logs()
  initialize_distributed()
  try:
    train_and_evaluate(config, workdir, overwrite=overwrite, hooks=hooks)
  except (config_lib.ConfigError, workdir_lib.WorkdirConflictError) as e:
    cli.fail(str(e))
  except (steps.NonFiniteError, checkpoint_lib.CheckpointError) as e:
    cli.fail(str(e), status=1)
  except jax.errors.JaxRuntimeError as e:
    logging.exception("runtime failure")
    cli.fail(f"runtime failure (a lost peer or device?): {cli.first_line(e)}", status=1)
  except KeyboardInterrupt:
    cli.fail("interrupted; re-run the same command to resume from the last checkpoint", status=130)
  except Exception:  # pylint: disable=broad-except
    if not cli.is_multiprocess():
      raise
    traceback.print_exc()
    cli.fail("the run failed (traceback above)", status=1)
  return 0


def main(argv, hooks: Sequence[Hook] = ()):
  """`hooks`: `loop.Hook`s (tests inject them; see tests/train_with_signal.py)."""
  if len(argv) > 1:
    cli.fail(f"unexpected arguments {argv[1:]} (config keys are set as --config.KEY=VALUE)")
  if _PRINT_CONFIG.value:
    print(_CONFIG.value, end="")
    sys.exit(0)
  if not _WORKDIR.value:
    cli.fail("--workdir is required: the run's directory (re-running on it resumes); "
             "--print_config shows the config without one")
  sys.exit(run_training(_CONFIG.value, _WORKDIR.value, overwrite=_OVERWRITE.value, hooks=hooks))


USAGE = """Trains a model; re-running the same command resumes from DIR's latest checkpoint.

  python -m bifocal_jax.train --config CONFIG --workdir DIR [--config.KEY=VALUE ...]
  (also `python train.py` in a checkout, `bifocal-train` where the package is installed)

  python -m bifocal_jax.train --config dyck:tiny --workdir /tmp/dyck_tiny
  python -m bifocal_jax.train --config dyck --config.position.kind=rope --config.steps=500 --workdir runs/rope

  python -m bifocal_jax.train --config dyck:tiny --config.steps=60 --print_config

CONFIG: a config of the package, NAME or NAME:VARIANT (variants: tiny for tests,
paper for an accelerator), or a config file (configs/dyck.py:tiny). Any key of it
is overridden as --config.KEY=VALUE; --print_config prints the result and exits.
The configs of the package (each with its variants and what it trains:
`python -m bifocal_jax.configs`):
{configs}

--config.position.kind, the position scheme (a+b: two kinds, half the heads each):
{kinds}
DIR gets config.json, metrics.jsonl, tensorboard/ and checkpoints/ (with the
frequency trajectory); the run ends with a summary and the command that evaluates it.

Data: training draws its examples from the task's generator. The published Dyck
files that `python -m bifocal_jax.eval --dyck_file` scores on live in the data
directory: eval's --data_dir, else $BIFOCAL_DATA_DIR, else the user's cache
(`python -m bifocal_jax.tasks.external fetch` downloads them there).

Several processes (off TPU pods, where they are found by themselves): the same
command in each with --coordinator_address=HOST:PORT --num_processes=N
--process_id=I (and --heartbeat_timeout); see the module docstring.
"""


def run(hooks: Sequence[Hook] = ()):
  """The command: machine set-up, then flags, then `main`."""
  machine.use_tuned_allocator()  # may re-execute the command line: see bifocal_jax/machine.py
  machine.use_compilation_cache()  # a re-run loads its compiled steps
  define_flags()
  cli.use_in_help(
      USAGE.format(configs=cli.wrapped(", ".join(cli.CONFIG_NAMES)),
                   kinds=cli.wrapped(", ".join(positions.POSITION_KINDS))),
      ("config", "workdir", "print_config", "overwrite", "coordinator_address", "num_processes",
       "process_id", "heartbeat_timeout"))
  app.run(lambda argv: main(argv, hooks=hooks), flags_parser=cli.flags_parser(_CONFIG))


if __name__ == "__main__":
  run()
