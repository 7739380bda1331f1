"""Spectral Evolution optimizer: its own group, schedule, freeze, no weight decay."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from bifocal_jax.nn import optim
from bifocal_jax.nn.rope import BifocalRoPE, SpectralFrequency, SpectralRoPE

HEAD_DIM = 8


class Tiny(nnx.Module):
  """A projection then a spectral rope: both groups get gradients."""

  def __init__(self, rngs: nnx.Rngs):
    self.proj = nnx.Linear(HEAD_DIM, HEAD_DIM, rngs=rngs)
    self.rope = SpectralRoPE(theta=100.0, embedding_size=HEAD_DIM)

  def __call__(self, x):
    return self.rope(self.proj(x))


def _batch():
  kx, ky = jax.random.split(jax.random.key(1))
  return (jax.random.normal(kx, (2, 6, HEAD_DIM)), jax.random.normal(ky, (2, 6, HEAD_DIM)))


def _loss(model, x, y):
  return jnp.mean((model(x) - y) ** 2)


def test_spectral_schedule_freezes_then_warms_up_then_holds():
  lr, warmup, freeze = 0.3, 4, 3
  schedule = optim.spectral_schedule(lr, warmup_steps=warmup, freeze_steps=freeze)
  values = np.array([schedule(s) for s in range(12)])
  assert np.all(values[:freeze] == 0)
  ramp = values[freeze:freeze + warmup]
  assert np.all(np.diff(ramp) > 0) and ramp[0] > 0
  np.testing.assert_allclose(values[freeze + warmup - 1:], lr, rtol=1e-6)
  no_warmup = optim.spectral_schedule(lr)
  np.testing.assert_allclose(no_warmup(0), lr, rtol=1e-6)


def test_base_schedule_warmup_then_cosine_to_end_fraction():
  schedule = optim.base_schedule(1.0, warmup_steps=5, total_steps=50, end_fraction=0.1)
  values = np.array([schedule(s) for s in range(60)])
  assert values[0] == 0
  assert np.argmax(values) == 5
  np.testing.assert_allclose(values[5], 1.0, rtol=1e-6)
  assert np.all(np.diff(values[5:50]) <= 0)
  np.testing.assert_allclose(values[50:], 0.1, rtol=1e-5)


@pytest.mark.parametrize("call, match", [
    (lambda: optim.base_schedule(1.0, warmup_steps=10, total_steps=10), "total_steps"),
    (lambda: optim.spectral_schedule(1.0, freeze_steps=-1), "freeze_steps"),
    (lambda: optim.spectral_schedule(1.0, warmup_steps=1.5), "warmup_steps"),
    (lambda: optim.spectral_evolution(optax.sgd(1.0), spectral_learning_rate=lambda s: 1.0,
                                      warmup_steps=3), "warmup_steps"),
    (lambda: optim.spectral_evolution(optax.sgd(1.0), spectral_learning_rate=1.0,
                                      clip_norm=0.0), "clip_norm"),
])
def test_bad_arguments_raise(call, match):
  with pytest.raises(ValueError, match=match):
    call()


def test_spectral_labels_nnx_state_pure_state_and_linen_dict():
  class Named(nnx.Module):
    def __init__(self):
      self.bifocal = BifocalRoPE(embedding_size=HEAD_DIM, num_heads=2)
      self.renamed = SpectralFrequency(jnp.zeros(3))  # found by type, not name
  model = nnx.Dict(tiny=Tiny(nnx.Rngs(0)), named=Named())
  state = nnx.state(model, nnx.Param)
  labels = optim.spectral_labels(state)
  flat = {jax.tree_util.keystr(p): l for p, l in jax.tree_util.tree_leaves_with_path(labels)}
  assert flat == {
      "['named']['bifocal']['log_frequency']": "spectral",
      "['named']['renamed']": "spectral",
      "['tiny']['proj']['bias']": "base",
      "['tiny']['proj']['kernel']": "base",
      "['tiny']['rope']['log_frequency']": "spectral",
  }
  # The pure arrays `nnx.Optimizer` hands to `tx.update` have lost the type:
  # the name `log_frequency` still selects them.
  pure = optim.spectral_labels(nnx.as_pure(nnx.state(Tiny(nnx.Rngs(0)), nnx.Param)))
  assert pure["rope"]["log_frequency"] == "spectral" and pure["proj"]["kernel"] == "base"
  linen = {"params": {"Dense_0": {"kernel": jnp.ones((2, 2))},
                      "rope": {"log_frequency": jnp.zeros(4)}}}
  assert optim.spectral_labels(linen) == {
      "params": {"Dense_0": {"kernel": "base"}, "rope": {"log_frequency": "spectral"}}}
  custom = optim.spectral_labels(linen, lambda path, leaf: jnp.ndim(leaf) == 2)
  assert custom["params"]["Dense_0"]["kernel"] == "spectral"


def _functional_steps(tx, model, num_steps, grad_fn=None):
  """The trainer's path: nnx.split, tx.init/update, apply_updates under jit."""
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  x, y = _batch()

  @jax.jit
  def step(params, opt_state):
    grads = jax.grad(lambda p: _loss(nnx.merge(graphdef, p, rest), x, y))(params)
    if grad_fn is not None:
      grads = grad_fn(grads)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  opt_state = tx.init(params)
  history = [params]
  for _ in range(num_steps):
    params, opt_state = step(params, opt_state)
    history.append(params)
  return history


