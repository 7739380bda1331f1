"""Experiment values shared by `configs/listops.py` and `configs/listops_depth.py`.

Not a config of its own (its name starts with `_`). The model is the sweep's
2-layer one (width 64, 4 heads, batch 32) at learning rate 3e-3; the task's
defaults (`bifocal_jax.tasks.listops.default_config`): LRA's generator with
depth <= d_train=3, train and valid lengths 4..100 (a step stays cheap on a
CPU, as Dyck's), test_length 101..300 at those depths, test_depth 4..6.
"""

from bifocal_jax import config as config_lib


def get_config(task_name: str, arg=None):
  """Variants: default (CPU-sized), `tiny` (tests: seconds), `paper` (the
  Chomsky-hierarchy protocol's model: 5 layers, width 64, 8 heads, batch 128)."""
  c = config_lib.base_config(task_name)
  c.position.kind = "bifocal"
  c.model.num_layers = 2
  c.model.d_model = 64
  c.model.num_heads = 4
  c.steps = 4000
  c.batch_size = 32
  c.learning_rate = 3e-3
  c.warmup_steps = 100
  c.checkpoint_every = 500
  c.eval_every = 500
  c.log_every = 50
  c.spectral.record_every = 25
  if arg == "tiny":
    c.model.num_layers = 1
    c.model.d_model = 32
    c.model.mlp_dim = 64
    c.steps = 20
    c.batch_size = 8
    c.warmup_steps = 5
    c.checkpoint_every = 10
    c.eval_every = 20
    c.log_every = 10
    c.eval_examples = 16
    c.eval_batch_size = 16
    c.spectral.record_every = 5
    c.progress_bar = False
    c.task.train.max_length = 40
    c.task.valid.max_length = 40
    c.task.valid.size = 32
    c.task.test_length.min_length = 41
    c.task.test_length.max_length = 80
    c.task.test_length.size = 32
    c.task.test_depth.max_length = 40
    c.task.test_depth.size = 32
  elif arg == "paper":
    c.model.num_layers = 5
    c.model.d_model = 64
    c.model.num_heads = 8
    c.batch_size = 128
    c.steps = 20_000
    c.learning_rate = 1e-3
    c.warmup_steps = 1000
    c.checkpoint_every = 2000
    c.eval_every = 2000
  elif arg not in (None, ""):
    raise ValueError(f"configs/{task_name}.py: unknown variant {arg!r} (use tiny or paper)")
  return c
