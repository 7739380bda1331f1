"""FIRE (Li et al. 2023, arXiv 2310.04418): functional interpolation for
relative positions, as mcleish7/arithmetic `cramming/architectures/embeddings.py`
(class `FIRE`, a copy of the paper's code; also chuanyang-Zheng/DAPE) defines it:

    rel  = log(|c (i - j)| + 1)
    norm = log(|c max(i, |L_mult * L|)| + 1)
    bias = MLP(rel / (norm + eps))      MLP: Linear(1, 32) - ReLU - Linear(32, heads)

per layer (each attention layer builds its own `FIRE`), with `c` = 0.1 and
the multiplier `L_mult` = 1 trainable, the threshold `L` = 512 fixed,
`eps` = 1e-6; the MLP has torch's `nn.Linear` default initialisation
(weights and biases uniform in `+-1/sqrt(fan_in)`). Added to the scaled
scores (`attention_scores += fire` after `* norm_factor`). Its positions are
`0 .. L-1` by default (`max_length=0`; its randomized variant is not offered).
A causal-LM method (`|i - j|` cannot tell left from right): decoder only.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from bifocal_jax.nn.positions import base

MLP_WIDTH, INIT_C, INIT_L, EPS = 32, 0.1, 512.0, 1e-6


def fire_bias(q_pos_BxQ, k_pos_BxS, params: dict, *, eps: float = EPS) -> jax.Array:
  """FIRE's bias `[B, H, Q, S]` float32; `params`: w1 [1, W], b1 [W], w2 [W, H], b2 [H],
  c, l_multiplier, init_l (scalars)."""
  qp = q_pos_BxQ.astype(jnp.float32)
  rel = qp[..., :, None] - k_pos_BxS.astype(jnp.float32)[..., None, :]
  threshold = jnp.abs(params["l_multiplier"] * params["init_l"])
  normalizer = jnp.maximum(qp, threshold)[..., :, None]
  c = params["c"]
  rel = jnp.log(jnp.abs(c * rel) + 1.0)
  normalizer = jnp.log(jnp.abs(c * normalizer) + 1.0)
  x = (rel / (normalizer + eps))[..., None]  # [B, Q, S, 1]
  h = jax.nn.relu(x * params["w1"][0] + params["b1"])  # Linear(1, W): x @ w1
  out = h @ params["w2"] + params["b2"]  # [B, Q, S, H]
  return jnp.moveaxis(out, -1, -3)


def _torch_linear_init(key, fan_in, shape):
  bound = fan_in**-0.5
  return jax.random.uniform(key, shape, jnp.float32, -bound, bound)


class FireBias(nnx.Module):
  """One layer's FIRE MLP, `c`, and threshold multiplier."""

  def __init__(self, num_heads: int, *, mlp_width: int = MLP_WIDTH, init_c: float = INIT_C,
               init_l: float = INIT_L, rngs: nnx.Rngs):
    self.w1 = nnx.Param(_torch_linear_init(rngs.params(), 1, (1, mlp_width)))
    self.b1 = nnx.Param(_torch_linear_init(rngs.params(), 1, (mlp_width,)))
    self.w2 = nnx.Param(_torch_linear_init(rngs.params(), mlp_width, (mlp_width, num_heads)))
    self.b2 = nnx.Param(_torch_linear_init(rngs.params(), mlp_width, (num_heads,)))
    self.c = nnx.Param(jnp.asarray(init_c, jnp.float32))
    self.l_multiplier = nnx.Param(jnp.asarray(1.0, jnp.float32))
    self.init_l = nnx.Variable(jnp.asarray(init_l, jnp.float32))  # requires_grad=False

  def params(self) -> dict:
    return {
        name: getattr(self, name)[...]
        for name in ("w1", "b1", "w2", "b2", "c", "l_multiplier", "init_l")
    }

  def bias_fn(self, *, causal: bool, distances_BxL=None) -> base.BiasFn:
    del causal, distances_BxL
    params = self.params()
    return lambda q, k, qp, kp: fire_bias(qp, kp, params)


def _resolved(position):
  get = lambda key, default: default if position.get(key) is None else position[key]
  return (int(get("fire_mlp_width",
                  MLP_WIDTH)), float(get("fire_c", INIT_C)), float(get("fire_threshold", INIT_L)))


def _layer(position, *, num_heads, rngs, **_):
  width, c, threshold = _resolved(position)
  return FireBias(num_heads, mlp_width=width, init_c=c, init_l=threshold, rngs=rngs)


def _check(position, *, num_heads, head_dim):
  del num_heads, head_dim
  width, _, threshold = _resolved(position)
  if width < 1:
    raise ValueError(f"position.fire_mlp_width={width!r}: must be a positive integer")
  if threshold <= 0:
    raise ValueError(f"position.fire_threshold={threshold!r}: must be positive")


SCHEMES = (base.Scheme(
    "fire", base.BIAS, "Li et al. 2023; mcleish7/arithmetic cramming/architectures/embeddings.py "
    "FIRE", layer=_layer, check=_check, encoder=False,
    why_not="FIRE is defined for causal language models (|i - j| has no direction)"),)

CONFIG_KEYS = {
    "fire_mlp_width": ml_collections.config_dict.placeholder(int),  # None: 32
    "fire_c": ml_collections.config_dict.placeholder(float),  # None: 0.1 (initial c)
    "fire_threshold": ml_collections.config_dict.placeholder(float),  # None: 512 (L)
}
