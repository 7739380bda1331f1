r"""Trains a model: `python train.py --config configs/dyck.py --workdir DIR`.

A checkout's entry to the training command, `bifocal_jax/cli/train.py` (also
`python -m bifocal_jax.train` and `bifocal-train`, from any folder, with
`--config dyck` naming a config of the package): see its docstring.
"""

from bifocal_jax.cli.train import _CONFIG, main, run  # noqa: F401  (tests/train_with_signal.py)

if __name__ == "__main__":
  run()
