"""The command lines, one module each: `train` and `eval`.

Each runs as `python -m bifocal_jax.train` / `python -m bifocal_jax.eval`, as
the console scripts `bifocal-train` / `bifocal-eval` (pyproject.toml), and as
`python train.py` / `python eval.py` in a checkout; all four are the same
`run()`. Importing a module defines its flags and starts nothing (not even
JAX): `run()` sets the host up (`bifocal_jax.host`: it may re-execute the
process) and parses the command line.
"""
