"""Linen modules for Linen models: `SpectralRoPE`, `GeometricRoPE`, `BifocalRoPE`
(the code is `bifocal_jax/nn/linen.py`)."""

from bifocal_jax.nn.linen import *  # noqa: F401,F403
from bifocal_jax.nn.linen import __all__  # noqa: F401
