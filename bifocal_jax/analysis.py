"""Spectral analysis of recorded frequency trajectories: `load_trajectory(workdir)`
and the reports and plots over it (the code is `bifocal_jax/evaluation/spectrum.py`)."""

from bifocal_jax.evaluation.spectrum import *  # noqa: F401,F403
from bifocal_jax.evaluation.spectrum import __all__  # noqa: F401
