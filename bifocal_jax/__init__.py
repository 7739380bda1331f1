"""bifocal-jax: geometric and spectral rotary eyes (Bifocal Attention) in JAX/Flax.

The public names of `../shared/design.md`'s library contract. Submodules:
`rope` (the rotary math), `attention`, `model`, `tasks`, `optim`, `surgery`,
`linen`, `analysis`, `train`, `evaluate`.
"""

from bifocal_jax.rope import (
    BifocalRoPE,
    GeometricRoPE,
    PerHeadSpectralRoPE,
    SpectralFrequency,
    SpectralRoPE,
    apply_rope,
    geometric_frequencies,
)

__all__ = [
    "BifocalRoPE",
    "GeometricRoPE",
    "PerHeadSpectralRoPE",
    "SpectralFrequency",
    "SpectralRoPE",
    "apply_rope",
    "geometric_frequencies",
]
__version__ = "0.1.0"
