r"""Prints examples of a task's split: input tokens, a tab, target tokens.
With no arguments: the configs of the package and what each trains (as
`python -m bifocal_jax.configs` lists them).

  python -m bifocal_jax.tasks
  python -m bifocal_jax.tasks --config dyck --split test_depth --num 5
  python -m bifocal_jax.tasks --config dyck:tiny --config.task.seed=3 --split train
  python -m bifocal_jax.tasks --config odds_first --split test_length --num 3 --format che
  python -m bifocal_jax.tasks --config configs/stack_manipulation.py --length 7 --num 3

`--config` is a training config (its `get_config()` has a `.task`): a config
of the package (`dyck`, `dyck:tiny`; `bifocal_jax.configs`) or a file. Dyck
inputs are in the published format (`bifocal_jax.tasks.external`); targets
are per position, `.` where nothing is scored. Other tasks print the input
symbols and the target at each output position (`.` where not scored).

`--format che` (Chomsky-hierarchy tasks) prints one JSON object per line in
the original benchmark's id space: `{"length": n, "input": [...], "output":
[...], "scored": [...]}` (its input one-hot indices, its output class at each
output position, 1 where its accuracy counts the position). `--length n`
prints examples drawn at that length (one random stream per length, as the
original's curriculum and per-length evaluation draw them).
"""

import json

from absl import app, flags
from ml_collections import config_flags

from bifocal_jax import cli
from bifocal_jax import tasks

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Training config (with .task): a config of the package (dyck) or a file.")
_SPLIT = flags.DEFINE_string("split", "train", "Split to print.")
_NUM = flags.DEFINE_integer("num", 10, "Number of examples (the split's first ones).",
                            lower_bound=0)
_START = flags.DEFINE_integer("start", 0, "Index of the first example.", lower_bound=0)
_FORMAT = flags.DEFINE_enum("format", "text", ["text", "che"],
                            "text: tokens; che: JSON in the original benchmark's id space.")
_LENGTH = flags.DEFINE_integer("length", None, "Draw every example at this length.", lower_bound=1)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if _CONFIG.value is None:
    print(cli.configs_listing())
    return
  task = tasks.get_task(_CONFIG.value.task)
  spec = task.split(_SPLIT.value)
  if _FORMAT.value == "che" and not hasattr(task, "che_example"):
    raise app.UsageError(f"--format=che: task {task.name} is not a Chomsky-hierarchy task")
  if _LENGTH.value is not None:
    try:
      task.check_length(spec.name, _LENGTH.value)
    except ValueError as e:
      raise app.UsageError(f"--{e}") from None
  for index in range(_START.value, min(_START.value + _NUM.value, spec.size)):
    example = task.example(spec.name, index, length=_LENGTH.value)
    if _FORMAT.value == "che":
      print(json.dumps(task.che_example(example), separators=(",", ":")))
    else:
      print("\t".join(task.format_example(example)))


if __name__ == "__main__":
  app.run(main, flags_parser=cli.flags_parser(_CONFIG))
