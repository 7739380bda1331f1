r"""Dyck-(8, m) closing-bracket prediction, the bracket alphabet of Yao et al. 2021.

Trains on shallow, short strings (depth <= task.m) and holds out `valid` (same
distribution), `test_length` (longer, same depth bound) and `test_depth`
(deeper). The published files of Yao et al. (`python -m bifocal_jax.tasks.external
fetch` downloads them) use the same alphabet, so these models can be scored on
them: `python -m bifocal_jax.eval --workdir DIR --dyck_file k8_m10.test`.

  python -m bifocal_jax.train --config dyck --workdir runs/dyck
  python -m bifocal_jax.train --config dyck:tiny --workdir /tmp/dyck_tiny
  python -m bifocal_jax.train --config dyck:paper --workdir runs/dyck_paper
  python -m bifocal_jax.train --config dyck --config.position.kind=rope --workdir runs/dyck_rope

Variants (`:arg`): default (the `make demo` run, sized for a CPU; its time: docs/performance.md),
`tiny` (tests: seconds), `paper` (accelerator-sized: 5 layers, width 256).
"""

from bifocal_jax.training import config as config_lib

# The `:VARIANT`s `get_config` accepts (read by `bifocal_jax.cli`, which lists them).
VARIANTS = ("tiny", "paper")


def get_config(arg=None):
  c = config_lib.base_config("dyck")
  c.position.kind = "bifocal"
  c.model.num_layers = 3
  c.model.d_model = 64
  c.model.num_heads = 4
  c.steps = 1500
  c.batch_size = 32
  c.learning_rate = 6e-3
  c.warmup_steps = 100
  c.checkpoint_every = 500
  c.eval_every = 500
  c.log_every = 50
  c.spectral.learning_rate = 1e-2
  c.spectral.record_every = 20
  if arg == "tiny":
    c.model.num_layers = 1
    c.model.d_model = 32
    c.model.num_heads = 4
    c.model.mlp_dim = 64
    c.steps = 30
    c.batch_size = 8
    c.warmup_steps = 5
    c.checkpoint_every = 10
    c.eval_every = 30
    c.log_every = 10
    c.eval_examples = 32
    c.eval_batch_size = 16
    c.spectral.record_every = 5
    c.progress_bar = False
    c.task.train.max_length = 40
    c.task.valid.max_length = 40
    c.task.test_length.min_length = 41
    c.task.test_length.max_length = 80
    c.task.test_length.size = 32
    c.task.test_depth.max_length = 80
    c.task.test_depth.size = 32
  elif arg == "paper":
    c.model.num_layers = 5
    c.model.d_model = 256
    c.model.num_heads = 8
    c.steps = 20_000
    c.batch_size = 128
    c.learning_rate = 1e-3
    c.warmup_steps = 1000
    c.checkpoint_every = 2000
    c.eval_every = 2000
    c.model.dtype = "bfloat16"
  elif arg not in (None, ""):
    raise ValueError(f"config 'dyck': unknown variant {arg!r} (use {' or '.join(VARIANTS)})")
  return c
