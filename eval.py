r"""Evaluates trained runs: `python eval.py --workdir DIR`.

A checkout's entry to the evaluation command, `bifocal_jax/eval.py` (also
`python -m bifocal_jax.eval` and `bifocal-eval`, from any folder): see its
docstring for the flags.
"""

from bifocal_jax import machine

machine.use_tuned_allocator()  # before JAX starts: see bifocal_jax/machine.py
machine.use_compilation_cache()

from bifocal_jax import eval as eval_command  # noqa: E402

if __name__ == "__main__":
  eval_command.run()
