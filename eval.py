r"""Evaluates trained runs: `python eval.py --workdir DIR`.

  python eval.py --workdir DIR                    # latest checkpoint, held-out splits
  python eval.py --workdir DIR --step 1000 --splits valid,test_length --num_examples 256
  python eval.py --workdir DIR \
      --dyck_file ../shared/external/dyck-yao2021/k8_m20.test   # published data
  python eval.py --workdir DIR --spectrum          # + spectral analysis and plots
  python eval.py --workdir DIR --che_per_length=512   # Chomsky tasks: the paper's CHE protocol
  python eval.py --compare runs/a runs/b runs/c    # one markdown table + one PNG
  python eval.py --workdir POPULATION_DIR --member all   # each member of a population

Prints a table and writes `DIR/eval/results.json` (schema: the docstring of
`bifocal_jax/evaluate.py`); `--out` writes elsewhere. `--dyck_file` may be
repeated; with it, task splits are scored only when `--splits` names them.
`--compare` writes `compare.md` and `compare.png` into the runs' common parent
directory (or `--out FILE.md`), evaluating runs that have no results yet.
A population's workdir (`config.population`) is evaluated member by member:
`--member i` or `--member all` (one compiled evaluation for all of them), each
into `DIR/members/<i>/eval/results.json`; members that went non-finite are
reported and skipped (`--member i` of one is an error).
"""

import sys

from bifocal_jax import host

host.use_tuned_allocator()  # before JAX starts: see bifocal_jax/host.py
host.use_compilation_cache()  # evaluations of like models share compiled steps

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags

from bifocal_jax import evaluate
from bifocal_jax import launch

_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory to evaluate.")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
_SPLITS = flags.DEFINE_list(
    "splits", None, "Task splits to score (default: every held-out split).")
_NUM_EXAMPLES = flags.DEFINE_integer(
    "num_examples", None, "Examples per task split (default: the whole split).")
_DYCK_FILE = flags.DEFINE_multi_string(
    "dyck_file", [], "A published Dyck file (Yao et al. 2021 format) to score on.")
_CHE = flags.DEFINE_bool(
    "che", None, "Deletang et al.'s protocol (every test length, --che_per_length examples "
    "each; score = mean of per-length accuracies). Default: on for Chomsky-hierarchy tasks "
    "unless --splits or --dyck_file is given.")
_CHE_STRIDE = flags.DEFINE_integer("che_stride", 1, "CHE protocol: every n-th test length.",
                                   lower_bound=1)
_CHE_PER_LENGTH = flags.DEFINE_integer(
    "che_per_length", 32, "CHE protocol: examples per length (the paper: 512).", lower_bound=1)
_SPECTRUM = flags.DEFINE_bool(
    "spectrum", False, "Add the spectral analysis (harmonic fits, plots) of the trajectory.")
_COMPARE = flags.DEFINE_string(
    "compare", None, "Compare runs: --compare DIR1 DIR2 ... (or DIR1,DIR2,...).")
_OUT = flags.DEFINE_string(
    "out", None, "Results JSON path (default DIR/eval/results.json); with --compare, "
    "the markdown path.")
_MEMORY_BUDGET_MB = flags.DEFINE_integer(
    "memory_budget_mb", evaluate.DEFAULT_MEMORY_BUDGET >> 20,
    "Attention-score memory per batch (MiB): sets the batch size of long strings.")
_MEMBER = flags.DEFINE_string(
    "member", None, "A population's member to evaluate: its index, or 'all'.")
_BATCH_SIZE = flags.DEFINE_integer(
    "batch_size", None, "Largest batch (default: the run's eval_batch_size).")


def main(argv):
  launch.quiet_library_logs()
  extra = argv[1:]
  if _COMPARE.value is not None:
    workdirs = [w for w in _COMPARE.value.split(",") if w] + extra
    evaluate.compare(workdirs, out=_OUT.value)
    return 0
  if extra:
    raise app.UsageError(f"unexpected arguments {extra} (only --compare takes several)")
  if _WORKDIR.value is None:
    raise app.UsageError("--workdir is required (or --compare DIR1 DIR2 ...)")
  options = dict(
      splits=_SPLITS.value, num_examples=_NUM_EXAMPLES.value, dyck_files=_DYCK_FILE.value,
      spectrum=_SPECTRUM.value, che=_CHE.value,
      che_protocol=evaluate.CheProtocol(stride=_CHE_STRIDE.value,
                                        per_length=_CHE_PER_LENGTH.value),
      memory_budget=_MEMORY_BUDGET_MB.value << 20, max_batch_size=_BATCH_SIZE.value)
  if _MEMBER.value is None:
    evaluate.evaluate(_WORKDIR.value, step=_STEP.value, out=_OUT.value, **options)
    return 0
  members = None if _MEMBER.value == "all" else [_member_index(_MEMBER.value)]
  if members is None and _OUT.value:
    raise app.UsageError("--out names one results file: use it with --member i, not all")
  runs, frozen = evaluate.load_members(
      _WORKDIR.value, step=_STEP.value, members=members,
      memory_budget=options["memory_budget"], max_batch_size=options["max_batch_size"])
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


def _member_index(value: str) -> int:
  try:
    return int(value)
  except ValueError:
    raise app.UsageError(f"--member={value!r}: an index (0, 1, ...) or 'all'") from None


if __name__ == "__main__":
  try:
    app.run(main)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
