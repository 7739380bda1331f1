"""Stick-breaking attention (`bifocal_jax/nn/positions/stickbreaking.py`) against
float64 references written from its sources: the kernel's maths and tests,
shawntan/stickbreaking-attention (`stickbreaking_attention/sb_ref.py`,
`tests/test_attn.py`'s `ref_fwd`: the `own_value` form), and the authors'
model, IBM/dolomite-engine `SBAttention`
(`lm_engine/hf_models/modeling_utils/sequence_mixer_blocks/stickbreaking_attention.py`:
the `head_bias` form, the default)."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

import helpers
import position_checks as checks
from bifocal_jax.nn import attention
from bifocal_jax.training import config as config_lib
from bifocal_jax.nn import model as model_lib
from bifocal_jax.nn import positions
from bifocal_jax.nn.positions import stickbreaking


def sigmoid(x):
  return 1 / (1 + np.exp(-x))


def reference_loops(q, k, v, valid, attend_current):
  """Direct loops in float64: A_ij = sigmoid(z_ij) prod_{j<l, l allowed} (1 - sigmoid(z_il)),
  out_i = sum_j A_ij v_j + (1 - sum_j A_ij) v_i."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  b_, l_, h_, d = q.shape
  out = np.zeros_like(q)
  for b in range(b_):
    for h in range(h_):
      for i in range(l_):
        def allowed(j, i=i, b=b):
          return (j <= i if attend_current else j < i) and (valid is None or valid[b, j])
        z = np.array([q[b, i, h] @ k[b, j, h] / np.sqrt(d) for j in range(l_)])
        att = np.zeros(l_)
        for j in range(l_):
          if allowed(j):
            att[j] = sigmoid(z[j]) * np.prod([1 - sigmoid(z[l]) for l in range(j + 1, l_)
                                              if allowed(l)])
        out[b, i, h] = att @ v[b, :, h] + (1 - att.sum()) * v[b, i, h]
  return out


def sb_ref_stickbreaking(q, k, v, mask, cum_weight):
  """`sb_ref.stickbreaking` in numpy float64 (heads-major `[B, H, L, K]`): `(o, rem)`."""
  logits = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
  log_z = np.where(mask, -1e5, -np.logaddexp(0, -logits))  # logsigmoid, masked_fill(mask, -1e5)
  log_beta = np.where(mask, 0, -np.logaddexp(0, logits))  # logsigmoid(-logits), masked_fill 0
  re_cum_log_beta = np.einsum("bhij,jk->bhik", log_beta, cum_weight)
  att = np.exp(log_z + re_cum_log_beta)
  return att @ v, 1 - att.sum(-1)


def causal_masks(length, attend_current):
  """`ref_fwd`'s `cm` and `mask`."""
  cm = np.tril(np.ones((length, length)), -1)
  mask = np.triu(np.ones((length, length)), 1 if attend_current else 0).astype(bool)
  return cm, mask


def reference_source(q, k, v, attend_current):
  """`ref_fwd`, line by line in numpy (no padding), `[B, L, H, K]` in and out."""
  q, k, v = (np.asarray(x, np.float64).transpose(0, 2, 1, 3) for x in (q, k, v))
  o, rem = sb_ref_stickbreaking(q, k, v, *causal_masks(q.shape[2], attend_current)[::-1])
  return (o + rem[..., None] * v).transpose(0, 2, 1, 3)


def torch_group_norm(x_NxC, num_groups, weight_C, bias_C, eps=1e-5):
  """`torch.nn.GroupNorm(num_groups, C)(x)` on `[N, C]`: each group of `C /
  num_groups` adjacent channels normalised by its mean and biased variance,
  then the per-channel affine."""
  n, c = x_NxC.shape
  x = x_NxC.reshape(n, num_groups, c // num_groups)
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean)**2).mean(-1, keepdims=True)
  return ((x - mean) / np.sqrt(var + eps)).reshape(n, c) * weight_C + bias_C


