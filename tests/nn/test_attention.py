"""The attention layer (`bifocal_jax/nn/attention.py`) for every `position.kind`.

Compiles dominate the run time, so each layer structure is compiled once:
`run_layer` returns the output and the vmapped per-sequence output together,
and every test of that structure reuses it. The layers here are
bidirectional, so padding is what the mask must handle; causal masking is
tested through the whole model in `test_model.py`. At the end, the CPU path's
hand-written backward passes are checked against autodiff of the plain maths.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bifocal_jax.nn import attention
from bifocal_jax.nn import rotation
from bifocal_jax.nn import kernels
from bifocal_jax.nn import rope
from bifocal_jax.nn.positions import alibi

D_MODEL, HEADS, HEAD_DIM, BATCH, SEQ = 16, 2, 8, 2, 6


# (test id, position.kind, overrides): every kind defined for the (bidirectional)
# encoder, and bifocal split both ways.
CASES = [(kind, kind, {}) for kind in attention.POSITION_KINDS
         if attention.positions_lib.get(kind).encoder] + [
    ("bifocal_pairs", "bifocal", {"split": "pairs"})]
SPECTRAL_CASES = [case for case in CASES if case[1] in ("spectral", "bifocal")]


def ids(cases):
  return [case[0] for case in cases]


def make_layer(position, *, dtype=jnp.float32):
  return attention.Attention(D_MODEL, HEADS, HEAD_DIM, position, causal=False, dtype=dtype,
                             rngs=nnx.Rngs(0))


def inputs(seed=0):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.standard_normal((BATCH, SEQ, D_MODEL)), jnp.float32)
  # Increasing positions with random gaps, as randomized_rope draws them.
  positions = jnp.asarray(np.cumsum(rng.integers(1, 20, (BATCH, SEQ)), axis=-1))
  noise = jnp.asarray(rng.standard_normal((BATCH, SEQ, D_MODEL)), jnp.float32)
  return x, positions, noise


ALL_VALID = jnp.ones((BATCH, SEQ), bool)


def learn_spectrum(layer, seed=1):
  """Moves the spectral frequencies away from geometric, as training would."""
  log_frequency = layer.rope.log_frequency
  noise = np.random.default_rng(seed).uniform(-1.0, 1.0, log_frequency.shape)
  log_frequency[...] = log_frequency[...] + jnp.asarray(noise, jnp.float32)


@nnx.jit
def run_layer(layer, x, positions, valid):
  """(output, output of vmap over the batch of a pure function of the split state)."""
  graphdef, state = nnx.split(layer)

  def one_sequence(state, x_LxD, positions_L, valid_L):
    return nnx.merge(graphdef, state)(x_LxD[None], positions_L[None], valid_L[None])[0]
  per_sequence = jax.vmap(one_sequence, in_axes=(None, 0, 0, 0))(state, x, positions, valid)
  return layer(x, positions, valid), per_sequence


def output(layer, x, positions, valid=ALL_VALID):
  return run_layer(layer, x, positions, valid)[0]


@pytest.mark.parametrize("name, kind, overrides", CASES, ids=ids(CASES))
def test_jit_and_vmap(name, kind, overrides, position_config):
  layer = make_layer(position_config(kind, **overrides))
  x, positions, _ = inputs()
  out, per_sequence = run_layer(layer, x, positions, ALL_VALID)
  chex.assert_shape(out, (BATCH, SEQ, D_MODEL))
  chex.assert_tree_all_finite(out)
  np.testing.assert_allclose(per_sequence, out, atol=1e-5)
  spectral = [path for path, _ in nnx.state(layer, rope.SpectralFrequency).flat_state()]
  assert spectral == ([("rope", "log_frequency")] if kind in ("spectral", "bifocal") else [])


@pytest.mark.parametrize("name, kind, overrides", CASES, ids=ids(CASES))
def test_output_depends_only_on_relative_positions(name, kind, overrides, position_config):
  layer = make_layer(position_config(kind, **overrides))
  if kind in ("spectral", "bifocal"):
    learn_spectrum(layer)
  x, positions, _ = inputs()
  out = output(layer, x, positions)
  offset = int(np.random.default_rng(3).integers(1, 1000))
  if kind == "fope":  # its coefficients mix frequencies: absolute positions, not relative
    assert np.max(np.abs(output(layer, x, positions + offset) - out)) > 1e-3
    return
  np.testing.assert_allclose(output(layer, x, positions + offset), out, atol=1e-4)
  # Control: stretching the distances changes the output, unless there are no
  # positions in the layer (nope; absolute embeddings and biases shared by the
  # layers live in the model; CoPE counts its positions from the gates;
  # Transformer-XL's relative shift reads the positions as in order, 0 .. L-1,
  # as the model makes them for it: `positions/relative.py`).
  stretched = output(layer, x, 3 * positions)
  scheme = attention.positions_lib.get(kind)
  if (scheme.rope is None and scheme.layer is None) or kind in ("cope", "relative", "randomized_relative"):
    np.testing.assert_allclose(stretched, out, atol=1e-6)
  else:
    assert np.max(np.abs(stretched - out)) > 1e-3


@pytest.mark.parametrize("name, kind, overrides", SPECTRAL_CASES, ids=ids(SPECTRAL_CASES))
def test_spectral_kinds_start_as_rope(name, kind, overrides, position_config):
  geometric = make_layer(position_config("rope"))
  spectral = make_layer(position_config(kind, **overrides))
  np.testing.assert_array_equal(geometric.qkv_DxTxHxK[...], spectral.qkv_DxTxHxK[...])
  x, positions, _ = inputs()
  expected = output(geometric, x, positions)
  np.testing.assert_allclose(output(spectral, x, positions), expected, atol=1e-5)
  learn_spectrum(spectral)  # control: the spectrum is what makes them agree
  assert np.max(np.abs(output(spectral, x, positions) - expected)) > 1e-3


@pytest.mark.parametrize("name, kind, overrides", CASES, ids=ids(CASES))
def test_valid_outputs_ignore_padding(name, kind, overrides, position_config):
  layer = make_layer(position_config(kind, **overrides))
  x, positions, noise = inputs()
  valid = jnp.asarray([[1, 1, 1, 1, 0, 0], [0, 1, 1, 0, 1, 1]], bool)
  changed = jnp.where(valid[..., None], x, noise)
  out = output(layer, x, positions, valid)
  np.testing.assert_allclose(output(layer, changed, positions, valid)[valid], out[valid], atol=1e-6)
  # Control: unmasked, the change reaches the valid positions.
  unmasked = output(layer, changed, positions) - output(layer, x, positions)
  assert np.max(np.abs(unmasked[valid])) > 1e-3


def test_query_chunks_do_not_change_the_output(position_config):
  """Chunked queries (4 of 6: two chunks, the last padded) keep the causal mask and the
  ALiBi distances aligned."""
  def layer(query_chunk):
    return attention.Attention(D_MODEL, HEADS, HEAD_DIM, position_config("alibi"), causal=True,
                               query_chunk=query_chunk, rngs=nnx.Rngs(0))
  x, positions, _ = inputs()
  valid = jnp.asarray([[1, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1]], bool)
  whole = output(layer(SEQ), x, positions, valid)
  np.testing.assert_allclose(output(layer(4), x, positions, valid)[valid], whole[valid], atol=1e-6)


def test_alibi_slopes_are_a_buffer(position_config):
  layer = make_layer(position_config("alibi"))
  assert not isinstance(layer.position.slopes, nnx.Param)
  np.testing.assert_array_equal(layer.position.slopes[...], alibi.alibi_slopes(HEADS))


def test_bfloat16_compute(position_config):
  position = position_config("bifocal")
  layer_f32, layer_bf16 = make_layer(position), make_layer(position, dtype=jnp.bfloat16)
  x, positions, _ = inputs()
  positions = positions + 3000  # float32 angles keep far positions accurate
  out = output(layer_bf16, x.astype(jnp.bfloat16), positions)
  chex.assert_type(out, jnp.bfloat16)
  np.testing.assert_allclose(
      np.asarray(out, np.float32), output(layer_f32, x, positions), atol=0.05, rtol=0.05)


def test_odd_head_dim_raises(position_config):
  with pytest.raises(ValueError, match=r"head_dim.*7"):
    attention.Attention(14, 2, 7, position_config("rope"), causal=True, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("kind, overrides, num_heads, match", [
    ("learned", {}, 2, r"position\.kind.*learned"),
    ("partial_rope", {"rotary_fraction": 1.5}, 2, r"rotary_fraction.*1\.5"),
    ("partial_rope", {"rotary_fraction": 0.0}, 2, r"rotary_fraction.*0\.0"),
    ("bifocal", {"spectral_heads": 3}, 2, r"spectral_heads.*3"),
    ("bifocal", {"split": "pairs", "spectral_pairs": 5}, 2, r"spectral_pairs.*5"),
    ("bifocal", {"split": "layers"}, 2, r"split.*layers"),
    ("bifocal", {}, 1, r"num_heads"),
])
def test_bad_position_configs_raise(kind, overrides, num_heads, match, position_config):
  """The layer's rotary module comes from `make_rope`, which checks the config."""
  with pytest.raises(ValueError, match=match):
    attention.make_rope(position_config(kind, **overrides), num_heads=num_heads, head_dim=HEAD_DIM)


