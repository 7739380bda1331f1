"""Every `position.kind` of the registry (`bifocal_jax/nn/positions/`): the names
the issue asks for, refusal where the source does not define a kind,
causality in the decoder with drawn positions, and the learnable bias's
gradient through `attend`. Training, resume and sharding of the kinds:
`test_positions_train.py`."""

import re

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

import pytest
from flax import nnx

import helpers
from bifocal_jax.nn import attention
from bifocal_jax.nn import kernels
from bifocal_jax.training import config as config_lib
from bifocal_jax import configs
from bifocal_jax.nn import model as model_lib
from bifocal_jax.nn import positions


KINDS = positions.POSITION_KINDS
DECODER_KINDS = [k for k in KINDS if positions.get(k).decoder]
ENCODER_KINDS = [k for k in KINDS if positions.get(k).encoder]


def test_the_registry_has_the_kinds_and_the_one_list():
  issue = ("nope", "rope", "partial_rope", "randomized_rope", "alibi", "spectral", "bifocal",
           "sin_cos", "learnt", "relative", "randomized_sin_cos", "randomized_learnt",
           "randomized_relative", "randomized_alibi", "t5", "kerple_log", "kerple_power", "fire",
           "cope", "fox", "stickbreaking", "path", "fope", "p_rope")
  assert set(issue) <= set(KINDS)
  assert attention.POSITION_KINDS == KINDS
  for kind in KINDS:
    scheme = positions.get(kind)
    assert scheme.name == kind and scheme.interface in positions.base.INTERFACES
    assert scheme.encoder or scheme.decoder
  assert positions.get("relative").interface == positions.BIAS
  assert positions.get("sin_cos").interface == positions.ABSOLUTE
  with pytest.raises(ValueError, match=r"position\.kind='learned'.*must be one of"):
    positions.get("learned")



def test_one_name_per_scheme_read_back_to_the_config_that_builds_it():
  """Results, logs and the sweep name a bifocal run by its split; every other
  kind by itself. The name and the config keys go both ways."""
  names = positions.scheme_names()
  assert "bifocal" not in names and {"bifocal_heads", "bifocal_pairs"} <= set(names)
  for name in (*names, "rope+path"):
    overrides = positions.scheme_overrides(name)
    config = configs.get_config("dyck", "tiny")
    for key, value in overrides.items():
      config[key.split(".")[0]][key.split(".")[1]] = value
    assert positions.scheme_name(config.position) == name
  assert positions.scheme_overrides("bifocal_pairs") == {"position.kind": "bifocal",
                                                         "position.split": "pairs"}
  for bad, reason in (("bifocal", "a bifocal run is named by its split: bifocal_heads, "
                                  "bifocal_pairs"),
                      ("bifocal_both", "must be one of"), ("learned", "must be one of"),
                      ("heads", "must be one of"), (3, "a scheme is named by a string"),
                      ("rope+rope", "mixes 'rope' with itself")):
    with pytest.raises(ValueError, match=rf"^scheme {re.escape(repr(bad))}: {reason}"):
      positions.scheme_overrides(bad)


@pytest.mark.parametrize("kind, config_file", [("kerple_log", "reverse_string.py"),
                                               ("fire", "odds_first.py"),
                                               ("randomized_relative", "dyck.py"),
                                               ("fox", "reverse_string.py"),
                                               ("stickbreaking", "odds_first.py"),
                                               ("path", "reverse_string.py")])
def test_a_kind_is_refused_in_one_line_where_its_source_does_not_define_it(kind, config_file):
  config = configs.load_file(helpers.ROOT / "configs" / config_file, "tiny")
  config.position.kind = kind
  with pytest.raises(config_lib.ConfigError, match=rf"position\.kind='{kind}': not defined") as e:
    config_lib.validate(config, num_devices=1)
  assert "\n" not in str(e.value)


@pytest.mark.parametrize("kind, value, why", [("rope", True, "draws no positions"),
                                              ("learnt", True, "draws no positions"),
                                              ("randomized_learnt", True, "draws its positions once"),
                                              ("randomized_alibi", "yes", "must be True, False")])
def test_a_draw_per_layer_is_refused_in_one_line_where_it_means_nothing(kind, value, why):
  config = configs.load_file(helpers.ROOT / "configs" / "dyck.py", "tiny")
  config.position.kind = kind
  with config.unlocked(), config.position.ignore_type():
    config.position.draw_per_layer = value
  with pytest.raises(config_lib.ConfigError,
                     match=rf"config\.position\.draw_per_layer={value!r}: .*{why}") as e:
    config_lib.validate(config, num_devices=1)
  assert "\n" not in str(e.value)
  config.position.draw_per_layer = None
  config_lib.validate(config, num_devices=1)