def sb_attention_model(q, k, v, head_bias, norm_weight, norm_bias, attend_current=False):
  """`SBAttention.forward` from its `sb_attn` call to its `c_proj` (exclusive),
  on one batch without padding, numpy float64: `q, k, v` `[B, L, H, K]`,
  `head_bias` `[H, K]`, the norm's weight and bias `[H * K]`; `[B, L, H, K]` out
  (the source's `[B, L, hidden_size]`, split per head)."""
  query, key, value = (np.asarray(x, np.float64).transpose(0, 2, 1, 3) for x in (q, k, v))
  bsz_, num_heads, length_, head_dim = query.shape
  hidden_size = num_heads * head_dim
  cm, mask = causal_masks(length_, attend_current)
  # sb_attn(q=query, k=key, v=value, inv_temp=softmax_scale): inv_temp None -> 1/sqrt(d)
  hidden_states, rem = sb_ref_stickbreaking(query, key, value, mask, cm)
  hidden_states = hidden_states + rem[..., None] * head_bias[None, :, None, :]
  hidden_states = hidden_states.transpose(0, 2, 1, 3)
  hidden_states = hidden_states.reshape(bsz_ * length_, hidden_size)
  hidden_states = torch_group_norm(hidden_states, num_heads, norm_weight, norm_bias)
  return hidden_states.reshape(bsz_, length_, num_heads, head_dim)


def sb_attention_model_padded(tokens, valid, params, attend_current=False):
  """The model on a padded batch as its padding-free `PaddingFreeSBAttention`
  runs it (`sb_attn_varlen`: each sequence its own segment): each row's valid
  tokens alone; zeros at the padded places."""
  out = np.zeros(tokens["q"].shape, np.float64)
  for row in range(tokens["q"].shape[0]):
    keep = valid[row]
    one = [np.asarray(tokens[name], np.float64)[row:row + 1, keep] for name in ("q", "k", "v")]
    out[row, keep] = sb_attention_model(*one, *params, attend_current=attend_current)[0]
  return out


def make_fn(attend_current=False):
  def fn(tokens, valid, query_chunk):
    return stickbreaking.stickbreaking_attention(tokens["q"], tokens["k"], tokens["v"], None, valid,
                                                 remainder="own_value",
                                                 attend_current=attend_current,
                                                 query_chunk=query_chunk)
  return fn


def make_module(rng, *, heads=checks.H, head_dim=checks.K, attend_current=False):
  """The model's form with random non-zero `head_bias` and norm parameters."""
  module = stickbreaking.StickBreaking(num_heads=heads, head_dim=head_dim,
                                       attend_current=attend_current)
  module.head_bias_HxK[...] = jnp.asarray(rng.standard_normal((heads, head_dim)), jnp.float32)
  module.norm_scale_HxK[...] = jnp.asarray(1 + 0.5 * rng.standard_normal((heads, head_dim)),
                                           jnp.float32)
  module.norm_bias_HxK[...] = jnp.asarray(rng.standard_normal((heads, head_dim)), jnp.float32)
  return module


def source_params(module):
  """The module's parameters in the source's layout: `head_bias` `[H, K]`, the
  GroupNorm's weight and bias `[H * K]` (channel h * K + k)."""
  return (np.asarray(module.head_bias_HxK[...], np.float64),
          np.asarray(module.norm_scale_HxK[...], np.float64).reshape(-1),
          np.asarray(module.norm_bias_HxK[...], np.float64).reshape(-1))


def module_fn(module):
  def fn(tokens, valid, query_chunk):
    return module.attend(None, tokens["q"], tokens["k"], tokens["v"], None, valid, causal=True,
                         query_chunk=query_chunk)
  return fn


@pytest.fixture
def case():
  rng = np.random.default_rng(3)
  return rng, checks.random_qkv(rng, scale=1.5)