@pytest.mark.parametrize("kind", ["nope", "rope", "alibi"])
def test_mismatched_positions_raise(kind, position_config):
  layer = make_layer(position_config(kind))
  x, _, _ = inputs()
  with pytest.raises(ValueError, match=r"positions.*\(2, 7\)"):
    nnx.eval_shape(lambda layer: layer(x, jnp.zeros((BATCH, SEQ + 1), jnp.int32)), layer)


# The CPU path's hand-written backward passes against autodiff of the plain maths.

def _random(shape, seed):
  return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


def _vjp(fn, args, cotangent):
  """Gradients of `sum(fn(*args) * cotangent)` for every argument."""
  return jax.grad(lambda *a: jnp.sum(fn(*a) * cotangent), argnums=tuple(range(len(args))))(*args)


@pytest.mark.parametrize("head_dim", [2, 8])
def test_softmax_attention_gradients_match_autodiff(head_dim):
  b, h, length = 2, 3, 7
  q, k, v = (_random((b, h, length, head_dim), seed) for seed in range(3))
  # Causal, plus padding that masks every key of the first query of sequence 1.
  valid = jnp.asarray(np.arange(length)[None] >= np.array([[0], [2]]))
  bias = kernels._mask_bias(0, length, length, valid, causal=True)

  def reference(q, k, v):
    return jax.nn.softmax(jnp.einsum("bhqk,bhsk->bhqs", q, k) + bias, axis=-1) @ v
  cotangent = _random((b, h, length, head_dim), 3)
  fast = kernels.softmax_attention
  np.testing.assert_allclose(fast(q, k, v, bias), reference(q, k, v), rtol=1e-5, atol=1e-6)
  for name, got, want in zip("qkv", _vjp(lambda q, k, v: fast(q, k, v, bias), (q, k, v), cotangent),
                             _vjp(reference, (q, k, v), cotangent)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"d{name}")


