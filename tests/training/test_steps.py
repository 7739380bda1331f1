"""The pure parts of the train step (the non-finite policy, the trajectory
record), and its projection of bounded parameters (KERPLE's)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import helpers
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps
from bifocal_jax.nn.positions import kerple
from bifocal_jax.tasks import pipeline


def _state(step=4, bad_step=-1):
  return dict(step=jnp.int32(step), params={"w": jnp.ones(3)}, opt_state={"m": jnp.zeros(3)},
              nonfinite=dict(step=jnp.int32(bad_step), what=jnp.int32(0)))


def _metrics(loss=1.0, grad_norm=1.0, spectral_grad_norm=0.5):
  return dict(loss=jnp.float32(loss), grad_norm=jnp.float32(grad_norm),
              spectral_grad_norm=jnp.float32(spectral_grad_norm))


NEW = ({"w": jnp.full(3, 2.0)}, {"m": jnp.full(3, 7.0)})


@pytest.mark.parametrize("skip", [False, True])
def test_a_finite_update_is_applied(skip):
  params, opt_state, nonfinite, next_step, skipped = steps.guard_nonfinite(
      _state(), *NEW, _metrics(), skip=skip)
  assert float(params["w"][0]) == 2.0 and float(opt_state["m"][0]) == 7.0
  assert int(next_step) == 5 and int(skipped) == 0 and int(nonfinite["step"]) == -1


@pytest.mark.parametrize("metrics, what", [(_metrics(loss=np.nan), 1),
                                           (_metrics(grad_norm=np.inf), 2),
                                           (_metrics(spectral_grad_norm=np.nan), 2)])
def test_error_policy_freezes_the_state_and_names_the_step_and_quantity(metrics, what):
  params, opt_state, nonfinite, next_step, skipped = steps.guard_nonfinite(
      _state(step=4), *NEW, metrics, skip=False)
  assert float(params["w"][0]) == 1.0 and float(opt_state["m"][0]) == 0.0
  assert int(next_step) == 4 and int(skipped) == 1
  assert int(nonfinite["step"]) == 5 and int(nonfinite["what"]) == what
  # Frozen for good: a later finite update is not applied either, and the first bad step stays.
  state = _state(step=4, bad_step=5)
  params, _, nonfinite, next_step, _ = steps.guard_nonfinite(state, *NEW, _metrics(), skip=False)
  assert float(params["w"][0]) == 1.0 and int(next_step) == 4 and int(nonfinite["step"]) == 5


def test_skip_policy_drops_only_the_bad_update():
  params, opt_state, nonfinite, next_step, skipped = steps.guard_nonfinite(
      _state(step=4), *NEW, _metrics(loss=np.nan), skip=True)
  assert float(params["w"][0]) == 1.0 and float(opt_state["m"][0]) == 0.0
  assert int(next_step) == 5 and int(skipped) == 1 and int(nonfinite["step"]) == -1


def test_trajectory_records_every_record_every_steps_and_the_last():
  trajectory = dict(frequencies=jnp.zeros((5, 2)), steps=jnp.zeros(5, jnp.int32),
                    count=jnp.int32(1), start=jnp.ones(2))
  recorded = []
  for step in range(7):
    trajectory = steps.record_trajectory(trajectory, jnp.full(2, float(step + 1)), jnp.int32(step),
                                         jnp.int32(step + 1), record_every=3, last_step=7)
    recorded.append(int(trajectory["count"]))
  assert recorded == [1, 1, 2, 2, 2, 3, 4]
  np.testing.assert_array_equal(trajectory["steps"][:4], [0, 3, 6, 7])
  np.testing.assert_array_equal(trajectory["frequencies"][1:4, 0], [3.0, 6.0, 7.0])
  # A step that did not advance (a frozen state) records nothing.
  same = steps.record_trajectory(trajectory, jnp.zeros(2), jnp.int32(3), jnp.int32(3),
                                 record_every=3, last_step=7)
  assert int(same["count"]) == 4


def test_programs_compiled_in_parallel_run_as_the_jitted_step():
  """`compile_in_parallel` + `Precompiled`: the same results as the jitted function,
  the compiled executable for its shapes, the jitted function for others."""
  traces = []

  def fn(x):
    traces.append(x.shape)
    return jnp.cumsum(x * 2.0, axis=-1)

  jitted = jax.jit(fn)
  jobs = {w: (jitted, (jax.ShapeDtypeStruct((2, w), jnp.float32),)) for w in (3, 5)}
  compiled = steps.compile_in_parallel(jobs, workers=2)
  assert set(compiled) == {3, 5} and sorted(traces) == [(2, 3), (2, 5)]
  assert all(lower >= 0 and xla > 0 for _, lower, xla in compiled.values())
  ran = []

  def spy(w, executable):
    return lambda *args: ran.append(w) or executable(*args)
  step = steps.Precompiled(jitted, {w: spy(w, c[0]) for w, c in compiled.items()},
                           key_fn=lambda x: x.shape[1])
  for w in (3, 5, 4):
    x = jnp.arange(2 * w, dtype=jnp.float32).reshape(2, w)
    np.testing.assert_array_equal(step(x), np.cumsum(np.asarray(x) * 2.0, axis=-1))
  assert ran == [3, 5]  # width 4 went through the jitted function


# Kerple's bounded parameters (`positions.bounded`): the step projects them.
# A learning rate of 10 moves every parameter with a gradient by about 10
# (Adam's first update is about the learning rate), far past KERPLE's bounds.
KERPLE = {"learning_rate": 10.0, "warmup_steps": 0, "weight_decay": 0.1}


def _kerple_config(kind):
  config = helpers.tiny_config({"position.kind": kind, **KERPLE})
  return config, sharding_lib.make_mesh(config.mesh)


@pytest.mark.parametrize("kind, side", [("kerple_log", "lower"), ("kerple_power", "lower"),
                                        ("kerple_power", "upper")])
def test_a_bounded_param_pushed_past_its_bound_restarts_from_it(kind, side):
  """An update pushing `bias_p` past its bound stores the bound itself; the
  next update the other way moves it inside at once (a clip in the forward
  pass only would leave it ~10 past the bound, where that update cannot
  reach). A zero gradient leaves the 1-D `bias_a` as it was: no weight decay."""
  config, mesh = _kerple_config(kind)
  lower, upper = kerple.P_BOUNDS[kind.removeprefix("kerple_")]
  bound = lower if side == "lower" else upper
  push = 1.0 if side == "lower" else -1.0  # a positive gradient lowers p
  with jax.set_mesh(mesh):
    s, state = state_lib.setup(config, mesh)
    apply = jax.jit(lambda state, grads: steps.apply_gradients(s, state, grads, {})[:2])

    def grads(g):
      out = jax.tree.map(jnp.zeros_like, state["params"])
      out["position"]["bias_p"][...] = jnp.full_like(out["position"]["bias_p"][...], g)
      return out

    position = lambda params: {k: np.asarray(v[...]) for k, v in params["position"].items()}
    start = position(state["params"])
    params, opt_state = apply(state, grads(push))
    pushed = position(params)
    np.testing.assert_array_equal(pushed["bias_p"], np.full_like(start["bias_p"], bound))
    params, _ = apply(dict(state, params=params, opt_state=opt_state), grads(-push))
    back = position(params)
  assert np.all(back["bias_p"] > lower) and (upper is None or np.all(back["bias_p"] < upper))
  assert np.all(np.abs(back["bias_p"] - bound) > 0.1), back["bias_p"]  # one step back: ~0.5
  np.testing.assert_array_equal(pushed["bias_a"], start["bias_a"])
  np.testing.assert_array_equal(back["bias_a"], start["bias_a"])


def test_the_train_step_stores_kerple_params_inside_their_bounds():
  """One real train step at learning rate 10: every `bias_p` of the power
  kernel lands on a bound (0.01 or 2) and every `bias_a` at or above 0.01."""
  config, mesh = _kerple_config("kerple_power")
  with jax.set_mesh(mesh):
    s, state = state_lib.setup(config, mesh)
    batch = next(iter(pipeline.train_dataset(s.task, batch_size_per_process=config.batch_size,
                                             seed=config.seed, buckets=tuple(config.buckets))))
    state, metrics = steps.make_train_step(s)(state, steps.to_global_batch(batch, mesh))
  assert int(metrics["skipped"]) == 0 and int(state["step"]) == 1
  p = np.asarray(state["params"]["position"]["bias_p"][...])
  a = np.asarray(state["params"]["position"]["bias_a"][...])
  assert np.all(np.isin(p, np.float32([kerple.EPS, 2.0]))), p
  assert np.all(a >= np.float32(kerple.EPS)), a
