"""Golden regression: the numbers of the first train steps of a tiny config.

Recorded once (2026-11-30, jax 0.12.0.1 on x86-64 CPU) from the trainer as it
was before the trainer split of issue #17, so that a refactor, or a change to
the hand-written backward passes (attention, rotary angles, LayerNorm), cannot
change what training computes without this test saying so. The tolerances admit the
rounding differences of another CPU's vector units, and of XLA's optimisations
(recorded from optimised programs; the tests compile with most optimisations
off, `conftest.py`, and one test here checks the optimised programs users run),
not a different gradient.
To re-record after an intended change: run this file with `GOLDEN_PRINT=1`
and paste the printed table.
"""

import json
import os

import jax
import numpy as np
import pytest

import helpers
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps
from bifocal_jax.tasks import pipeline

# step: (loss, grad_norm, spectral_grad_norm, sum of params, sum of squared params)
GOLDEN = {
    "bifocal": {
        1: (3.822549343109131, 4.381911277770996, 0.34548574686050415, 66.25746051009628,
            507.89682066119417),
        10: (1.593170404434204, 1.6207598447799683, 0.033783573657274246, 66.70647143064161,
             511.23177945177713),
    },
    "randomized_rope": {  # re-recorded: one draw per batch, anew in every layer (the source's)
        1: (3.6007344722747803, 4.221705913543701, 0.0, 93.90848437763634, 359.6270431990011),
        10: (1.687212347984314, 1.6240894794464111, 0.0, 93.72639636124183, 360.9207413141613),
    },
}


def _checksums(params) -> tuple[float, float]:
  leaves = [np.asarray(x, np.float64) for x in jax.tree.leaves(jax.device_get(params))]
  return sum(float(x.sum()) for x in leaves), sum(float((x * x).sum()) for x in leaves)


def _run(kind: str, num_steps: int) -> dict[int, tuple[float, ...]]:
  config = helpers.tiny_config({"position.kind": kind, "spectral.freeze_steps": 0})
  mesh = sharding_lib.make_mesh(config.mesh)
  with jax.set_mesh(mesh):
    s, state = state_lib.setup(config, mesh)
    step_fn = steps.make_train_step(s)
    data = iter(pipeline.train_dataset(s.task, batch_size_per_process=config.batch_size,
                                       seed=config.seed, buckets=tuple(config.buckets)))
    out = {}
    for step in range(1, num_steps + 1):
      state, m = step_fn(state, steps.to_global_batch(next(data), mesh))
      if step in (1, num_steps):
        m = jax.device_get(m)
        out[step] = (float(m["loss"]), float(m["grad_norm"]), float(m["spectral_grad_norm"]),
                     *_checksums(state["params"]))
  return out


@pytest.mark.parametrize("kind", sorted(GOLDEN))
def test_first_steps_match_the_recorded_numbers(kind):
  got = _run(kind, num_steps=10)
  if os.environ.get("GOLDEN_PRINT"):
    print({kind: got})
  assert set(got) == set(GOLDEN[kind])
  for step, expected in GOLDEN[kind].items():
    # Step 1 is a single forward/backward pass; step 10 has compounded nine updates.
    rtol = 1e-5 if step == 1 else 1e-4
    np.testing.assert_allclose(got[step], expected, rtol=rtol, err_msg=f"{kind} step {step}")


OPTIMISED = """
import json
import test_golden
print("GOT", json.dumps(test_golden._run("bifocal", num_steps=10)))
"""


def test_the_optimised_programs_users_run_match_too():
  """The suite compiles with most of XLA's optimisations off (`conftest.py`);
  users' runs compile with them on. The bifocal kind's numbers from those, in
  a fresh process without a compilation cache (the flag is not part of its
  key, so a shared cache could hand back the other kind of program)."""
  stdout = helpers.run_python(OPTIMISED, JAX_DISABLE_MOST_OPTIMIZATIONS="0")
  got = {int(step): values for step, values in json.loads(stdout.split("GOT", 1)[1]).items()}
  for step, expected in GOLDEN["bifocal"].items():
    np.testing.assert_allclose(got[step], expected, rtol=1e-5 if step == 1 else 1e-4,
                               err_msg=f"optimised, step {step}")
