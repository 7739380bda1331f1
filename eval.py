r"""Evaluates trained runs: `python eval.py --workdir DIR`.

A checkout's entry to the evaluation command, `bifocal_jax/cli/eval.py` (also
`python -m bifocal_jax.eval` and `bifocal-eval`, from any folder): see its
docstring for the flags.
"""

from bifocal_jax.cli.eval import main, run  # noqa: F401

if __name__ == "__main__":
  run()
