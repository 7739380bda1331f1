"""Experiment values shared by the Chomsky-hierarchy task configs (`<task>.py` here).

Not a config of its own (its name starts with `_`): each task's file calls
`get_config(task_name, arg)`.
"""

import ml_collections

from bifocal_jax.training import config as config_lib

# The `:VARIANT`s `get_config` accepts (each task's module re-exports it for `bifocal_jax.cli`).
VARIANTS = ("tiny", "paper")


def get_config(task_name: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """The config of `<task_name>.py` for a Chomsky-hierarchy task.

  Variants: default (a CPU-sized run, test lengths 41..500 of Deletang et al.),
  `tiny` (tests), `paper` (their protocol: 5 layers, width 64, 8 heads, batch
  128, for an accelerator). On an accelerator, train several seeds and
  learning rates at once (`bifocal_jax/training/population.py`), e.g.
  `--config.population.seeds='(0, 1, 2, 3)' --config.population.learning_rates='(1e-3, 3e-4)'`.
  """
  c = config_lib.base_config(task_name)
  c.position.kind = "bifocal"
  # The randomized encodings' range (and the learnt table's rows): the
  # randomized-encodings repository's `noise_max_length` (its
  # `experiments/example.py`). It scales randomized ALiBi's distances, so it
  # is theirs, not the decoder tasks' 8,192; every task's longest sequence
  # (1,500: duplicate_string at the protocol's length 500) fits.
  c.position.max_position = 2048
  c.model.num_layers = 2
  c.model.d_model = 64
  c.model.num_heads = 4
  c.steps = 3000
  c.batch_size = 32
  c.learning_rate = 1e-3
  c.checkpoint_every = 1000
  c.eval_every = 1000
  c.spectral.record_every = 25
  if arg == "tiny":
    config_lib.use_tiny_run(c)
    c.task.train.max_length = 12
    c.task.valid.max_length = 12
    c.task.test_length.min_length = 13
    c.task.test_length.max_length = 24
    c.task.test_length.size = 16
  elif arg == "paper":
    config_lib.use_paper_model(c)
    c.steps = 100_000
    c.checkpoint_every = 5000
    c.eval_every = 5000
  elif arg not in (None, ""):
    raise ValueError(f"config {task_name!r}: unknown variant {arg!r} (use {' or '.join(VARIANTS)})")
  return c
