"""Mixed-scheme heads (`position.kind="a+b"`, `positions/mixed.py`): parsing
and refusals, a mixed layer equal to its two pure-kind layers on their head
slices, gradients to both schemes, the model's spectra and surgery, and a few
training steps in the decoder and the encoder."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import helpers
from bifocal_jax.nn import attention
from bifocal_jax.training import config as config_lib
from bifocal_jax import configs
from bifocal_jax.nn import model as model_lib
from bifocal_jax.nn import positions
from bifocal_jax import surgery
from bifocal_jax.nn.positions import mixed


D, HEADS, HEAD_DIM, LENGTH = 32, 4, 8, 12


def _position(kind, **keys):
  p = attention.default_position_config()
  p.kind = kind
  for key, value in keys.items():
    p[key] = value
  return positions.with_context_length(p, LENGTH)


def test_parse_and_valid_kinds():
  assert [s.name for s in positions.parts("rope+cope")] == ["rope", "cope"]
  assert [s.name for s in positions.parts("alibi")] == ["alibi"]
  assert positions.is_valid_kind("spectral+alibi") and positions.is_valid_kind("rope")
  assert not positions.is_valid_kind("rope+rope") and not positions.is_valid_kind("spiral")
  scheme = positions.get("rope+fire")
  assert scheme.name == "rope+fire" and scheme.interface == positions.MIXED
  assert scheme.decoder and not scheme.encoder  # FIRE is decoder-only
  assert positions.get("rope+t5").shared is not None
  assert positions.get("rope+alibi").shared is None
  assert "rope+alibi" not in positions.POSITION_KINDS  # the base kinds only


@pytest.mark.parametrize("kind, why", [
    ("rope+rope", "with itself"),
    ("rope+alibi+cope", "exactly two kinds"),
    ("rope+sin_cos", "absolute embedding"),
    ("learnt+alibi", "absolute embedding"),
    ("rope+randomized_rope", "randomizes the positions"),
    ("randomized_alibi+rope", "randomizes the positions"),
    ("rope+bifocal", "already a mix"),
    ("rope+spiral", "'spiral' is not a position kind"),
    ("rope+", "'' is not a position kind"),
])
def test_refusals_name_the_kind(kind, why):
  with pytest.raises(ValueError, match=rf"^position\.kind='{kind.replace('+', '[+]')}': .*{why}"):
    positions.get(kind)
  assert not positions.is_valid_kind(kind)


def test_head_split():
  assert mixed.head_split(_position("rope+alibi"), num_heads=4) == (2, 2)
  assert mixed.head_split(_position("rope+alibi"), num_heads=5) == (2, 3)
  assert mixed.head_split(_position("rope+alibi", mixed_heads=-1), num_heads=4) == (2, 2)
  assert mixed.head_split(_position("rope+alibi", mixed_heads=3), num_heads=4) == (3, 1)
  for bad in (0, 4, -2, True):  # True would be 1 head to Python
    with pytest.raises(ValueError, match=rf"position\.mixed_heads={bad}: must be -1"):
      mixed.head_split(_position("rope+alibi", mixed_heads=bad), num_heads=4)
  with pytest.raises(ValueError, match=r"position\.mixed_heads=None"):
    mixed.head_split(_position("rope+alibi"), num_heads=1)  # no heads left for alibi


def test_config_validation():
  config = helpers.tiny_config({"position.kind": "rope+cope"})
  config_lib.validate(config, num_devices=1)
  config.position.mixed_heads = 4
  with pytest.raises(config_lib.ConfigError, match=r"config\.position\.mixed_heads=4"):
    config_lib.validate(config, num_devices=1)
  config.position.mixed_heads = None
  config.position.kind = "rope+sin_cos"
  with pytest.raises(config_lib.ConfigError, match=r"config\.position\.kind='rope\+sin_cos'"):
    config_lib.validate(config, num_devices=1)
  config = configs.load_file(helpers.ROOT / "configs" / "reverse_string.py", "tiny")
  config.position.kind = "rope+fire"
  with pytest.raises(
      config_lib.ConfigError, match=r"config\.position\.kind='rope\+fire': not defined for the "
      r"bidirectional encoder \(fire: "):
    config_lib.validate(config, num_devices=1)
  config.position.kind = "rope+alibi"
  config_lib.validate(config, num_devices=1)


def _shared(kind, position, causal, num_heads):
  builder = positions.get(kind).shared
  return None if builder is None else builder(position, d_model=D, num_heads=num_heads,
                                              head_dim=HEAD_DIM, causal=causal, rngs=nnx.Rngs(3))


def _pure_layers(layer, position, shared, causal):
  """The two pure-kind layers of a mixed `layer`, each given the mixed layer's
  QKV and output weights of its heads and its group's position modules."""
  pures, start = [], 0
  for kind in layer.group_kinds:
    group = layer.groups[kind]
    stop = start + group.num_heads
    pure_position = position.copy_and_resolve_references()
    pure_position.kind = kind
    pure = attention.Attention(D, group.num_heads, HEAD_DIM, pure_position, causal=causal,
                               rngs=nnx.Rngs(7))
    pure.qkv_DxTxHxK[...] = layer.qkv_DxTxHxK[:, :, start:stop]
    pure.out_HxKxD[...] = layer.out_HxKxD[start:stop]
    for name in ("rope", "position"):
      if getattr(group, name) is not None:
        nnx.update(getattr(pure, name), nnx.state(getattr(group, name)))
    pures.append((pure, None if shared is None else shared.get(kind)))
    start = stop
  return pures


