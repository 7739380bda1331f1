r"""Trains a model: `python -m bifocal_jax.train --config dyck --workdir DIR`.

`--config` names a config of the package (`dyck`, `dyck:tiny`; see
`bifocal_jax.configs`) or a config file (`configs/dyck.py:tiny`). Any config
key can be overridden as `--config.KEY=VALUE`. Re-running the same command on
the same DIR resumes from its latest checkpoint. Outputs in DIR: `config.json`,
`metrics.jsonl`, `tensorboard/`, `checkpoints/`; the run's last line says
where it wrote.

Multi-host: on TPU pods `jax.distributed.initialize()` finds its peers; on
other clusters (and for tests on CPU) pass `--coordinator_address`,
`--num_processes` and `--process_id`.
"""

import sys

from absl import app
from absl import flags
from ml_collections import config_flags

from bifocal_jax import host
from bifocal_jax import launch

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Training config: a config of the package (dyck, dyck:tiny) or a file.",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (checkpoints, metrics).")
_OVERWRITE = flags.DEFINE_bool("overwrite", False,
                               "Replace a run with a different config in --workdir.")
launch.define_distributed_flags()
flags.mark_flags_as_required(["config", "workdir"])


def main(argv, hooks=()):
  """`hooks`: `bifocal_jax.train.Hook`s (tests inject them; see tests/train_with_signal.py)."""
  del argv
  sys.exit(
      launch.run_training(_CONFIG.value, _WORKDIR.value, overwrite=_OVERWRITE.value, hooks=hooks))


def run(hooks=()):
  """The command: host set-up, then flags, then `main`."""
  host.use_tuned_allocator()  # before JAX starts: see bifocal_jax/host.py
  host.use_compilation_cache()  # a re-run loads its compiled steps: see bifocal_jax/host.py
  app.run(lambda argv: main(argv, hooks=hooks), flags_parser=launch.flags_parser(_CONFIG))


if __name__ == "__main__":
  run()
