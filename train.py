r"""Trains a model: `python train.py --config configs/dyck.py --workdir DIR`.

A checkout's entry to the training command, `bifocal_jax/train.py` (also
`python -m bifocal_jax.train` and `bifocal-train`, from any folder, with
`--config dyck` naming a config of the package): see its docstring.
"""

from bifocal_jax import machine

machine.use_tuned_allocator()  # before JAX starts: see bifocal_jax/machine.py
machine.use_compilation_cache()

from bifocal_jax import train  # noqa: E402

if __name__ == "__main__":
  train.run()
