"""`python -m bifocal_jax.eval`: the evaluation command, `bifocal_jax/cli/eval.py`.

The library's evaluation is `bifocal_jax.evaluate`; this module only runs the command.
"""

if __name__ == "__main__":
  from bifocal_jax.cli import eval as _eval_cli  # pylint: disable=g-import-not-at-top
  _eval_cli.run()
