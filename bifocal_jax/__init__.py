"""bifocal-jax: geometric and spectral rotary eyes (Bifocal Attention) in JAX/Flax.

The public names of the library (docs/api.md; docs/own_model.md shows them in use). Submodules:
`rope` (the rotary math), `attention`, `model`, `tasks`, `optim`, `surgery`,
`linen`, `analysis`, `train`, `evaluate`.
"""

import importlib

# Loaded on first use, so that importing a light submodule (`bifocal_jax.machine`,
# which runs before JAX starts) does not import JAX and Flax.
_ROPE_NAMES = (
    "BifocalRoPE",
    "GeometricRoPE",
    "SpectralFrequency",
    "SpectralRoPE",
    "apply_rope",
    "geometric_frequencies",
)


def __getattr__(name):
  if name in _ROPE_NAMES:
    return getattr(importlib.import_module("bifocal_jax.nn.rope"), name)
  raise AttributeError(f"module 'bifocal_jax' has no attribute {name!r}")


def __dir__():
  return sorted([*globals(), *_ROPE_NAMES])


__all__ = list(_ROPE_NAMES)
__version__ = "0.1.0"