def _tiny_model(kind, *, causal=True, vocab=12, **position):
  cfg = ml_collections.ConfigDict(dict(num_layers=2, d_model=16, num_heads=2, head_dim=-1,
                                       mlp_dim=16, dtype="float32"))
  pos = attention.default_position_config()
  pos.kind, pos.max_position = kind, 64
  pos.update(position)
  return model_lib.Transformer(cfg, pos, vocab_size=vocab, causal=causal, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("kind", [k for k in DECODER_KINDS if positions.get(k).randomized])
def test_no_gradient_from_future_tokens_with_drawn_positions(kind):
  """d logits[:, t] / d (embedding of token s) is zero for every s > t (tokens
  0..L-1), with the positions (or distances) drawn as in training. Every kind
  with given positions: `test_model.py::test_causal_output_ignores_later_tokens`."""
  length, t = 10, 4
  model = _tiny_model(kind, vocab=length)
  tokens = jnp.arange(length)[None]
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  def logit_sum(params):
    m = nnx.merge(graphdef, params, rest)
    return m(tokens, rng=jax.random.key(1), train=True)[:, t].sum()

  grads = jax.jit(jax.grad(logit_sum))(params)
  embed = np.asarray(grads["embed_VxD"][...])
  assert np.all(embed[t + 1:] == 0), f"{kind}: future tokens reach position {t}"
  assert np.any(embed[:t + 1] != 0)


def test_attend_returns_the_true_gradient_of_a_learnable_bias():
  """A bias using q, k and a parameter, with query chunks, a causal mask and
  padding, against autodiff of the plain softmax."""
  rng = np.random.default_rng(0)
  b, length, h, d = 2, 7, 3, 4
  q, k, v = (jnp.asarray(rng.standard_normal((b, length, h, d)), jnp.float32) for _ in range(3))
  w = jnp.asarray(rng.standard_normal((h,)), jnp.float32)
  valid = jnp.asarray(np.arange(length)[None] < np.array([[7], [5]]))
  pos = jnp.arange(length)[None]

  def bias_fn(w):
    return lambda qh, kh, qp, kp: (w[:, None, None] * (qp[..., :, None] - kp[..., None, :])[:, None]
                                   + 0.1 * jnp.einsum("bhqk,bhsk->bhqs", qh, kh) ** 2)

  def ours(q, k, v, w):
    return kernels.attend(q, k, v, pos, valid, causal=True, bias_fn=bias_fn(w), query_chunk=3)

  def reference(q, k, v, w):
    qh, kh, vh = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))
    s = jnp.einsum("bhqk,bhsk->bhqs", qh, kh) / np.sqrt(d) + bias_fn(w)(qh, kh, pos, pos)
    mask = np.tril(np.ones((length, length), bool))[None, None] & valid[:, None, None, :]
    out = jax.nn.softmax(jnp.where(mask, s, kernels.MASKED), axis=-1) @ vh
    return jnp.swapaxes(out, 1, 2)

  cot = jnp.asarray(rng.standard_normal((b, length, h, d)), jnp.float32)
  keep = valid[:, :, None, None]
  np.testing.assert_allclose(ours(q, k, v, w) * keep, reference(q, k, v, w) * keep, atol=1e-5)
  loss = lambda f: lambda *a: jnp.sum(f(*a) * cot * keep)
  for name, got, want in zip("qkvw", jax.grad(loss(ours), argnums=(0, 1, 2, 3))(q, k, v, w),
                             jax.grad(loss(reference), argnums=(0, 1, 2, 3))(q, k, v, w)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"d{name}")


def test_setting_a_placeholder_key_in_one_config_leaves_the_others():
  """The keys meaning "the source's default" are placeholders (FieldReferences):
  each config must hold its own, or one run's value would leak into the next."""
  first, second = attention.default_position_config(), attention.default_position_config()
  first.cope_npos, first.t5_buckets = 7, 16
  assert second.cope_npos is None and second.t5_buckets is None
  assert attention.default_position_config().cope_npos is None


@pytest.mark.parametrize("causal", [True, False], ids=["decoder", "encoder"])
@pytest.mark.parametrize("kind", KINDS)
def test_long_sequences_in_blocks_equal_the_whole_sequence(kind, causal):
  """Past `query_chunk` attention runs in blocks of queries (and, for `attend`,
  of keys): every kind must give the logits of the whole-sequence path, so a
  scheme reading positions or distances within a block, not the sequence,
  fails here (37 tokens in blocks of 8: the last one padded)."""
  scheme = positions.get(kind)
  if not (scheme.decoder if causal else scheme.encoder):
    pytest.skip(f"{kind} is not defined for this direction")
  # CoPE's and FoPE's context-length keys as a 37-token training run's.
  model = _tiny_model(kind, causal=causal, vocab=12, randomize_eval=False, cope_npos=38,
                      fope_max_length=37)
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 12, (2, 37)))
  whole = np.asarray(model(tokens, train=False))
  for block in model.blocks:
    block.attn.query_chunk = 8
  np.testing.assert_allclose(np.asarray(model(tokens, train=False)), whole, atol=2e-5, rtol=1e-5)
