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
`a ~ U(0, 1)`.

Bounds: the source clamps the stored parameters in place at the start of
each forward pass (`param.data = param.data.clamp(...)`, outside autograd):
`p, a >= 0.01` (`eps`), and `p <= 2` for the power kernel; the log kernel's
`p` has no upper bound. The first forward pass so clamps the initial draw,
and each later one the previous step's update. Here `bias_p`, `bias_a` are
`bounded.BoundedParam`s with those bounds (`P_BOUNDS`, `A_BOUNDS`): the draw
is clipped at construction, and the trainer projects them onto the bounds
after every optimizer update (`bounded.project` in `steps.apply_gradients`),
so the stored values, and the values the forward pass uses, are always
inside the bounds, as the source's are; a parameter pushed past a bound
restarts from it. The gradient is the loss's at the stored value, as theirs
(their clamp is not differentiated).

The bias functions also clip `p` and `a` straight-through (the clip's
value, the identity's gradient). On the trainer's parameters that is a
no-op; it is a guard for a module trained by another optimizer, which does
not project: its stored parameter may drift past a bound while the forward
pass uses the bound.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from bifocal_jax.nn.positions import base
from bifocal_jax.nn.positions import bounded

EPS = 1e-2  # their `self.eps`
# (lower, upper) of `bias_p` per kernel and of `bias_a`.
P_BOUNDS = {"log": (EPS, None), "power": (EPS, 2.0)}
A_BOUNDS = (EPS, None)


def kerple_log_bias(q_pos_BxQ, k_pos_BxS, p_H, a_H) -> jax.Array:
  """`-p log(1 + a max(i - j, 0))`, `[B, H, Q, S]` float32."""
  diff = jnp.maximum(q_pos_BxQ[..., :, None] - k_pos_BxS[..., None, :], 0).astype(jnp.float32)
  p = bounded.clip_straight_through(p_H.astype(jnp.float32), *P_BOUNDS["log"])[:, None, None]
  a = bounded.clip_straight_through(a_H.astype(jnp.float32), *A_BOUNDS)[:, None, None]
  return -p * jnp.log1p(a * diff[..., None, :, :])


def kerple_power_bias(q_pos_BxQ, k_pos_BxS, p_H, a_H) -> jax.Array:
  """`-a max(i - j, 0)^p`, `[B, H, Q, S]` float32."""
  diff = jnp.maximum(q_pos_BxQ[..., :, None] - k_pos_BxS[..., None, :], 0).astype(jnp.float32)
  p = bounded.clip_straight_through(p_H.astype(jnp.float32), *P_BOUNDS["power"])[:, None, None]
  a = bounded.clip_straight_through(a_H.astype(jnp.float32), *A_BOUNDS)[:, None, None]
  diff = diff[..., None, :, :]
  safe = jnp.where(diff > 0, diff, 1.0)  # 0^p = 0, with a finite gradient in p
  return -a * jnp.where(diff > 0, safe**p, 0.0)


class KerpleBias(nnx.Module):
  """`bias_p`, `bias_a` per head, shared by all layers: `BoundedParam`s,
  their `torch.rand` draws clipped into the bounds."""

  def __init__(self, num_heads: int, *, kernel: str, rngs: nnx.Rngs):
    self.kernel = kernel
    p_lower, p_upper = P_BOUNDS[kernel]
    self.bias_p = bounded.BoundedParam(
        jax.random.uniform(rngs.params(), (num_heads,)) * 2.0, lower=p_lower, upper=p_upper)
    self.bias_a = bounded.BoundedParam(
        jax.random.uniform(rngs.params(), (num_heads,)) * 1.0, lower=A_BOUNDS[0], upper=A_BOUNDS[1])

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