# ----------------------------------------------------------------------------
# The kernel's maths (the `own_value` form).
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("attend_current", [False, True])
def test_matches_references(case, attend_current):
  _, tokens = case
  fn = make_fn(attend_current)
  got = np.asarray(fn(tokens, None, 4))
  np.testing.assert_allclose(got, reference_source(tokens["q"], tokens["k"], tokens["v"],
                                                   attend_current), atol=2e-5, rtol=2e-5)
  valid = checks.right_padding([13, 9])
  valid[0, 3] = False
  got = np.asarray(fn(tokens, valid, 4))
  want = reference_loops(tokens["q"], tokens["k"], tokens["v"], valid, attend_current)
  np.testing.assert_allclose(got[valid], want[valid], atol=2e-5, rtol=2e-5)


def test_long_sequence_is_stable():
  # 600 keys with gates near 0: the stick's products underflow in linear
  # space, not in log space; the output stays a finite convex combination.
  rng = np.random.default_rng(4)
  tokens = checks.random_qkv(rng, length=600, scale=2.0)
  out = np.asarray(make_fn()(tokens, None, 128))
  assert np.all(np.isfinite(out))
  assert np.abs(out).max() <= np.abs(tokens["v"]).max() + 1e-5


def test_chunked_equals_unchunked(case):
  _, tokens = case
  checks.check_chunked_equals_unchunked(make_fn(), tokens, checks.right_padding([13, 7]))


def test_causal(case):
  _, tokens = case
  checks.check_causal(make_fn(), tokens)
  checks.check_causal(make_fn(attend_current=True), tokens)


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
  for remainder in ("own_value", None, np.zeros((checks.H, checks.K))):
    with pytest.raises(ValueError, match="'stickbreaking' is defined for causal attention only"):
      stickbreaking.stickbreaking_attention(tokens["q"], tokens["k"], tokens["v"], None, None,
                                            remainder=remainder, causal=False)
  with pytest.raises(ValueError, match="'stickbreaking' is defined for causal attention only"):
    make_module(np.random.default_rng(0)).attend(None, tokens["q"], tokens["k"], tokens["v"], None,
                                                 None, causal=False)


def test_own_value_module_is_the_kernel_tests_form(case):
  # `stickbreaking_remainder="own_value"`: no parameters, `ref_fwd`'s output.
  _, tokens = case
  module = stickbreaking.StickBreaking(num_heads=checks.H, head_dim=checks.K, remainder="own_value")
  assert not jax.tree.leaves(nnx.state(module, nnx.Param))
  got = np.asarray(module_fn(module)(tokens, None, 4))
  np.testing.assert_allclose(got, reference_source(tokens["q"], tokens["k"], tokens["v"], False),
                             atol=2e-5, rtol=2e-5)


# ----------------------------------------------------------------------------
# The authors' model (the `head_bias` form, the default).
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("attend_current", [False, True])
def test_module_matches_the_models_sbattention(case, attend_current):
  rng, tokens = case
  module = make_module(rng, attend_current=attend_current)
  params = source_params(module)
  fn = module_fn(module)
  got = np.asarray(fn(tokens, None, 4))
  want = sb_attention_model(tokens["q"], tokens["k"], tokens["v"], *params,
                            attend_current=attend_current)
  np.testing.assert_allclose(got, want, atol=5e-5, rtol=5e-5)
  # Not the kernel tests' form: the remainder is on head_bias, and normalised.
  assert np.abs(got - reference_source(tokens["q"], tokens["k"], tokens["v"],
                                       attend_current)).max() > 0.1
  # Padding (right, and one padded key inside a row) as the padding-free model.
  valid = checks.right_padding([13, 9])
  valid[0, 3] = False
  got = np.asarray(fn(tokens, valid, 4))
  want = sb_attention_model_padded(tokens, valid, params, attend_current)
  np.testing.assert_allclose(got[valid], want[valid], atol=5e-5, rtol=5e-5)