@pytest.mark.parametrize("kind, causal, mixed_heads", [
    ("rope+alibi", True, None),
    ("rope+alibi", False, 1),
    ("rope+cope", True, None),
    ("spectral+alibi", True, 3),
    ("rope+t5", True, None),
    ("t5+rope", False, 1),
    ("nope+fire", True, None),
])
def test_mixed_layer_is_its_pure_layers_on_their_heads(kind, causal, mixed_heads):
  """The output projection sums over heads, so the mixed layer's output is the
  sum of its two pure-kind layers' (each on its heads' slice of the weights)."""
  position = _position(kind, mixed_heads=mixed_heads)
  layer = attention.Attention(D, HEADS, HEAD_DIM, position, causal=causal, rngs=nnx.Rngs(0))
  shared = _shared(kind, position, causal, HEADS)
  if kind.startswith("spectral"):  # off geometric, so the spectral heads are not plain rope
    log_f = layer.groups["spectral"].rope.log_frequency
    log_f[...] = log_f[...] + jax.random.normal(jax.random.key(5), log_f.shape)
  x = jax.random.normal(jax.random.key(1), (2, LENGTH, D))
  positions_BxL = jnp.arange(LENGTH)[None]
  valid = jnp.arange(LENGTH)[None, :] < jnp.array([[LENGTH], [LENGTH - 3]])
  got = layer(x, positions_BxL, valid, shared=shared)
  pures = _pure_layers(layer, position, shared, causal)
  want = sum(p(x, positions_BxL, valid, shared=s) for p, s in pures)
  np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)
  # Not trivially so: the two groups' schemes differ on their heads.
  (first, _), (second, _) = pures
  assert first.num_heads + second.num_heads == HEADS
  swapped = attention.Attention(D, HEADS, HEAD_DIM, _position(first.kind), causal=causal,
                                rngs=nnx.Rngs(0))
  swapped.qkv_DxTxHxK[...], swapped.out_HxKxD[...] = layer.qkv_DxTxHxK[...], layer.out_HxKxD[...]
  if first.kind != "t5":
    assert not np.allclose(swapped(x, positions_BxL, valid), got, atol=1e-4)


def _param_grads(module, fn):
  grads = nnx.grad(lambda m: fn(m))(module)
  return {
      "/".join(map(str, path)): np.abs(np.asarray(v)).sum()
      for path, v in nnx.to_flat_state(nnx.state(grads, nnx.Param))
  }


@pytest.mark.parametrize("kind", ["spectral+cope", "fire+spectral"])
def test_gradients_reach_both_schemes(kind):
  position = _position(kind)
  layer = attention.Attention(D, HEADS, HEAD_DIM, position, causal=True, rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(1), (2, LENGTH, D))
  grads = _param_grads(layer, lambda m: jnp.sum(jnp.sin(m(x, jnp.arange(LENGTH)[None]))))
  other = kind.replace("spectral", "").strip("+")
  spectral = [v for k, v in grads.items() if k.startswith("groups/spectral/rope")]
  others = [v for k, v in grads.items() if k.startswith(f"groups/{other}/position")]
  assert spectral and others, grads.keys()
  assert all(v > 0 for v in spectral + others), grads


def _model(kind, causal=True, **keys):
  cfg = model_lib.default_model_config()
  cfg.d_model, cfg.num_heads = D, HEADS
  return model_lib.Transformer(cfg, _position(kind, **keys), vocab_size=11, causal=causal,
                               rngs=nnx.Rngs(0))


def test_shared_module_per_group_and_its_gradient():
  model = _model("alibi+kerple_log", mixed_heads=1)
  assert isinstance(model.position, mixed.Shared)
  assert model.position.get("alibi") is None
  kerple = model.position.get("kerple_log")
  assert {v.shape for v in jax.tree.leaves(nnx.state(kerple, nnx.Param))} == {(3,)}
  tokens = jnp.arange(LENGTH)[None] % 11
  grads = _param_grads(model, lambda m: jnp.sum(jax.nn.log_softmax(m(tokens))[..., 0]))
  kerple_grads = [v for k, v in grads.items() if k.startswith("position/by_kind/kerple_log")]
  assert kerple_grads and all(v > 0 for v in kerple_grads), grads.keys()


def test_spectral_frequencies_and_surgery():
  model = _model("spectral+alibi", mixed_heads=3)
  pairs = HEAD_DIM // 2
  assert model_lib.spectral_frequencies(model).shape == (2, 3, pairs)
  assert model_lib.spectral_frequencies(_model("rope+alibi")) is None
  # Surgery swaps a mixed layer's fixed rope (in its rotary group) for a
  # spectral one, per head of that group, and computes the same function.
  model = _model("rope+cope")
  tokens = jnp.arange(LENGTH)[None] % 11
  before = model(tokens)
  assert surgery.spectralize(model, per_head=True) == 2  # one per layer
  np.testing.assert_allclose(model(tokens), before, atol=1e-5)
  assert model_lib.spectral_frequencies(model).shape == (2, HEADS // 2, pairs)
  with pytest.raises(ValueError, match="found no"):
    surgery.spectralize(_model("alibi+cope"))


@pytest.mark.slow
@pytest.mark.parametrize("config_file, kind", [("dyck.py", "rope+cope"),
                                               ("reverse_string.py", "spectral+t5")])
def test_mixed_kind_trains(config_file, kind):
  from test_positions_train import _config, _losses  # pylint: disable=g-import-not-at-top
  loss = _losses(_config(config_file, kind, buckets=(40,)), 6)
  assert np.all(np.isfinite(loss)), loss
  assert loss[-2:].mean() < loss[:2].mean(), loss
