"""PaTH-FoX (`bifocal_jax/nn/positions/path_fox.py`) against a float64 reference
written from fla-org/flash-linear-attention (`fla/layers/path_attn.py` with
`use_forget_gate=True`, `fla/ops/path_attn/naive.py`): the Householder-like
products written out as `d x d` matrices for every pair of tokens and the
log forget gates summed over each pair's span, O(L^2) pairs."""

import jax
import jax.numpy as jnp
from jax.extend import core as jax_core
import numpy as np
import pytest
from flax import nnx

import helpers
import position_checks as checks
from bifocal_jax import configs
from bifocal_jax.nn.positions import fox
from bifocal_jax.nn.positions import path
from bifocal_jax.nn.positions import path_fox
from bifocal_jax.training import config as config_lib
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps
from bifocal_jax.tasks import pipeline


def reference(xp, q, k, v, w, beta, log_f, valid):
  """`out_i = softmax_{j <= i}((q_i^T H_i ... H_{j+1} k_j + sum_{j<s<=i} log f_s) / sqrt(d)) v`,
  `H_s = I - beta_s w_s w_s^T`, a padded token removed (its `H` the identity,
  its `log f` 0, its key masked). `xp` is numpy (the float64 reference) or
  jax.numpy (the same under `jax.enable_x64`, for its gradient)."""
  b_, l_, h_, d = q.shape
  valid = np.ones((b_, l_), bool) if valid is None else np.asarray(valid, bool)
  beta = xp.where(valid[..., None], beta, 0.0)
  log_f = xp.where(valid[..., None], log_f, 0.0)
  h_s = xp.eye(d) - beta[..., None, None] * w[..., :, None] * w[..., None, :]  # [B, L, H, d, d]
  outs = []
  for i in range(l_):
    product = xp.broadcast_to(xp.eye(d), (b_, h_, d, d))  # H_i ... H_{j+1}, from j = i down
    logits = [None] * (i + 1)
    for j in range(i, -1, -1):
      score = xp.einsum("bhk,bhkl,bhl->bh", q[:, i], product, k[:, j])
      decay = sum((log_f[:, s] for s in range(j + 1, i + 1)), xp.zeros((b_, h_)))
      logits[j] = (score + decay) / np.sqrt(d)
      product = product @ h_s[:, j]
    logits = xp.stack(logits, -1)  # [B, H, i + 1]
    logits = xp.where(valid[:, None, :i + 1], logits, -1e30)
    p = xp.exp(logits - logits.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    outs.append(xp.einsum("bhj,bjhk->bhk", p, v[:, :i + 1]))
  return xp.stack(outs, 1)  # [B, L, H, K]


def reference_reflections_and_gate(xp, x, params, valid):
  """The layer's `w`, `beta` and `log f` from `x` (`path_attn.py`'s `w_proj`,
  `w_conv1d`, `l2_norm`, `bt_proj`, `g_proj`), the padded rows zero before the
  convolution (the source convolves the unpadded sequence)."""
  heads, head_dim = params["beta_DxH"].shape[
      1], params["w_up_RxF"].shape[1] // params["beta_DxH"].shape[1]
  proj = x @ params["w_down_DxR"] @ params["w_up_RxF"]
  if valid is not None:
    proj = xp.where(np.asarray(valid)[..., None], proj, 0.0)
  length = x.shape[1]
  padded = xp.concatenate([xp.zeros((x.shape[0], 2, proj.shape[-1])), proj], 1)
  conv = sum(params["w_conv_WxF"][m] * padded[:, m:m + length] for m in range(3))
  conv = (conv / (1 + xp.exp(-conv))).reshape(x.shape[:2] + (heads, head_dim))
  w = conv / xp.sqrt((conv**2).sum(-1, keepdims=True) + 1e-6)
  beta = 2 / (1 + xp.exp(-(x @ params["beta_DxH"] + params["beta_bias_H"])))
  log_f = -xp.log1p(xp.exp(-(x @ params["fgate_DxH"] + params["fgate_bias_H"])))
  return w, beta, log_f


def unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def make_fn(block_size=4):

  def fn(tokens, valid, query_chunk):
    w = tokens["w"] * jax.lax.rsqrt(jnp.sum(tokens["w"]**2, -1, keepdims=True))
    return path_fox.path_fox_attention(tokens["q"], tokens["k"], tokens["v"], None, valid,
                                       w_BxLxHxK=w,
                                       beta_BxLxH=2 * jax.nn.sigmoid(tokens["beta_logit"]),
                                       log_fgate_BxLxH=jax.nn.log_sigmoid(tokens["fgate_logit"]),
                                       query_chunk=query_chunk, block_size=block_size)

  return fn


def reference_fn(xp, tokens, valid):
  """`make_fn`'s inputs through `reference` (sigmoids and norms in `xp`)."""
  w = tokens["w"] / xp.sqrt((tokens["w"]**2).sum(-1, keepdims=True))
  beta = 2 / (1 + xp.exp(-tokens["beta_logit"]))
  log_f = -xp.log1p(xp.exp(-tokens["fgate_logit"]))
  return reference(xp, tokens["q"], tokens["k"], tokens["v"], w, beta, log_f, valid)


@pytest.fixture
def case():
  rng = np.random.default_rng(11)
  tokens = checks.random_qkv(rng)
  tokens["w"] = rng.standard_normal(tokens["q"].shape).astype(np.float32)
  tokens["beta_logit"] = rng.uniform(-3, 3, (checks.B, checks.L, checks.H)).astype(np.float32)
  # forget gates from ~0.05 to ~1: decays that matter against the scores
  tokens["fgate_logit"] = rng.uniform(-3, 5, (checks.B, checks.L, checks.H)).astype(np.float32)
  return rng, tokens


def float64(tokens):
  return {name: np.asarray(x, np.float64) for name, x in tokens.items()}


def padded_valid():
  valid = checks.right_padding([13, 9])
  valid[0, 5] = False  # inside a row too: its reflection the identity, its gate 1
  return valid


@pytest.mark.parametrize("block_size", [4, 5, 64])
@pytest.mark.parametrize("padding", [False, True], ids=["whole", "padded"])
def test_matches_float64_reference(case, block_size, padding):
  _, tokens = case
  valid = padded_valid() if padding else None
  got = np.asarray(make_fn(block_size)(tokens, valid, 1024))
  want = reference_fn(np, float64(tokens), valid)
  rows = np.ones(got.shape[:2], bool) if valid is None else valid
  np.testing.assert_allclose(got[rows], want[rows], atol=2e-5, rtol=2e-5)


def test_gradients_match_float64_reference(case):
  """jax.grad of a weighted sum of the valid outputs w.r.t. every input (q, k,
  v, the reflections' `w` and `beta` logits, the forget-gate logits), chunked,
  against the gradient of the float64 reference (jax.numpy under x64)."""
  rng, tokens = case
  valid = padded_valid()
  weight = rng.standard_normal(tokens["q"].shape) * valid[..., None, None]
  ours = jax.grad(lambda t: jnp.sum(make_fn()(t, valid, 4) * weight))(tokens)
  with jax.enable_x64(True):
    theirs = jax.grad(lambda t: jnp.sum(reference_fn(jnp, t, valid) * weight))({
        name: jnp.asarray(x) for name, x in float64(tokens).items()
    })
    theirs = {name: np.asarray(g) for name, g in theirs.items()}
  for name in tokens:
    g, want = np.asarray(ours[name], np.float64), theirs[name]
    assert np.abs(want).max() > 1e-2, name  # the input matters (the check can fail)
    np.testing.assert_allclose(g, want, atol=5e-5 * np.abs(want).max(), rtol=1e-4, err_msg=name)


def make_module(rng, d_model=16):
  """A layer whose parameters are drawn away from the N(0, 0.02) start, so
  that `w` is a unit vector, beta spans (0, 2) and the gates vary."""
  layer = path_fox.PaTHFoX(d_model=d_model, num_heads=checks.H, head_dim=checks.K, rngs=nnx.Rngs(0))
  for module, name, scale in ((layer.path, "w_down_DxR", 0.5), (layer.path, "w_up_RxF", 0.5),
                              (layer.path, "w_conv_WxF", 1.0), (layer.path, "beta_DxH", 0.5),
                              (layer.path, "beta_bias_H", 1.0), (layer.fgate, "fgate_DxH", 0.5)):
    param = getattr(module, name)
    param[...] = jnp.asarray(scale * rng.standard_normal(param.shape), jnp.float32)
  layer.fgate.fgate_bias_H[...] = jnp.asarray(rng.uniform(-1, 3, checks.H), jnp.float32)
  return layer


def module_params(layer):
  return {
      **{
          name: getattr(layer.path, name)[...] for name in ("w_down_DxR", "w_up_RxF", "w_conv_WxF", "beta_DxH", "beta_bias_H")
      },
      **{
          name: getattr(layer.fgate, name)[...] for name in ("fgate_DxH", "fgate_bias_H")
      }
  }


def test_module_matches_float64_reference_forward_and_gradients(case):
  """The layer (reflections, gate, attention) against the float64 reference of
  the source's layer, right-padded as the source's unpadding is: outputs, and
  gradients w.r.t. x, q, k, v and every parameter (the gate's included); one
  directional derivative of the gate's parameters by central differences of
  the numpy reference too."""
  rng, tokens = case
  layer = make_module(rng)
  valid = checks.right_padding([13, 9])
  x = rng.standard_normal((checks.B, checks.L, 16)).astype(np.float32)
  inputs = {"x": x, "q": tokens["q"], "k": tokens["k"], "v": tokens["v"]}
  weight = rng.standard_normal(tokens["q"].shape) * valid[..., None, None]
  graphdef, params = nnx.split(layer, nnx.Param)

  def ours(inputs, params):
    m = nnx.merge(graphdef, params)
    out = m.attend(inputs["x"], inputs["q"], inputs["k"], inputs["v"], None, valid, causal=True,
                   query_chunk=4)
    return jnp.sum(out * weight), out

  (_, out), (g_inputs, g_params) = jax.value_and_grad(ours, argnums=(0, 1), has_aux=True)(inputs,
                                                                                          params)
  ours_grads = {**g_inputs, **module_params(nnx.merge(graphdef, g_params))}

  def theirs(xp, inputs, params):
    w, beta, log_f = reference_reflections_and_gate(xp, inputs["x"], params, valid)
    return reference(xp, inputs["q"], inputs["k"], inputs["v"], w, beta, log_f, valid)

  point = float64(inputs), float64(module_params(layer))
  want = theirs(np, *point)
  np.testing.assert_allclose(np.asarray(out)[valid], want[valid], atol=2e-5, rtol=2e-5)
  with jax.enable_x64(True):
    grads = jax.grad(lambda i, p: jnp.sum(theirs(jnp, i, p) * weight), argnums=(0, 1))(*({
        n: jnp.asarray(a) for n, a in d.items()
    } for d in point))
    want_grads = {n: np.asarray(g) for d in grads for n, g in d.items()}
  for name, want_g in want_grads.items():
    assert np.abs(want_g).max() > 1e-3, name
    np.testing.assert_allclose(np.asarray(ours_grads[name], np.float64), want_g,
                               atol=1e-4 * np.abs(want_g).max(), rtol=1e-3, err_msg=name)
  eps = 1e-6
  for name in ("fgate_DxH", "fgate_bias_H"):
    direction = rng.standard_normal(point[1][name].shape)
    plus, minus = dict(point[1]), dict(point[1])
    plus[name], minus[name] = point[1][name] + eps * direction, point[1][name] - eps * direction
    numeric = float(
        np.sum((theirs(np, point[0], plus) - theirs(np, point[0], minus)) * weight) / (2 * eps))
    analytic = float(np.sum(np.asarray(ours_grads[name], np.float64) * direction))
    assert abs(numeric) > 1e-2, name
    assert abs(analytic - numeric) <= 1e-3 * abs(numeric), (name, analytic, numeric)


def test_open_gates_are_path():
  """A gate bias pushed up until every `log f` is 0 in float32 (f = 1):
  PaTH-FoX is PaTH, the module and the attention alike."""
  rng = np.random.default_rng(12)
  layer = make_module(rng)
  layer.fgate.fgate_bias_H[...] = jnp.full((checks.H,), 1e4, jnp.float32)
  plain = path.PaTH(d_model=16, num_heads=checks.H, head_dim=checks.K, rngs=nnx.Rngs(0))
  for name in ("w_down_DxR", "w_up_RxF", "w_conv_WxF", "beta_DxH", "beta_bias_H"):
    getattr(plain, name)[...] = getattr(layer.path, name)[...]
  tokens = checks.random_qkv(rng)
  x = jnp.asarray(rng.standard_normal((checks.B, checks.L, 16)), jnp.float32)
  assert not np.any(np.asarray(layer.fgate.log_fgate(x)))
  valid = checks.right_padding([13, 9])
  for chunk in (1024, 4):
    args = (x, tokens["q"], tokens["k"], tokens["v"], None, valid)
    np.testing.assert_array_equal(np.asarray(layer.attend(*args, causal=True, query_chunk=chunk)),
                                  np.asarray(plain.attend(*args, causal=True, query_chunk=chunk)))


def test_the_decay_is_scaled_with_the_scores(case):
  """With q = 0 the reflections do nothing and the weights are the gates'
  alone: `softmax((c_i - c_j) / sqrt(d))`, the source's placement (its naive op
  and kernels scale `q.k + g_i - g_j`), which is FoX's (`fox.py`, decay after
  the scaling) with `log f / sqrt(d)`, not with `log f`."""
  _, tokens = case
  tokens = dict(tokens, q=np.zeros_like(tokens["q"]))
  valid = checks.right_padding([13, 9])
  got = np.asarray(make_fn()(tokens, valid, 4))
  log_f = jax.nn.log_sigmoid(tokens["fgate_logit"])
  as_fox = np.asarray(
      fox.fox_attention(tokens["q"], tokens["k"], tokens["v"], None, valid,
                        log_fgate_BxLxH=log_f / np.sqrt(checks.K)))
  np.testing.assert_allclose(got[valid], as_fox[valid], atol=2e-6, rtol=1e-5)
  unscaled = np.asarray(
      fox.fox_attention(tokens["q"], tokens["k"], tokens["v"], None, valid, log_fgate_BxLxH=log_f))
  assert np.abs(got[valid] - unscaled[valid]).max() > 1e-2


def test_strong_forgetting_is_stable():
  # log f = -300 per token over 300 tokens: the cumulative sum reaches -9e4 and
  # the decays underflow in linear space, but the scores stay finite and each
  # query attends to itself alone.
  rng = np.random.default_rng(13)
  tokens = checks.random_qkv(rng, length=300)
  tokens["w"] = rng.standard_normal(tokens["q"].shape).astype(np.float32)
  tokens["beta_logit"] = rng.uniform(-3, 3, (checks.B, 300, checks.H)).astype(np.float32)
  tokens["fgate_logit"] = np.full((checks.B, 300, checks.H), -300.0, np.float32)
  out = np.asarray(make_fn(16)(tokens, None, 64))
  np.testing.assert_allclose(out, tokens["v"], atol=1e-5)


def test_chunked_equals_unchunked(case):
  _, tokens = case
  checks.check_chunked_equals_unchunked(make_fn(), tokens, checks.right_padding([13, 7]))
  checks.check_chunked_equals_unchunked(make_fn(), tokens, padded_valid(), chunk=5)  # blocks


def _shapes(jaxpr):
  """Every intermediate's shape in `jaxpr`, its sub-jaxprs (scan, map, pjit) included."""
  for eqn in jaxpr.eqns:
    for var in eqn.outvars:
      yield tuple(getattr(var.aval, "shape", ()))
    for param in eqn.params.values():
      for sub in param if isinstance(param, (tuple, list)) else (param,):
        sub = getattr(sub, "jaxpr", sub)
        if isinstance(sub, jax_core.Jaxpr):
          yield from _shapes(sub)


def test_query_chunks_never_hold_l_by_l():
  """The evaluation path's memory bound: in chunks of 16 queries, no array of
  the computation (sub-computations included) has two axes as long as the
  sequence; the whole-sequence call does (`[B, H, L, L]` scores: the check can fail)."""
  rng = np.random.default_rng(14)
  length = 97  # 25 blocks of 4, the last one padded
  tokens = checks.random_qkv(rng, length=length, batch=1, heads=1)
  tokens["w"] = rng.standard_normal(tokens["q"].shape).astype(np.float32)
  tokens["beta_logit"] = rng.standard_normal((1, length, 1)).astype(np.float32)
  tokens["fgate_logit"] = rng.standard_normal((1, length, 1)).astype(np.float32)
  valid = checks.right_padding([90], length=length)

  def long_axes(query_chunk):
    jaxpr = jax.make_jaxpr(lambda t: make_fn()(t, valid, query_chunk))(tokens).jaxpr
    return max(sum(n >= length for n in shape) for shape in _shapes(jaxpr))

  assert long_axes(16) == 1
  assert long_axes(1024) == 2


def test_causal(case):
  _, tokens = case
  checks.check_causal(make_fn(), tokens)


def test_gradients_finite(case):
  _, tokens = case
  valid = checks.right_padding([13, 5])
  valid[1, 0] = False
  checks.check_gradients_finite(make_fn(), tokens, valid)


def test_padding(case):
  rng, tokens = case
  checks.check_padding(make_fn(), tokens, checks.right_padding([13, 8]), rng)


def test_encoder_refused(case):
  _, tokens = case
  with pytest.raises(ValueError, match="'path_fox' is defined for causal attention only"):
    path_fox.path_fox_attention(tokens["q"], tokens["k"], tokens["v"], None, None,
                                w_BxLxHxK=tokens["w"], beta_BxLxH=tokens["beta_logit"],
                                log_fgate_BxLxH=tokens["fgate_logit"], causal=False)
  config = configs.load_file(helpers.ROOT / "configs" / "reverse_string.py", "tiny")
  config.position.kind = "path_fox"
  with pytest.raises(config_lib.ConfigError, match=r"position\.kind='path_fox': not defined"):
    config_lib.validate(config, num_devices=1)


def test_module_initialisation():
  """The source's `_init_weights` on `g_proj` (Linear(hidden, heads, bias=True)):
  weight N(0, 0.02), bias 0; PaTH's parameters as `path.PaTH` draws them."""
  layer = path_fox.PaTHFoX(d_model=32, num_heads=4, head_dim=8, rngs=nnx.Rngs(0))
  weight = np.asarray(layer.fgate.fgate_DxH[...])
  assert weight.shape == (32, 4) and abs(weight.std() - 0.02) < 0.005
  assert layer.fgate.fgate_bias_H[...].shape == (4,)
  assert not np.any(np.asarray(layer.fgate.fgate_bias_H[...]))
  assert layer.path.w_down_DxR[...].shape == (32, path.LOW_RANK)
  assert layer.path.block_size == 16
  plain = path.PaTH(d_model=32, num_heads=4, head_dim=8, rngs=nnx.Rngs(0))
  np.testing.assert_array_equal(np.asarray(layer.path.beta_DxH[...]),
                                np.asarray(plain.beta_DxH[...]))


def test_trains_in_the_model():
  """A few steps of the tiny Dyck config: the loss falls and the forget
  gates' parameters train (their bias leaves its zero start)."""
  config = configs.load_file(helpers.ROOT / "configs" / "dyck.py", "tiny")
  config.position.kind = "path_fox"
  config.warmup_steps, config.learning_rate, config.buckets = 0, 3e-3, (40,)
  config_lib.validate(config, num_devices=jax.device_count())
  mesh = sharding_lib.make_mesh(config.mesh)
  with jax.set_mesh(mesh):
    s, state = state_lib.setup(config, mesh)
    step_fn = steps.make_train_step(s)
    data = iter(
        pipeline.train_dataset(s.task, batch_size_per_process=config.batch_size, seed=config.seed,
                               buckets=tuple(config.buckets)))
    losses = []
    for _ in range(6):
      state, metrics = step_fn(state, steps.to_global_batch(next(data), mesh))
      losses.append(float(metrics["loss"]))
  assert np.all(np.isfinite(losses)) and np.mean(losses[-2:]) < np.mean(losses[:2]), losses
  biases = [
      np.asarray(leaf)
      for key, leaf in jax.tree_util.tree_flatten_with_path(state["params"])[0]
      if "fgate_bias_H" in jax.tree_util.keystr(key)
  ]
  assert len(biases) == config.model.num_layers
  assert all(np.abs(b).max() > 1e-4 for b in biases)