def test_module_gradient_matches_finite_differences_of_the_model(case):
  """The directional derivative of a scalar of the module's output along a
  random direction of each input and parameter, against central differences
  of the float64 port of `SBAttention`, with padding."""
  rng, tokens = case
  module = make_module(rng)
  valid = checks.right_padding([13, 9])
  weight = rng.standard_normal(tokens["q"].shape) * valid[..., None, None]
  graphdef, params = nnx.split(module, nnx.Param)

  def ours(inputs):
    m = nnx.merge(graphdef, inputs["params"])
    out = m.attend(None, inputs["q"], inputs["k"], inputs["v"], None, valid, causal=True,
                   query_chunk=4)
    return jnp.sum(out * weight)

  inputs = {"q": tokens["q"], "k": tokens["k"], "v": tokens["v"], "params": params}
  grads = jax.grad(ours)(inputs)

  def theirs(q, k, v, head_bias, norm_scale, norm_bias):
    params = (head_bias, norm_scale.reshape(-1), norm_bias.reshape(-1))
    out = sb_attention_model_padded({"q": q, "k": k, "v": v}, valid, params)
    return float(np.sum(out * weight))

  point = {name: np.asarray(tokens[name], np.float64) for name in ("q", "k", "v")}
  point.update(zip(("head_bias", "norm_scale", "norm_bias"),
                   (np.asarray(params[name][...], np.float64)
                    for name in ("head_bias_HxK", "norm_scale_HxK", "norm_bias_HxK"))))
  grad_of = {"q": grads["q"], "k": grads["k"], "v": grads["v"],
             "head_bias": grads["params"]["head_bias_HxK"][...],
             "norm_scale": grads["params"]["norm_scale_HxK"][...],
             "norm_bias": grads["params"]["norm_bias_HxK"][...]}
  eps = 1e-5
  for name in point:
    direction = rng.standard_normal(point[name].shape)
    plus, minus = dict(point), dict(point)
    plus[name], minus[name] = point[name] + eps * direction, point[name] - eps * direction
    numeric = (theirs(**plus) - theirs(**minus)) / (2 * eps)
    analytic = float(np.sum(np.asarray(grad_of[name], np.float64) * direction))
    assert abs(analytic - numeric) <= 2e-3 * max(1.0, abs(numeric)), (name, analytic, numeric)
    assert abs(numeric) > 1e-2, name  # the direction moves the output (the check can fail)


def test_module_padding_chunks_and_causality(case):
  rng, tokens = case
  fn = module_fn(make_module(rng))
  checks.check_chunked_equals_unchunked(fn, tokens, checks.right_padding([13, 7]), atol=2e-5)
  checks.check_causal(fn, tokens)
  checks.check_padding(fn, tokens, checks.right_padding([13, 8]), rng)
  valid = checks.right_padding([13, 5])
  valid[1, 0] = False
  checks.check_gradients_finite(fn, tokens, valid)


def test_attend_is_finish_of_its_part_linear_in_the_values(case):
  """`attend_values` (what the probe reads weights off) is linear in the
  values, and `finish` of it and the remainder is `attend`."""
  rng, tokens = case
  valid = checks.right_padding([13, 9])
  for module in (make_module(rng), stickbreaking.StickBreaking(num_heads=checks.H,
                                                               head_dim=checks.K,
                                                               remainder="own_value")):
    def part(v, module=module):
      return module.attend_values(None, tokens["q"], tokens["k"], v, None, valid, causal=True,
                                  query_chunk=4)
    v2 = rng.standard_normal(tokens["v"].shape).astype(np.float32)
    np.testing.assert_allclose(part(tokens["v"] + 2 * v2), part(tokens["v"]) + 2 * part(v2),
                               atol=1e-4, rtol=1e-4)
    # the remainder: 1 - the weights' sum, read off values of ones
    rem = 1.0 - part(jnp.ones_like(tokens["v"]))[..., 0]
    if module.remainder == "own_value":
      np.testing.assert_allclose(rem, 0.0, atol=1e-5)  # the weights include the remainder
    finished = module.finish(part(tokens["v"]), rem)
    np.testing.assert_allclose(finished, module_fn(module)(tokens, valid, 4), atol=2e-5, rtol=2e-5)


