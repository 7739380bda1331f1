"""`python -m experiments.extrapolation ...`: the sweep (`sweep.py`, its flags and docstring)."""

from experiments.extrapolation import sweep

if __name__ == "__main__":
  sweep.run()
