"""CoPE (`bifocal_jax/nn/positions/cope.py`) against a float64 reference written
from facebookresearch/RAM `projects/cope/src/cope/context_position.py`."""

import numpy as np
import pytest
from flax import nnx

import helpers
import position_checks as checks
from bifocal_jax.training import state as state_lib
from bifocal_jax import tasks
from bifocal_jax.nn.positions import cope

NPOS = 6  # small, so that counts are clamped within the test's 13 tokens


def reference(q, k, v, pos_emb, valid, causal):
  """Direct loops over (batch, head, query, key) in float64, as the source:
  gates, reversed cumsum, clamp, floor/ceil interpolation, logits / sqrt(d)."""
  q, k, v, pos_emb = (np.asarray(x, np.float64) for x in (q, k, v, pos_emb))
  b_, l_, h_, d = q.shape
  npos = pos_emb.shape[1]
  out = np.zeros_like(q)
  for b in range(b_):
    for h in range(h_):
      for i in range(l_):
        mask = np.array([(j <= i or not causal) and (valid is None or valid[b, j])
                         for j in range(l_)])
        dots = np.array([q[b, i, h] @ k[b, j, h] for j in range(l_)])
        gates = mask / (1 + np.exp(-dots / np.sqrt(d)))
        logits = np.full(l_, -np.inf)
        for j in range(l_):
          if not mask[j]:
            continue
          p = min(sum(gates[j:]), npos - 1)
          lo, hi = int(np.floor(p)), int(np.ceil(p))
          w = p - lo
          e = (q[b, i, h] @ pos_emb[:, hi]) * w + (q[b, i, h] @ pos_emb[:, lo]) * (1 - w)
          logits[j] = (dots[j] + e) / np.sqrt(d)
        if mask.any():
          p_ = np.exp(logits - logits.max())
          out[b, i, h] = (p_ / p_.sum()) @ v[b, :, h]
  return out


def make_fn(pos_emb, causal=True):
  def fn(tokens, valid, query_chunk):
    return cope.cope_attention(tokens["q"], tokens["k"], tokens["v"], None, valid,
                               pos_emb_KxP=pos_emb, causal=causal, query_chunk=query_chunk)
  return fn


@pytest.fixture
def case():
  rng = np.random.default_rng(0)
  tokens = checks.random_qkv(rng)
  pos_emb = rng.standard_normal((checks.K, NPOS)).astype(np.float32)
  return rng, tokens, pos_emb


@pytest.mark.parametrize("causal", [True, False])
def test_matches_reference(case, causal):
  _, tokens, pos_emb = case
  valid = checks.right_padding([13, 9])
  got = make_fn(pos_emb, causal)(tokens, valid, 4)
  want = reference(tokens["q"], tokens["k"], tokens["v"], pos_emb, valid, causal)
  np.testing.assert_allclose(np.asarray(got)[valid], want[valid], atol=2e-5, rtol=2e-5)


def test_counts_are_clamped_at_npos(case):
  # With gates near 1 (large aligned q, k) the counts pass NPOS - 1 within the
  # sequence: only the clamp keeps the gather in range and matches the reference.
  rng, _, pos_emb = case
  q = np.abs(rng.standard_normal((1, 13, 1, checks.K))).astype(np.float32) * 3
  tokens = dict(q=q, k=q.copy(), v=rng.standard_normal(q.shape).astype(np.float32))
  got = make_fn(pos_emb)(tokens, None, 1024)
  want = reference(tokens["q"], tokens["k"], tokens["v"], pos_emb, None, True)
  np.testing.assert_allclose(np.asarray(got), want, atol=2e-5, rtol=2e-5)


def test_chunked_equals_unchunked(case):
  _, tokens, pos_emb = case
  checks.check_chunked_equals_unchunked(make_fn(pos_emb), tokens, checks.right_padding([13, 7]))
  checks.check_chunked_equals_unchunked(make_fn(pos_emb, causal=False), tokens, None)


def test_causal(case):
  _, tokens, pos_emb = case
  checks.check_causal(make_fn(pos_emb), tokens)


def test_gradients_finite(case):
  _, tokens, pos_emb = case
  valid = checks.right_padding([13, 5])
  valid[1, 0] = False  # a query with no valid key (row 1, token 0)
  checks.check_gradients_finite(make_fn(pos_emb), tokens, valid)


@pytest.mark.parametrize("causal", [True, False])
def test_padding(case, causal):
  rng, tokens, pos_emb = case
  checks.check_padding(make_fn(pos_emb, causal), tokens, checks.right_padding([13, 8]), rng)


def test_module_starts_at_zero_embeddings():
  layer = cope.CoPE(head_dim=8, npos=101, rngs=nnx.Rngs(0))
  assert layer.pos_emb_KxP[...].shape == (8, 101)
  assert not np.any(np.asarray(layer.pos_emb_KxP[...]))
  with pytest.raises(ValueError, match="cope: npos"):
    cope.CoPE(head_dim=8, npos=1)


def test_build_model_sets_npos_from_the_training_context():
  config = helpers.tiny_config({"position.kind": "cope"})
  task = tasks.get_task(config.task)
  model = nnx.eval_shape(lambda: state_lib.build_model(config, task))
  assert model.blocks[0].attn.position.pos_emb_KxP.shape[-1] == task.max_sequence_length("train") + 1
  assert config.position.cope_npos is None  # the stored config keeps "the source's default"
  config.position.cope_npos = 7  # a given value is kept
  model = nnx.eval_shape(lambda: state_lib.build_model(config, task))
  assert model.blocks[0].attn.position.pos_emb_KxP.shape[-1] == 7


def test_the_encoder_cannot_tell_a_query_its_own_index(case):
  """Without the causal mask a key's position counts the gates from it to the
  end of the sequence, and nothing depends on the query's own index: queries
  equal at two indices get equal outputs (why CoPE, like NoPE, fits no
  bucket_sort model in the encoder, where output i is the i-th smallest).
  The causal form counts up to the query, and tells them apart."""
  _, tokens, pos_emb = case
  tokens = {name: x.copy() for name, x in tokens.items()}
  tokens["q"][:, 9] = tokens["q"][:, 2]  # the same query at indices 2 and 9
  encoder = np.asarray(make_fn(pos_emb, causal=False)(tokens, None, 16))
  np.testing.assert_allclose(encoder[:, 9], encoder[:, 2], atol=1e-6)
  decoder = np.asarray(make_fn(pos_emb, causal=True)(tokens, None, 16))
  assert np.abs(decoder[:, 9] - decoder[:, 2]).max() > 1e-3
