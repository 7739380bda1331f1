"""LayerNorm differentiated by autodiff, as `model.layer_norm` was before its
written-out backward, for before/after runs (`step_benchmark.py
--baseline_layer_norm`).

`use_baseline()` makes `model.layer_norm` the plain formula for the models
traced inside it; the forward is the same computation, the backward is
whatever autodiff makes of the mean and variance reductions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import bench_util
from bifocal_jax.nn import model


def layer_norm(x_NxD, scale_D, bias_D, eps: float):
  x32 = x_NxD.astype(jnp.float32)
  mean = x32.mean(-1, keepdims=True)
  var = jnp.square(x32 - mean).mean(-1, keepdims=True)
  return ((x32 - mean) * jax.lax.rsqrt(var + eps) * scale_D + bias_D).astype(x_NxD.dtype)


def use_baseline(enabled: bool = True):
  """`model.layer_norm` is the autodiff LayerNorm inside (models traced inside)."""
  return bench_util.replaced(model, "layer_norm", layer_norm, enabled)