@pytest.mark.parametrize("layout", rope.LAYOUTS)
@pytest.mark.parametrize("frequency_shape", [(3,), (2, 3), (2, 2)])  # shared, per head, partial
def test_rotate_queries_keys_gradients_match_autodiff(layout, frequency_shape):
  qk = _random((2, 2, 5, 2, 6), 0)  # [q|k, batch, seq, heads, head_dim]
  positions = jnp.asarray([[0, 3, 4, 9, 20], [1, 2, 5, 6, 40]])
  frequencies = jnp.abs(_random(frequency_shape, 1)) + 0.1

  def reference(qk, frequencies):
    return rope.rotate(qk, *rope.rotary_cos_sin(positions, frequencies), layout)

  def fast(qk, frequencies):
    return rotation.rotate_queries_keys(qk, positions, frequencies, layout)
  cotangent = _random(qk.shape, 2)
  np.testing.assert_allclose(fast(qk, frequencies), reference(qk, frequencies), atol=1e-6)
  for name, got, want in zip(("qk", "frequencies"), _vjp(fast, (qk, frequencies), cotangent),
                             _vjp(reference, (qk, frequencies), cotangent)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"d{name}")


# Blocked attention (sequences longer than `query_chunk`) against one block.

def _reference_attention(q, k, v, positions, valid, *, causal, bias_fn=None):
  """Plain softmax attention on `[B, L, H, K]` operands, every `L x L` score."""
  q_h, k_h, v_h = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))
  scores = jnp.einsum("bhqk,bhsk->bhqs", q_h, k_h) / np.sqrt(q.shape[-1])
  if bias_fn is not None:
    scores = scores + bias_fn(q_h, k_h, positions, positions)
  mask = jnp.ones(scores.shape[-2:], bool)
  if causal:
    mask = jnp.tril(mask)
  mask = mask[None, None] & valid[:, None, None, :]
  probs = jax.nn.softmax(jnp.where(mask, scores, kernels.MASKED), axis=-1)  # finite everywhere
  return jnp.swapaxes(probs @ v_h, 1, 2)


def _alibi_bias_fn():
  """ALiBi as a `bias_fn` (`-slope * |i - j|`, the causal form)."""
  slopes = jnp.asarray(alibi.alibi_slopes(_H))
  return lambda q, k, q_pos, k_pos: alibi.alibi_bias(q_pos, k_pos, slopes)


def _learnable_bias_fn(w_H):
  """A bias depending on a parameter, on the queries and keys, and on distances."""

  def bias_fn(q, k, q_positions, k_positions):
    distance = (q_positions[..., :, None] - k_positions[..., None, :]).astype(jnp.float32)
    content = jnp.tanh(q.sum(-1))[..., :, None] * jnp.tanh(k.sum(-1))[..., None, :]
    return -w_H[:, None, None] * jnp.abs(distance)[:, None] + content

  return bias_fn


