r"""Prints examples of a task's split: input tokens, a tab, target tokens.

  python -m bifocal_jax.tasks --config configs/dyck.py --split test_depth --num 5
  python -m bifocal_jax.tasks --config configs/dyck.py:tiny --config.task.seed=3 --split train

`--config` is a training config file (its `get_config()` has a `.task`). Dyck
inputs are in the published format (`shared/external/dyck-yao2021/README.md`);
targets are per position, `_` where nothing is scored. Other tasks print the
input symbols and the output symbols.
"""

from absl import app, flags
from ml_collections import config_flags

from bifocal_jax import tasks

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file (with .task).")
_SPLIT = flags.DEFINE_string("split", "train", "Split to print.")
_NUM = flags.DEFINE_integer("num", 10, "Number of examples (the split's first ones).", lower_bound=0)
_START = flags.DEFINE_integer("start", 0, "Index of the first example.", lower_bound=0)
flags.mark_flags_as_required(["config"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  task = tasks.get_task(_CONFIG.value.task)
  spec = task.split(_SPLIT.value)
  for index in range(_START.value, min(_START.value + _NUM.value, spec.size)):
    print("\t".join(task.format_example(task.example(spec.name, index))))


if __name__ == "__main__":
  app.run(main)
