"""A few training steps of every `position.kind` on Dyck (the decoder) and on
`reverse_string` (the encoder), exact resume of a randomized kind, and 8
sharded devices against one for a kind of each interface. All slow (one
compile per kind); `test_positions.py` has the fast checks."""

import json

import jax
import numpy as np
import pytest

import helpers
from bifocal_jax.training import config as config_lib
from bifocal_jax import configs
from bifocal_jax.nn import positions
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps
from bifocal_jax.tasks import pipeline

pytestmark = pytest.mark.slow

KINDS = positions.POSITION_KINDS
DECODER_KINDS = [k for k in KINDS if positions.get(k).decoder]
ENCODER_KINDS = [k for k in KINDS if positions.get(k).encoder]


def _losses(config, num_steps):
  mesh = sharding_lib.make_mesh(config.mesh)
  with jax.set_mesh(mesh):
    s, state = state_lib.setup(config, mesh)
    step_fn = steps.make_train_step(s)
    data = iter(pipeline.train_dataset(s.task, batch_size_per_process=config.batch_size,
                                       seed=config.seed, buckets=tuple(config.buckets)))
    out = []
    for _ in range(num_steps):
      state, m = step_fn(state, steps.to_global_batch(next(data), mesh))
      out.append(float(m["loss"]))
  return np.asarray(out)


def _config(config_file, kind, **overrides):
  config = configs.load_file(helpers.ROOT / "configs" / config_file, "tiny")
  config.position.kind = kind
  config.position.max_position = 256
  config.warmup_steps, config.learning_rate = 0, 3e-3
  for key, value in overrides.items():
    *parents, name = key.split(".")
    node = config
    for parent in parents:
      node = node[parent]
    node[name] = value
  config_lib.validate(config, num_devices=jax.device_count())
  return config


@pytest.mark.parametrize("config_file, kind", [("dyck.py", k) for k in DECODER_KINDS] +
                         [("reverse_string.py", k) for k in ENCODER_KINDS])
def test_every_kind_trains(config_file, kind):
  loss = _losses(_config(config_file, kind, buckets=(40,)), 6)
  assert np.all(np.isfinite(loss)), loss
  assert loss[-2:].mean() < loss[:2].mean(), loss


def test_resume_is_bitwise_for_randomized_alibi(tmp_path):
  """randomized_alibi draws its distances from the step's rng: a run stopped
  at step 6 and resumed matches the uninterrupted run exactly."""
  config = helpers.tiny_config({"position.kind": "randomized_alibi", "position.max_position": 256,
                                "steps": 12, "checkpoint_every": 6, "eval_every": 12})
  whole, resumed = helpers.whole_and_resumed(config, tmp_path, stop_at=6)
  assert resumed == whole


SHARDED = ("learnt", "t5", "fire", "fox")  # absolute; shared bias; per-layer bias; attention
SHARDED_CODE = """
import json
import test_positions_train as t
out = {{}}
for kind in {kinds!r}:
  config = t._config("dyck.py", kind, buckets=(40,), **{{"mesh.data": 4, "mesh.model": 2}})
  out[kind] = t._losses(config, 4).tolist()
print("LOSSES", json.dumps(out))
"""


def test_eight_sharded_devices_equal_one(compilation_cache_env):
  stdout = helpers.run_python(SHARDED_CODE.format(kinds=SHARDED), devices=8,
                              **compilation_cache_env)
  sharded = json.loads(stdout.split("LOSSES", 1)[1])
  for kind in SHARDED:
    one = _losses(_config("dyck.py", kind, buckets=(40,)), 4)
    np.testing.assert_allclose(sharded[kind], one, rtol=1e-4, err_msg=kind)


