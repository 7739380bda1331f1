"""Lists the training configs shipped with the package: `python -m bifocal_jax.configs`.

Each config's name, the variants it takes (`--config NAME:VARIANT`) and what
it trains (its docstring's summary line); the same list as `python -m
bifocal_jax.tasks` without arguments (`cli.configs_listing`).
"""

import sys

from bifocal_jax import cli


def main(argv) -> int:
  if len(argv) > 1:
    print(f"error: unexpected arguments {argv[1:]}: `python -m bifocal_jax.configs` takes none",
          file=sys.stderr)
    return 2
  print(cli.configs_listing())
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