def test_functional_path_freezes_bitwise_then_moves_at_configured_rate():
  spectral_lr, freeze = 0.05, 2
  tx, schedules = optim.default_optimizer(
      learning_rate=1e-2, weight_decay=0.1, warmup_steps=0, total_steps=100,
      spectral_learning_rate=spectral_lr, spectral_warmup_steps=0,
      spectral_freeze_steps=freeze)
  history = _functional_steps(tx, Tiny(nnx.Rngs(0)), freeze + 1)
  log_freqs = [np.asarray(p["rope"]["log_frequency"][...]) for p in history]
  kernels = [np.asarray(p["proj"]["kernel"][...]) for p in history]
  for t in range(1, freeze + 1):
    np.testing.assert_array_equal(log_freqs[t], log_freqs[0])  # bitwise
    assert not np.array_equal(kernels[t], kernels[t - 1])
  assert isinstance(history[-1]["rope"]["log_frequency"], SpectralFrequency)
  # First released step: Adam's first update is sign(g) (bias-corrected), so
  # every frequency moves by the configured spectral learning rate.
  np.testing.assert_allclose(np.abs(log_freqs[-1] - log_freqs[0]), spectral_lr, rtol=1e-3)
  assert float(schedules["spectral_learning_rate"](freeze)) == pytest.approx(spectral_lr)
  assert float(schedules["spectral_learning_rate"](freeze - 1)) == 0.0


def test_freeze_holds_even_with_non_finite_spectral_gradients():
  tx = optim.spectral_evolution(optax.sgd(0.1), spectral_learning_rate=0.1, freeze_steps=3)
  poison = lambda g: g | {"rope": jax.tree.map(lambda a: jnp.full_like(a, jnp.nan), g["rope"])}
  history = _functional_steps(tx, Tiny(nnx.Rngs(0)), 3, grad_fn=poison)
  np.testing.assert_array_equal(np.asarray(history[-1]["rope"]["log_frequency"][...]),
                                np.asarray(history[0]["rope"]["log_frequency"][...]))
  assert np.all(np.isfinite(np.asarray(history[-1]["proj"]["kernel"][...])))


def test_no_weight_decay_reaches_the_frequencies():
  # Zero gradients: only decoupled weight decay could move anything.
  tx = optim.spectral_evolution(
      optax.adamw(0.1, weight_decay=0.5), spectral_learning_rate=0.1)
  history = _functional_steps(tx, Tiny(nnx.Rngs(0)), 2, grad_fn=lambda g: jax.tree.map(
      jnp.zeros_like, g))
  first, last = history[0], history[-1]
  np.testing.assert_array_equal(np.asarray(last["rope"]["log_frequency"][...]),
                                np.asarray(first["rope"]["log_frequency"][...]))
  shrink = np.abs(np.asarray(last["proj"]["kernel"][...])) / np.abs(
      np.asarray(first["proj"]["kernel"][...]))
  np.testing.assert_allclose(shrink, (1 - 0.1 * 0.5) ** 2, rtol=1e-5)


def test_spectral_clipping_is_its_own():
  # Huge spectral gradients must not shrink the base update through a shared
  # global norm; the base group is plain SGD so its step is exactly -lr * g.
  tx = optim.spectral_evolution(optax.sgd(1.0), spectral_learning_rate=0.1, clip_norm=1e-3)
  scale = lambda g: g | {"rope": jax.tree.map(lambda a: 1e6 * a, g["rope"])}
  plain = _functional_steps(tx, Tiny(nnx.Rngs(0)), 1)
  scaled = _functional_steps(tx, Tiny(nnx.Rngs(0)), 1, grad_fn=scale)
  np.testing.assert_array_equal(np.asarray(plain[1]["proj"]["kernel"][...]),
                                np.asarray(scaled[1]["proj"]["kernel"][...]))


def test_nnx_optimizer_path():
  spectral_lr = 0.02
  model = Tiny(nnx.Rngs(0))
  tx, _ = optim.default_optimizer(
      learning_rate=1e-2, weight_decay=0.1, warmup_steps=1, total_steps=10,
      spectral_learning_rate=spectral_lr, spectral_warmup_steps=0, spectral_freeze_steps=1)
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
  x, y = _batch()

  @nnx.jit
  def step(model, optimizer):
    grads = nnx.grad(_loss)(model, x, y)
    optimizer.update(model, grads)

  start = np.asarray(model.rope.log_frequency[...])
  step(model, optimizer)
  np.testing.assert_array_equal(np.asarray(model.rope.log_frequency[...]), start)
  step(model, optimizer)
  np.testing.assert_allclose(np.abs(np.asarray(model.rope.log_frequency[...]) - start),
                             spectral_lr, rtol=1e-3)


def test_linen_params_by_name():
  class LinenTiny(nn.Module):
    @nn.compact
    def __call__(self, x):
      log_frequency = self.param("log_frequency", nn.initializers.zeros, (3,))
      return nn.Dense(3)(x) * jnp.exp(log_frequency)

  model = LinenTiny()
  x = jnp.ones((2, 3))
  params = model.init(jax.random.key(0), x)
  tx = optim.spectral_evolution(optax.sgd(0.0), spectral_learning_rate=0.1)
  opt_state = tx.init(params)
  grads = jax.grad(lambda p: jnp.sum(model.apply(p, x)))(params)
  updates, _ = tx.update(grads, opt_state, params)
  new = optax.apply_updates(params, updates)
  np.testing.assert_allclose(
      np.abs(new["params"]["log_frequency"] - params["params"]["log_frequency"]), 0.1, rtol=1e-3)
  np.testing.assert_array_equal(new["params"]["Dense_0"]["kernel"],
                                params["params"]["Dense_0"]["kernel"])
