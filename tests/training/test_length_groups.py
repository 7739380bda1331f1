"""Length groups (`length_groups.py`, `config.data.length_groups`): the
pipeline's groups hold the batch's rows sorted by length, each padded to its
own bucket; the grouped step computes the plain step's update (every position
kind that draws nothing, to float rounding); a grouped run trains and resumes
exactly; bad settings fail with the key named."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import helpers
from bifocal_jax.training import config as config_lib
from bifocal_jax.training import length_groups, sharding, steps
from bifocal_jax.nn import positions
from bifocal_jax import tasks
from bifocal_jax.training import metrics as metrics_lib
from bifocal_jax.training import workdir as workdir_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax.tasks import pipeline

BUCKETS = (16, 24, 40)


def listops():
  """`listops_depth` as the training configs have it (strings up to 100 tokens)."""
  return tasks.get_task(tasks.default_task_config("listops_depth"))


LISTOPS_BUCKETS = pipeline.length_buckets(100)


def tiny_listops(overrides: dict):
  """`configs/listops_depth.py:tiny` (strings up to 40 tokens) with the test overrides."""
  return helpers.tiny_config({"buckets": BUCKETS, **overrides}, "listops_depth.py")


def batches(task, groups, *, steps_=4, batch_size=8, buckets=BUCKETS, **kwargs):
  data = iter(pipeline.train_dataset(task, batch_size_per_process=batch_size, seed=2,
                                     buckets=buckets, length_groups=groups, **kwargs))
  return [next(data) for _ in range(steps_)]


def test_groups_hold_the_batch_rows_shortest_first_each_in_its_own_bucket():
  task, buckets = listops(), LISTOPS_BUCKETS
  assert buckets[-1] == task.max_sequence_length("train")
  plain = batches(task, 1, steps_=6, batch_size=16, buckets=buckets)
  grouped = batches(task, 4, steps_=6, batch_size=16, buckets=buckets)
  saved = 0
  for whole, groups in zip(plain, grouped):
    assert isinstance(groups, tuple) and len(groups) == 4
    assert sorted(np.concatenate([g["index"] for g in groups])) == sorted(whole["index"])
    lengths = [g["length"] for g in groups]
    assert all(a.max() <= b.min() for a, b in zip(lengths, lengths[1:]))
    for group in groups:
      assert group["inputs"].shape[0] == 4
      width = group["inputs"].shape[1]
      assert width == min(b for b in buckets if b >= group["length"].max())
      rows = {int(i): r for r, i in enumerate(whole["index"])}
      for key in ("inputs", "targets", "mask", "loss_mask", "valid"):
        np.testing.assert_array_equal(  # the plain batch's rows, less padding
            group[key], whole[key][[rows[int(i)] for i in group["index"]], :width])
        assert not whole[key][[rows[int(i)] for i in group["index"]], width:].any()
    saved += whole["inputs"].size - sum(g["inputs"].size for g in groups)
  assert saved > 0.3 * sum(b["inputs"].size for b in plain)  # ListOps: most of it is padding


def test_processes_together_see_the_groups_of_one_process():
  task = listops()
  single = batches(task, 2, batch_size=8, buckets=LISTOPS_BUCKETS)
  shards = [batches(task, 2, batch_size=4, buckets=LISTOPS_BUCKETS, process_index=p,
                    process_count=2) for p in range(2)]
  for step, groups in enumerate(single):
    for g, group in enumerate(groups):
      for key in ("inputs", "targets", "index"):
        parts = [shard[step][g][key] for shard in shards]
        np.testing.assert_array_equal(np.concatenate(parts), group[key])  # and widths agree


def test_bad_length_groups_are_named():
  task = listops()
  for groups, why in ((0, "positive integer"), (True, "positive integer"), (3, "must divide")):
    with pytest.raises(ValueError, match=f"data.length_groups={groups!r}: .*{why}"):
      batches(task, groups, steps_=1, buckets=LISTOPS_BUCKETS)


def test_throughput_counts_each_groups_padded_shape():
  """MFU counts what the step computed: each group at its own width."""
  batch = lambda rows, width, real: dict(valid=np.arange(width) < np.full((rows, 1), real))
  meter = metrics_lib.Throughput(flops_per_token=lambda width: 10.0 * width, peak_flops=1.0)
  meter.count(batch(4, 40, 30))
  meter.count((batch(2, 16, 10), batch(2, 40, 30)))
  assert meter.steps == 2 and meter.tokens == 4 * 30 + 2 * 10 + 2 * 30
  assert meter.flops == 4 * 40 * 400 + 2 * 16 * 160 + 2 * 40 * 400
  assert meter.rates()["mfu"] > 0


def test_a_run_resumes_with_other_length_groups_or_from_before_they_existed():
  """Length groups change the order of float sums, not the experiment: a
  workdir written without the key, or with other groups, resumes with them."""
  new = workdir_lib.config_to_json(tiny_listops({"data.length_groups": 4}))
  old = json.loads(json.dumps(new))
  del old["data"]["length_groups"]
  assert workdir_lib.config_differences(old, new) == []
  assert workdir_lib.config_differences(
      workdir_lib.config_to_json(tiny_listops({"data.length_groups": 2})), new) == []
  other = workdir_lib.config_to_json(tiny_listops({"data.length_groups": 4, "seed": 7}))
  assert workdir_lib.config_differences(new, other) == ["seed: 0 -> 7"]


def grouped_and_plain(kind, num_steps, **overrides):
  """`num_steps` of the plain and of the grouped step from the same initial
  state on the same ListOps batches: for each, `(final state, step metrics)`,
  and the grouped step and the group widths it saw."""
  config = tiny_listops({"position.kind": kind, "position.max_position": 256, "batch_size": 8,
                         **overrides})
  config_lib.validate(config, num_devices=1)
  task = tasks.get_task(config.task)
  mesh = sharding.make_mesh(config.mesh)
  out = {}
  with jax.set_mesh(mesh):
    for groups in (1, 4):
      s, state = state_lib.setup(config, mesh, task=task)
      step = length_groups.TrainStep(s) if groups > 1 else steps.make_train_step(s)
      history, widths = [], set()
      for batch in batches(task, groups, steps_=num_steps):
        state, metrics = step(state, steps.to_global_batch(batch, mesh))
        history.append(jax.device_get(metrics))
        widths |= {g["inputs"].shape[1] for g in batch} if groups > 1 else set()
      out[groups] = (jax.device_get(state), history)
  return out[1], out[4], step, widths


def test_grouped_steps_are_the_plain_steps_and_compile_once_per_width():
  """Spectral Evolution live from the first step: the grouped updates, the
  loss, counts and the recorded frequency trajectory match the plain step's;
  `accumulate` compiled once per group width, `apply` once."""
  (plain, plain_metrics), (grouped, grouped_metrics), step, widths = grouped_and_plain(
      "bifocal", 4, **{"spectral.freeze_steps": 0, "spectral.record_every": 1})
  for a, b in zip(plain_metrics, grouped_metrics):
    for key in ("loss_weight", "token_correct", "token_total", "skipped"):
      assert a[key] == b[key], key
    for key in ("loss", "grad_norm", "spectral_grad_norm", "spectral_drift"):
      np.testing.assert_allclose(b[key], a[key], rtol=2e-5, err_msg=key)
  assert int(grouped["step"]) == 4 and int(grouped["trajectory"]["count"]) == 5
  np.testing.assert_allclose(grouped["trajectory"]["frequencies"],
                             plain["trajectory"]["frequencies"], rtol=1e-5)
  drift = max(jax.tree.leaves(jax.tree.map(lambda a, b: np.abs(a - b).max(), plain["params"],
                                           grouped["params"])))
  assert 0 < drift < 1e-5  # the same updates, summed in another order
  assert len(widths) >= 2
  assert step.accumulate._cache_size() == len(widths)  # pylint: disable=protected-access
  assert step.apply._cache_size() == 1  # pylint: disable=protected-access


@pytest.mark.parametrize("kind, draws", [("randomized_rope", True), ("rope", False)])
def test_each_group_draws_positions_from_its_own_key(kind, draws):
  """A kind that draws positions draws a group's from the step's key folded
  with the group index: the same rows as group 0 and as group 1 score
  differently; a kind that draws nothing, the same."""
  config = tiny_listops({"position.kind": kind, "position.max_position": 256, "batch_size": 4})
  task = tasks.get_task(config.task)
  mesh = sharding.make_mesh(config.mesh)
  batch = steps.to_global_batch(batches(task, 1, steps_=1, batch_size=4)[0], mesh)
  with jax.set_mesh(mesh):
    s, state = state_lib.setup(config, mesh, task=task)
    add = jax.jit(lambda params, group: length_groups.accumulate(
        s, jax.random.key(0), length_groups.zeros(params), params, 3, batch, group))
    sums = [float(add(state["params"], np.int32(g))["sums"]["loss_sum"]) for g in (0, 1)]
  assert (sums[0] != sums[1]) == draws, sums


@pytest.mark.slow
def test_grouped_run_trains_and_resumes_exactly(tmp_path):
  """`train_and_evaluate` with length groups (its programs precompiled): a
  run stopped at step 6 and resumed logs what the uninterrupted run logs."""
  config = tiny_listops({"data.length_groups": 2, "steps": 12, "checkpoint_every": 6,
                         "eval_every": 12})
  records, resumed = helpers.whole_and_resumed(config, tmp_path, stop_at=6)
  assert [r["step"] for r in records] == list(range(1, 13))
  assert resumed == records
  assert records[-1]["loss"] < records[0]["loss"]


DETERMINISTIC_DECODER_KINDS = [k for k in positions.POSITION_KINDS
                               if positions.get(k).decoder and not k.startswith("randomized")]


@pytest.mark.slow
@pytest.mark.parametrize("kind", DETERMINISTIC_DECODER_KINDS)
def test_no_kind_depends_on_the_padding(kind):
  """What length groups rest on, for each position kind that draws nothing:
  the summed loss of a group's rows and its gradient are the same padded to
  the group's bucket as padded to the whole batch's."""
  config = tiny_listops({"position.kind": kind, "position.max_position": 256, "batch_size": 4})
  task = tasks.get_task(config.task)
  mesh = sharding.make_mesh(config.mesh)
  # The first short group of a batch padded to a longer bucket.
  plain, group = next((p, g[0]) for p, g in zip(batches(task, 1, steps_=16, batch_size=4),
                                                batches(task, 2, steps_=16, batch_size=4))
                      if p["inputs"].shape[1] > g[0]["inputs"].shape[1])
  width = plain["inputs"].shape[1]
  padded = {k: np.pad(v, [(0, 0), (0, width - v.shape[1])]) if v.ndim == 2 else v
            for k, v in group.items()}
  with jax.set_mesh(mesh):
    s, state = state_lib.setup(config, mesh, task=task)
    terms = jax.jit(jax.value_and_grad(
        lambda params, batch: length_groups.group_terms(s, params, batch, jax.random.key(0))[0]))
    (short_loss, short_grads), (long_loss, long_grads) = (
        terms(state["params"], steps.to_global_batch(b, mesh)) for b in (group, padded))
  np.testing.assert_allclose(short_loss, long_loss, rtol=1e-6)
  norm = lambda tree: np.sqrt(sum(float(jnp.sum(jnp.square(x))) for x in jax.tree.leaves(tree)))
  difference = jax.tree.map(lambda a, b: a - b, short_grads, long_grads)
  assert norm(difference) < 1e-5 * norm(long_grads)
