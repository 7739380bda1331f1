# `python -m experiments.extrapolation ...`: the sweep (`sweep.py`), its flags and its usage.
from absl import flags

from experiments.extrapolation import sweep

__doc__ = sweep.__doc__  # what --help prints
flags.adopt_module_key_flags(sweep)

if __name__ == "__main__":
  sweep.run()