# Length 11 in blocks of 4: three query blocks, the last with one padded
# query and key. Sequence 1 has left and right padding.
_B, _L, _H, _K = 2, 11, 3, 4
_VALID = jnp.asarray((np.arange(_L)[None] >= np.array([[0], [3]])) &
                     (np.arange(_L)[None] < np.array([[11], [9]])))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("bias", ["none", "alibi", "learnable"])
def test_blocked_attention_matches_one_block_and_the_reference(causal, bias):
  q, k, v = (_random((_B, _L, _H, _K), seed) for seed in range(3))
  positions = jnp.asarray(np.cumsum(np.random.default_rng(4).integers(1, 4, (_B, _L)), -1))
  bias_fn = dict(none=None, alibi=_alibi_bias_fn(),
                 learnable=_learnable_bias_fn(jnp.asarray([0.5, 0.1, 0.0])))[bias]

  def run(query_chunk):
    return jax.jit(lambda q, k, v: kernels.attend(
        q, k, v, positions, _VALID, causal=causal, bias_fn=bias_fn, query_chunk=query_chunk))(q, k, v)
  one_block, blocked = run(_L), run(4)
  want = _reference_attention(q, k, v, positions, _VALID, causal=causal, bias_fn=bias_fn)
  valid = np.asarray(_VALID)  # rows seeing no valid key differ by design (masked in the loss)
  np.testing.assert_allclose(blocked[valid], one_block[valid], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(one_block[valid], want[valid], rtol=1e-5, atol=1e-6)


def test_blocked_attention_shared_positions_and_no_mask():
  """`positions` of shape [1, L] and no `valid`: the padded keys are still masked."""
  q, k, v = (_random((_B, _L, _H, _K), seed) for seed in range(3))
  positions = jnp.arange(_L)[None]
  alibi_fn = _alibi_bias_fn()
  for causal in (True, False):
    blocked = kernels.attend(q, k, v, positions, causal=causal, bias_fn=alibi_fn, query_chunk=4)
    want = _reference_attention(q, k, v, positions, jnp.ones((_B, _L), bool), causal=causal,
                                bias_fn=alibi_fn)
    np.testing.assert_allclose(blocked, want, rtol=1e-5, atol=1e-6, err_msg=f"causal={causal}")


@pytest.mark.parametrize("query_chunk", [_L, 4], ids=["one_block", "blocked"])
def test_bias_fn_gets_its_gradients(query_chunk):
  """Gradients of a learnable `bias_fn` (its parameter, and q/k through it)."""
  q, k, v = (_random((_B, _L, _H, _K), seed) for seed in range(3))
  positions = jnp.arange(_L)[None]
  w = jnp.asarray([0.5, 0.1, 0.3])
  cotangent = _random((_B, _L, _H, _K), 5)
  valid = np.asarray(_VALID)[..., None, None]

  def fast(q, k, v, w):
    return kernels.attend(q, k, v, positions, _VALID, causal=True, bias_fn=_learnable_bias_fn(w),
                            query_chunk=query_chunk) * valid

  def reference(q, k, v, w):
    return _reference_attention(q, k, v, positions, _VALID, causal=True,
                                bias_fn=_learnable_bias_fn(w)) * valid
  for name, got, want in zip(("q", "k", "v", "w"), _vjp(fast, (q, k, v, w), cotangent),
                             _vjp(reference, (q, k, v, w), cotangent)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"d{name}")


@pytest.mark.parametrize("bias_shape", [(2, 3, 7, 7), (1, 3, 7, 7), (3, 7, 7), (2, 1, 7, 7),
                                        (1, 1, 1, 7)])
def test_softmax_attention_bias_gradient_matches_autodiff(bias_shape):
  """The bias's gradient is the score gradient summed to the bias's broadcast shape."""
  q, k, v = (_random((2, 3, 7, 4), seed) for seed in range(3))
  bias = _random(bias_shape, 3)

  def reference(q, k, v, bias):
    return jax.nn.softmax(jnp.einsum("bhqk,bhsk->bhqs", q, k) + bias, axis=-1) @ v
  cotangent = _random((2, 3, 7, 4), 4)
  got = _vjp(kernels.softmax_attention, (q, k, v, bias), cotangent)
  want = _vjp(reference, (q, k, v, bias), cotangent)
  assert got[3].shape == bias_shape
  np.testing.assert_allclose(got[3], want[3], rtol=1e-4, atol=1e-5)