# ----------------------------------------------------------------------------
# Config: the form, its parameters and their initialisation.
# ----------------------------------------------------------------------------


def _position(kind="stickbreaking", **overrides):
  position = attention.default_position_config()
  position.kind = kind
  position.update(overrides)
  return position


def _model(position, *, heads=4, head_dim=6, layers=2):
  cfg = ml_collections.ConfigDict(dict(num_layers=layers, d_model=16, num_heads=heads,
                                       head_dim=head_dim, mlp_dim=16, dtype="float32"))
  return model_lib.Transformer(cfg, position, vocab_size=11, causal=True, rngs=nnx.Rngs(0))


def test_the_default_is_the_models_form_with_its_initialisation():
  position = _position()
  assert position.stickbreaking_remainder is None
  model = _model(position)
  for block in model.blocks:
    layer = block.attn.position
    assert layer.remainder == "head_bias"
    np.testing.assert_array_equal(layer.head_bias_HxK[...], np.zeros((4, 6)))
    np.testing.assert_array_equal(layer.norm_scale_HxK[...], np.ones((4, 6)))
    np.testing.assert_array_equal(layer.norm_bias_HxK[...], np.zeros((4, 6)))
  # 3 H K parameters per layer more than the kernel tests' form (which has none)
  own = _model(_position(stickbreaking_remainder="own_value"))
  assert model_lib.count_params(model) - model_lib.count_params(own) == 2 * 3 * 4 * 6
  explicit = _model(_position(stickbreaking_remainder="head_bias"))
  assert model_lib.count_params(explicit) == model_lib.count_params(model)
  # The model runs; its first token's output is the norm of head_bias alone (rem = 1).
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 11, (2, 7)), jnp.int32)
  assert np.all(np.isfinite(np.asarray(model(tokens))))
  assert not np.allclose(model(tokens), own(tokens), atol=1e-3)


def test_mixed_kind_sizes_the_parameters_to_its_heads():
  position = _position("rope+stickbreaking", mixed_heads=1)
  model = _model(position, heads=4, head_dim=6)
  group = model.blocks[0].attn.groups["stickbreaking"]
  assert group.num_heads == 3
  assert group.position.head_bias_HxK[...].shape == (3, 6)
  assert group.position.norm_scale_HxK[...].shape == (3, 6)
  tokens = jnp.asarray(np.random.default_rng(1).integers(0, 11, (2, 7)), jnp.int32)
  valid = jnp.asarray(np.arange(7)[None] < np.array([[7], [4]]))
  out = model(tokens, valid)
  assert out.shape == (2, 7, 11) and np.all(np.isfinite(np.asarray(out)))


@pytest.mark.parametrize("kind", ["stickbreaking", "rope+stickbreaking"])
@pytest.mark.parametrize("value", ["bias", 1, "OWN_VALUE"])
def test_an_invalid_remainder_is_refused_in_one_line(kind, value):
  config = helpers.tiny_config({"position.kind": kind})
  config_lib.validate(config, num_devices=1)
  with config.position.ignore_type():
    config.position.stickbreaking_remainder = value
  with pytest.raises(config_lib.ConfigError,
                     match=rf"config\.position\.stickbreaking_remainder={value!r}: must be None "
                     r"or 'head_bias'") as e:
    config_lib.validate(config, num_devices=1)
  assert "\n" not in str(e.value)
  # built without validation, the layer refuses it the same way
  with pytest.raises(ValueError, match=r"^position\.stickbreaking_remainder=") as e:
    positions.get("stickbreaking").layer(config.position, d_model=16, num_heads=2, head_dim=4,
                                         causal=True, rngs=nnx.Rngs(0))
  assert "\n" not in str(e.value)
  for good in (None, "head_bias", "own_value"):
    config.position.stickbreaking_remainder = good
    config_lib.validate(config, num_devices=1)
