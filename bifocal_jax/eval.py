r"""Evaluates trained runs: `python -m bifocal_jax.eval --workdir DIR` (or `python eval.py`).

  python -m bifocal_jax.eval --workdir DIR        # latest checkpoint, held-out splits
  python -m bifocal_jax.eval --workdir DIR --step 1000 --splits valid,test_length --num_examples 256
  python -m bifocal_jax.eval --workdir DIR --steps 500,1000,2000   # several checkpoints, one process
  python -m bifocal_jax.eval --workdir DIR --dyck_file k8_m20.test   # published data
  python -m bifocal_jax.eval --workdir DIR --spectrum   # + spectral analysis and plots
  python -m bifocal_jax.eval --workdir DIR --probe      # + depth probes, attention on brackets
  python -m bifocal_jax.eval --workdir DIR --che_per_length=512   # Chomsky tasks: the CHE protocol
  python -m bifocal_jax.eval --compare runs/a runs/b runs/c    # one markdown table + one PNG
  python -m bifocal_jax.eval --workdir POPULATION_DIR --member all   # each member of a population

Prints a table and writes `DIR/eval/results.json` (schema: the docstring of
`bifocal_jax/evaluation/evaluate.py`); `--out` writes elsewhere. `--steps` evaluates
several checkpoints of one run in one process (set up and compiled once), each
into its own `DIR/eval/results_step<N>.json`. `--dyck_file` (a path,
or a published file's bare name, found in the data directory: `--data_dir`,
else `$BIFOCAL_DATA_DIR`; `python -m bifocal_jax.tasks.external fetch`
downloads them) may be repeated; with it, task splits are scored only when
`--splits` names them.
`--probe` (Dyck, ListOps) fits linear probes of the nesting depth (and
ListOps' open operator) to each layer's residual stream and measures each
head's attention on the matching bracket, on `--probe_examples` examples of
`valid` and `test_depth` (`bifocal_jax/evaluation/probe.py`); `eval/probe.png` beside
the results.
`--compare` writes `compare.md` and `compare.png` into the runs' common parent
directory (or `--out FILE.md`), evaluating runs that have no results yet.
A population's workdir (`config.population`) is evaluated member by member:
`--member i` or `--member all` (one compiled evaluation for all of them), each
into `DIR/members/<i>/eval/results.json`; members that went non-finite are
reported and skipped (`--member i` of one is an error).

Data directory: `--data_dir`, else `$BIFOCAL_DATA_DIR`, else
`$XDG_CACHE_HOME/bifocal_jax/data` (published files: `python -m
bifocal_jax.tasks.external fetch`, or a local copy there). Distributed: none
to set; evaluation runs in one process over this machine's devices (training's
`--coordinator_address`, `--num_processes`, `--process_id` are `train.py`'s).
The configs runs are trained from: `python -m bifocal_jax.configs`.
A bad flag, split, member or workdir is one line on stderr, exit status 2.
"""

from absl import app
from absl import flags

from bifocal_jax import machine
from bifocal_jax import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory to evaluate.")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
_STEPS = flags.DEFINE_list(
    "steps", None, "Several checkpoint steps, each into DIR/eval/results_step<N>.json "
    "(one process: the evaluation compiles once).")
_SPLITS = flags.DEFINE_list("splits", None, "Task splits to score (default: every held-out split).")
_NUM_EXAMPLES = flags.DEFINE_integer("num_examples", None,
                                     "Examples per task split (default: the whole split).")
_DYCK_FILE = flags.DEFINE_multi_string(
    "dyck_file", [], "A Dyck file (Yao et al. 2021 format) to score on: a path, or a published "
    "file's name (k8_m10.test) in the data directory.")
_DATA_DIR = flags.DEFINE_string(
    "data_dir", None, "Data directory of the published files (default: $BIFOCAL_DATA_DIR, else "
    "$XDG_CACHE_HOME/bifocal_jax/data).")
_CHE = flags.DEFINE_bool(
    "che", None, "Deletang et al.'s protocol (every test length, --che_per_length examples "
    "each; score = mean of per-length accuracies). Default: on for Chomsky-hierarchy tasks "
    "unless --splits or --dyck_file is given.")
_CHE_STRIDE = flags.DEFINE_integer("che_stride", 1, "CHE protocol: every n-th test length.",
                                   lower_bound=1)
_CHE_PER_LENGTH = flags.DEFINE_integer("che_per_length", 32,
                                       "CHE protocol: examples per length (the paper: 512).",
                                       lower_bound=1)
_SPECTRUM = flags.DEFINE_bool(
    "spectrum", False, "Add the spectral analysis (harmonic fits, plots) of the trajectory.")
_PROBE = flags.DEFINE_bool(
    "probe", False, "Add linear probes of nesting depth per layer and each head's attention on "
    "the matching bracket (Dyck, ListOps).")
