r"""Trains a model: `python train.py --config configs/dyck.py --workdir DIR`.

Any config key can be overridden as `--config.KEY=VALUE`. Re-running the same
command on the same DIR resumes from its latest checkpoint. Outputs in DIR:
`config.json`, `metrics.jsonl`, `tensorboard/`, `checkpoints/`.

Multi-host: on TPU pods `jax.distributed.initialize()` finds its peers; on
other clusters (and for tests on CPU) pass `--coordinator_address`,
`--num_processes` and `--process_id`.
"""

import sys

from bifocal_jax import host

host.use_tuned_allocator()  # before JAX starts: see bifocal_jax/host.py
host.use_compilation_cache()  # a re-run loads its compiled steps: see bifocal_jax/host.py

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
from ml_collections import config_flags

from bifocal_jax import launch

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (checkpoints, metrics).")
_OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "Replace a run with a different config in --workdir.")
launch.define_distributed_flags()
flags.mark_flags_as_required(["config", "workdir"])


def main(argv, hooks=()):
  """`hooks`: `bifocal_jax.train.Hook`s (tests inject them; see tests/train_with_signal.py)."""
  del argv
  sys.exit(launch.run_training(_CONFIG.value, _WORKDIR.value, overwrite=_OVERWRITE.value,
                               hooks=hooks))


if __name__ == "__main__":
  app.run(main, flags_parser=launch.flags_parser(_CONFIG))
