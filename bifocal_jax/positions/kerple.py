"""KERPLE (Chi et al. 2022): kernelized relative position biases, as
chijames/KERPLE `megatron/mpu/layers.py` defines them (`ParallelKerpleLog`,
`ParallelKerplePower` with `pos_emb="kerple_power_ap_"`, the configuration of
its experiments, `generate_ymls.py`):

    kerple_log:    -p * log(1 + a * (i - j))
    kerple_power:  -a * (i - j)^p

per head, for keys at or before the query (their `diff` is `tril(i - j)`:
causal language models only, so the encoder refuses these kinds). One module
serves every layer (`gpt2_model.py` builds `rpe_emb` once and passes it to
each layer), added to the scaled scores (`baddbmm(alpha=1/norm_factor)` then
`self.rpe(attention_scores)`). Initialisation `torch.rand`: `p ~ U(0, 2)`,
`a ~ U(0, 1)`. They clamp the parameters in place before each use and after
each step (`a, p >= 0.01`, and `p <= 2` for the power kernel); here the
forward pass uses the clamped values with a straight-through gradient (the
stored parameter is not rewritten, so it may sit past a bound while the
forward uses the bound).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from bifocal_jax.positions import base

EPS = 1e-2


def _clamp(x, lo, hi=None):
  """`clip(x)` forward, identity gradient (their in-place `.data.clamp`)."""
  return x + jax.lax.stop_gradient(jnp.clip(x, lo, hi) - x)


def kerple_log_bias(q_pos_BxQ, k_pos_BxS, p_H, a_H) -> jax.Array:
  """`-p log(1 + a max(i - j, 0))`, `[B, H, Q, S]` float32."""
  diff = jnp.maximum(q_pos_BxQ[..., :, None] - k_pos_BxS[..., None, :], 0).astype(jnp.float32)
  p, a = (_clamp(x.astype(jnp.float32), EPS)[:, None, None] for x in (p_H, a_H))
  return -p * jnp.log1p(a * diff[..., None, :, :])


def kerple_power_bias(q_pos_BxQ, k_pos_BxS, p_H, a_H) -> jax.Array:
  """`-a max(i - j, 0)^p`, `[B, H, Q, S]` float32."""
  diff = jnp.maximum(q_pos_BxQ[..., :, None] - k_pos_BxS[..., None, :], 0).astype(jnp.float32)
  p = _clamp(p_H.astype(jnp.float32), EPS, 2.0)[:, None, None]
  a = _clamp(a_H.astype(jnp.float32), EPS)[:, None, None]
  diff = diff[..., None, :, :]
  safe = jnp.where(diff > 0, diff, 1.0)  # 0^p = 0, with a finite gradient in p
  return -a * jnp.where(diff > 0, safe**p, 0.0)


class KerpleBias(nnx.Module):
  """`bias_p`, `bias_a` per head, shared by all layers."""

  def __init__(self, num_heads: int, *, kernel: str, rngs: nnx.Rngs):
    self.kernel = kernel
    self.bias_p = nnx.Param(jax.random.uniform(rngs.params(), (num_heads,)) * 2.0)
    self.bias_a = nnx.Param(jax.random.uniform(rngs.params(), (num_heads,)) * 1.0)

  def bias_fn(self, *, causal: bool, distances_BxL=None) -> base.BiasFn:
    del causal, distances_BxL
    fn = kerple_log_bias if self.kernel == "log" else kerple_power_bias
    p, a = self.bias_p[...], self.bias_a[...]
    return lambda q, k, qp, kp: fn(qp, kp, p, a)


def _shared(kernel):

  def build(position, *, num_heads, rngs, **_):
    del position
    return KerpleBias(num_heads, kernel=kernel, rngs=rngs)

  return build


WHY = "KERPLE's bias is tril(i - j): defined for causal language models only"
SCHEMES = (
    base.Scheme("kerple_log", base.BIAS, "Chi et al. 2022; chijames/KERPLE ParallelKerpleLog",
                shared=_shared("log"), encoder=False, why_not=WHY),
    base.Scheme("kerple_power", base.BIAS,
                "Chi et al. 2022; chijames/KERPLE ParallelKerplePower (kerple_power_ap_)",
                shared=_shared("power"), encoder=False, why_not=WHY),
)