_PROBE_EXAMPLES = flags.DEFINE_integer("probe_examples", 256,
                                       "--probe: examples of valid and of test_depth.",
                                       lower_bound=2)
_COMPARE = flags.DEFINE_string("compare", None,
                               "Compare runs: --compare DIR1 DIR2 ... (or DIR1,DIR2,...).")
_OUT = flags.DEFINE_string(
    "out", None, "Results JSON path (default DIR/eval/results.json); with --compare, "
    "the markdown path.")
_MEMORY_BUDGET_MB = flags.DEFINE_integer(
    "memory_budget_mb", None,
    "Attention-score memory per batch (MiB; default 1024, `budget_batches.DEFAULT_MEMORY_BUDGET`): "
    "sets the batch size of long strings.")
_MEMBER = flags.DEFINE_string("member", None,
                              "A population's member to evaluate: its index, or 'all'.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", None,
                                   "Largest batch (default: the run's eval_batch_size).")


def main(argv):
  from bifocal_jax.evaluation import compare  # pylint: disable=g-import-not-at-top
  from bifocal_jax.evaluation import budget_batches  # pylint: disable=g-import-not-at-top
  from bifocal_jax.evaluation import evaluate  # pylint: disable=g-import-not-at-top
  from bifocal_jax.evaluation import evaluator
  cli.quiet_library_logs()
  extra = argv[1:]
  if _COMPARE.value is not None:
    workdirs = [w for w in _COMPARE.value.split(",") if w] + extra
    compare.compare(workdirs, out=_OUT.value)
    return 0
  if extra:
    raise ValueError(f"unexpected arguments {extra} (only --compare takes several)")
  if _WORKDIR.value is None:
    raise ValueError("--workdir is required (or --compare DIR1 DIR2 ...)")
  options = dict(
      splits=_SPLITS.value, num_examples=_NUM_EXAMPLES.value, dyck_files=_DYCK_FILE.value,
      spectrum=_SPECTRUM.value, probe=_PROBE.value, probe_examples=_PROBE_EXAMPLES.value,
      che=_CHE.value, che_protocol=evaluator.CheProtocol(stride=_CHE_STRIDE.value,
                                                         per_length=_CHE_PER_LENGTH.value),
      memory_budget=(budget_batches.DEFAULT_MEMORY_BUDGET
                     if _MEMORY_BUDGET_MB.value is None else _MEMORY_BUDGET_MB.value << 20),
      max_batch_size=_BATCH_SIZE.value, data_dir=_DATA_DIR.value)
  if _STEPS.value is not None:
    for name, flag in (("--step", _STEP), ("--member", _MEMBER), ("--out", _OUT)):
      if flag.value is not None:
        raise ValueError(f"--steps evaluates a single run's checkpoints, each into its own "
                         f"results file: drop {name}")
    evaluate.evaluate_steps(_WORKDIR.value, [_step_number(s) for s in _STEPS.value], **options)
    return 0
  if _MEMBER.value is None:
    evaluate.evaluate(_WORKDIR.value, step=_STEP.value, out=_OUT.value, **options)
    return 0
  members = None if _MEMBER.value == "all" else [_member_index(_MEMBER.value)]
  if members is None and _OUT.value:
    raise ValueError("--out names one results file: use it with --member i, not all")
  runs, frozen = evaluate.load_members(_WORKDIR.value, step=_STEP.value, members=members,
                                       memory_budget=options["memory_budget"],
                                       max_batch_size=options["max_batch_size"])
  if members is not None and frozen:
    raise ValueError(f"member={members[0]}: {frozen[members[0]]}")
  for why in frozen.values():
    print(why, flush=True)
  if not runs:
    raise ValueError(f"workdir={_WORKDIR.value!r}: every member went non-finite; nothing to "
                     "evaluate")
  for run in runs:
    evaluate.evaluate(run, out=_OUT.value, **options)
  return 0


def _step_number(value: str) -> int:
  try:
    return int(value)
  except ValueError:
    raise ValueError(
        f"--steps: {value!r} is not a checkpoint step (--steps=500,1000,...)") from None


def _member_index(value: str) -> int:
  try:
    return int(value)
  except ValueError:
    raise ValueError(f"--member={value!r}: an index (0, 1, ...) or 'all'") from None


def run():
  """The command: machine set-up, then flags, then `main`; a bad flag or a
  ValueError (a bad split, member or workdir) is one line on stderr, status 2."""
  machine.use_tuned_allocator()  # before JAX starts: see bifocal_jax/machine.py
  machine.use_compilation_cache()  # evaluations of like models share compiled steps
  if __name__ != "__main__":  # `python eval.py`, `bifocal-eval`: this module's flags in --help
    cli.use_in_help(__doc__, [f.name for f in flags.FLAGS.get_flags_for_module(__name__)])
  try:
    app.run(main, flags_parser=cli.flags_parser())
  except ValueError as e:
    cli.fail(str(e))


if __name__ == "__main__":
  run()
