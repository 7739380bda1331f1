"""Experiment values shared by `listops.py` and `listops_depth.py` (here).

Not a config of its own (its name starts with `_`). The model is the sweep's
2-layer one (width 64, 4 heads, batch 32) at learning rate 3e-3, the size the
converged sweep calibrates RoPE on. The task's defaults
(`bifocal_jax.tasks.listops.default_config`) were chosen for a cheap CPU step:
LRA's generator (all four operators, up to 10 arguments) at depth <=
d_train=3 and lengths 4..100 has 32 tokens and 4.5 lists per expression on
average (Dyck's default trains on 3..99), and its `test_depth` (4..6) fits in
the same lengths (a list of depth d needs 3d + 1 tokens).

With all four operators, or without SM, RoPE on this model stays short of
the valid token accuracy of 0.95 that the converged sweep asks for (sum-mod-10
lists stay at chance); with MIN and MAX only it gets there. That is the
`minmax` variant (`--config listops_depth:minmax`), the converged sweep's
`listops_depth` task: the 2-layer model where it learns the task. The
calibration runs behind this: docs/performance.md.
"""

from bifocal_jax.training import config as config_lib

# The `:VARIANT`s `get_config` accepts (`listops_depth`'s; `listops` has no `minmax`).
VARIANTS = ("tiny", "paper", "minmax")


def get_config(task_name: str, arg=None):
  """Variants: default (CPU-sized), `tiny` (tests: seconds), `paper` (the
  Chomsky-hierarchy protocol's model: 5 layers, width 64, 8 heads, batch 128),
  `minmax` (the default with the operators MIN and MAX only, 8,000 steps:
  what the 2-layer model learns of `listops_depth`; see the module docstring)."""
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
    config_lib.use_tiny_run(c)
    c.task.train.max_length = 40
    c.task.valid.max_length = 40
    c.task.valid.size = 32
    c.task.test_length.min_length = 41
    c.task.test_length.max_length = 80
    c.task.test_length.size = 32
    c.task.test_depth.max_length = 40
    c.task.test_depth.size = 32
  elif arg == "paper":
    config_lib.use_paper_model(c)
    c.steps = 20_000
    c.checkpoint_every = 2000
    c.eval_every = 2000
  elif arg == "minmax":
    c.task.operators = ("MIN", "MAX")
    c.steps = 8000
  elif arg not in (None, ""):
    raise ValueError(f"config {task_name!r}: unknown variant {arg!r} (use {', '.join(VARIANTS)})")
  return c
