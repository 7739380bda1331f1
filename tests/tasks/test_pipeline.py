"""Grain pipelines: buckets, padding, epochs, fresh examples, one length per batch, process
sharding, checkpointing, evaluation."""

import json
import time

import grain
import numpy as np
import pytest
from etils import epath

from bifocal_jax import tasks
from bifocal_jax.tasks import pipeline

FIELDS = ("inputs", "targets", "mask", "loss_mask", "valid", "length", "depth", "index")


def small_dyck(train_size=1 << 20):
  config = tasks.default_task_config("dyck")
  config.train.size = train_size
  config.valid.size = 50
  return tasks.get_task(config)


def take(iterator, num):
  return [next(iterator) for _ in range(num)]


def test_length_buckets():
  assert pipeline.length_buckets(99) == (16, 32, 64, 99)
  assert pipeline.length_buckets(128) == (16, 32, 64, 128)
  assert pipeline.length_buckets(10) == (10,)
  assert pipeline.length_buckets(501, min_bucket=64) == (64, 128, 256, 501)
  with pytest.raises(ValueError, match="max_length=0"):
    pipeline.length_buckets(0)


def test_train_batches_are_padded_to_the_smallest_bucket():
  task = small_dyck()
  buckets = (64, 80, 99)
  batches = take(iter(pipeline.train_dataset(task, batch_size_per_process=4, seed=0,
                                             buckets=buckets)), 30)
  widths = set()
  for batch in batches:
    assert {k: v.shape[0] for k, v in batch.items()} == {k: 4 for k in FIELDS}
    width = batch["inputs"].shape[1]
    widths.add(width)
    assert width == min(b for b in buckets if b >= batch["length"].max())
    assert batch["inputs"].dtype == np.int32 and batch["mask"].dtype == np.float32
    assert batch["valid"].dtype == bool and batch["index"].dtype == np.int64
    np.testing.assert_array_equal(batch["valid"].sum(1), batch["length"])
    assert (batch["inputs"][~batch["valid"]] == 0).all() and (batch["mask"][~batch["valid"]] == 0).all()
    expected = task.batch("train", batch["index"], width)
    for key in FIELDS:
      np.testing.assert_array_equal(batch[key], expected[key])
  assert widths == set(buckets)  # short batches do get the small buckets.


def test_each_epoch_is_a_fresh_permutation_of_the_split():
  task = small_dyck(train_size=60)
  batches = take(iter(pipeline.train_dataset(task, batch_size_per_process=8, seed=3,
                                             buckets=(99,))), 15)
  order = np.concatenate([b["index"] for b in batches])
  first, second = order[:60], order[60:120]
  assert sorted(first) == sorted(second) == list(range(60))
  assert not np.array_equal(first, second) and not np.array_equal(first, np.arange(60))
  other_seed = take(iter(pipeline.train_dataset(task, batch_size_per_process=8, seed=4,
                                                buckets=(99,))), 1)[0]
  assert not np.array_equal(other_seed["index"], batches[0]["index"])


@pytest.mark.parametrize("process_count", [2, 4])
def test_processes_together_see_what_one_process_would(process_count):
  task = small_dyck()
  global_batch = 8
  single = take(iter(pipeline.train_dataset(task, batch_size_per_process=global_batch, seed=5,
                                            buckets=(32, 64, 99))), 6)
  shards = [take(iter(pipeline.train_dataset(
      task, batch_size_per_process=global_batch // process_count, seed=5, buckets=(32, 64, 99),
      process_index=p, process_count=process_count)), 6) for p in range(process_count)]
  for step, whole in enumerate(single):
    parts = [shard[step] for shard in shards]
    for key in FIELDS:
      np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), whole[key])
  local_indices = [set(np.concatenate([b["index"] for b in shard])) for shard in shards]
  assert all(not a & b for i, a in enumerate(local_indices) for b in local_indices[i + 1:])


@pytest.mark.parametrize("examples,lengths", [("finite", "per_example"), ("fresh", "per_batch")])
def test_iterator_state_restores_mid_stream(tmp_path, examples, lengths):
  task = tasks.get_task(tasks.default_task_config("modular_arithmetic_brackets"))
  buckets = pipeline.length_buckets(task.max_sequence_length("train"))
  make = lambda start_step=0: iter(pipeline.train_dataset(
      task, batch_size_per_process=4, seed=1, buckets=buckets, start_step=start_step,
      examples=examples, lengths=lengths))
  iterator = make()
  take(iterator, 3)
  handler = grain.checkpoint.CheckpointHandler()
  handler.save(epath.Path(tmp_path), args=grain.checkpoint.CheckpointSave(iterator))
  state = json.loads(json.dumps(iterator.get_state()))
  expected = take(iterator, 3)
  restored = handler.restore(epath.Path(tmp_path), args=grain.checkpoint.CheckpointRestore(make()))
  from_state = make()
  from_state.set_state(state)
  started_late = make(start_step=3)
  for other in (restored, from_state, started_late):
    for want, got in zip(expected, take(other, 3)):
      for key in FIELDS:
        np.testing.assert_array_equal(got[key], want[key])


def test_fresh_examples_every_step_past_the_split_size():
  task = tasks.get_task(tasks.default_task_config("stack_manipulation"))
  batches = take(iter(pipeline.train_dataset(task, batch_size_per_process=8, seed=0,
                                             buckets=(48, 82), examples="fresh")), 4)
  for step, batch in enumerate(batches):  # the stream's next 8 indices, whatever the size.
    np.testing.assert_array_equal(batch["index"], step * 8 + np.arange(8))
  small = tasks.default_task_config("stack_manipulation")
  small.train.size = 10
  small_task = tasks.get_task(small)
  late = take(iter(pipeline.train_dataset(small_task, batch_size_per_process=8, seed=0,
                                          buckets=(48, 82), examples="fresh", start_step=3)), 1)
  np.testing.assert_array_equal(late[0]["index"], 24 + np.arange(8))  # past size 10
  expected = small_task.batch("train", late[0]["index"], late[0]["inputs"].shape[1],
                              unbounded=True)
  for key in FIELDS:
    np.testing.assert_array_equal(late[0][key], expected[key])
  # Only the loss covers the padding after END (as the original's loss does).
  assert (late[0]["loss_mask"] >= late[0]["mask"]).all()
  assert late[0]["loss_mask"].sum() > late[0]["mask"].sum()


def test_one_length_per_batch_uniform_over_the_training_lengths():
  task = tasks.get_task(tasks.default_task_config("odds_first"))
  batches = take(iter(pipeline.train_dataset(task, batch_size_per_process=2, seed=4,
                                             buckets=(16, 32, 64, 80), lengths="per_batch")), 400)
  lengths = []
  for step, batch in enumerate(batches):
    assert len(set(batch["length"].tolist())) == 1
    lengths.append(int(batch["length"][0]))
    assert lengths[-1] == pipeline.batch_length(step, seed=4, min_length=1, max_length=40)
    expected = task.batch("train", batch["index"], batch["inputs"].shape[1], length=lengths[-1])
    for key in FIELDS:
      np.testing.assert_array_equal(batch[key], expected[key])
  counts = np.bincount(lengths, minlength=41)[1:]
  assert (counts > 0).all() and counts.max() < 25  # 40 lengths, 10 expected each.
  other_seed = [pipeline.batch_length(s, seed=5, min_length=1, max_length=40) for s in range(40)]
  assert other_seed != lengths[:40]


@pytest.mark.parametrize("process_count", [2, 4])
def test_processes_agree_on_fresh_examples_and_the_batch_length(process_count):
  task = tasks.get_task(tasks.default_task_config("binary_addition"))
  kwargs = dict(seed=5, buckets=(32, 64, 82), examples="fresh", lengths="per_batch")
  single = take(iter(pipeline.train_dataset(task, batch_size_per_process=8, **kwargs)), 5)
  shards = [take(iter(pipeline.train_dataset(
      task, batch_size_per_process=8 // process_count, process_index=p,
      process_count=process_count, **kwargs)), 5) for p in range(process_count)]
  for step, whole in enumerate(single):
    for key in FIELDS:
      np.testing.assert_array_equal(np.concatenate([s[step][key] for s in shards]), whole[key])


@pytest.mark.parametrize("process_count", [1, 2])
def test_eval_batches_cover_the_split_once_in_order(process_count):
  task = small_dyck()
  per_process = [list(pipeline.eval_batches(task, "valid", batch_size=8,
                                            process_index=p, process_count=process_count))
                 for p in range(process_count)]
  assert len({len(batches) for batches in per_process}) == 1
  rows = []
  for step in range(len(per_process[0])):
    width = {batches[step]["inputs"].shape[1] for batches in per_process}
    assert len(width) == 1 and width.pop() in pipeline.length_buckets(99)
    for batches in per_process:
      batch = batches[step]
      assert batch["inputs"].shape[0] == 8
      padding = batch["index"] < 0
      assert not batch["valid"][padding].any() and not batch["mask"][padding].any()
      rows += batch["index"][~padding].tolist()
      for row in np.flatnonzero(~padding):
        e = task.example("valid", batch["index"][row])
        np.testing.assert_array_equal(batch["inputs"][row, : e["length"]], e["inputs"])
  assert rows == list(range(50))
  first = list(pipeline.eval_batches(task, "valid", batch_size=8, num_examples=20))
  assert np.concatenate([b["index"] for b in first]).tolist() == list(range(20)) + [-1] * 4


def test_split_dataset_is_a_map_dataset_of_examples():
  task = small_dyck()
  dataset = pipeline.split_dataset(task, "valid")
  assert isinstance(dataset, grain.MapDataset) and len(dataset) == 50
  np.testing.assert_array_equal(dataset[7]["inputs"], task.example("valid", 7)["inputs"])


def test_bad_pipeline_arguments():
  task = small_dyck()
  with pytest.raises(ValueError, match=r"buckets=\(16, 32\): .* >= 99"):
    pipeline.train_dataset(task, batch_size_per_process=4, seed=0, buckets=(16, 32))
  with pytest.raises(ValueError, match="batch_size=0"):
    pipeline.train_dataset(task, batch_size_per_process=0, seed=0, buckets=(99,))
  with pytest.raises(ValueError, match="process_index=2"):
    pipeline.train_dataset(task, batch_size_per_process=4, seed=0, buckets=(99,),
                           process_index=2, process_count=2)
  with pytest.raises(ValueError, match="num_examples=51"):
    pipeline.eval_batches(task, "valid", batch_size=4, num_examples=51)
  with pytest.raises(ValueError, match="data.lengths='per_batch': task dyck draws no examples"):
    pipeline.train_dataset(task, batch_size_per_process=4, seed=0, buckets=(99,),
                           lengths="per_batch")
  with pytest.raises(ValueError, match="data.examples='new'"):
    pipeline.train_dataset(task, batch_size_per_process=4, seed=0, buckets=(99,), examples="new")
  with pytest.raises(ValueError, match="prefetch=-1"):
    pipeline.train_dataset(task, batch_size_per_process=4, seed=0, buckets=(99,), prefetch=-1)


def _counting_batches(task, counter):
  """`task` whose `batch` counts its calls (one per training batch generated)."""
  batch = task.batch

  def counted(*args, **kwargs):
    counter.append(None)
    return batch(*args, **kwargs)

  object.__setattr__(task, "batch", counted)
  return task


@pytest.mark.parametrize("prefetch", [0, 3])
def test_prefetch_generates_that_many_batches_ahead_and_the_same_batches(prefetch):
  generated = []
  task = _counting_batches(small_dyck(), generated)
  batches = iter(pipeline.train_dataset(task, batch_size_per_process=4, seed=0, buckets=(99,),
                                        prefetch=prefetch))
  first = take(batches, 2)
  deadline = time.monotonic() + 20
  while len(generated) < 2 + prefetch and time.monotonic() < deadline:
    time.sleep(0.01)
  time.sleep(0.2)  # time to overrun the buffer, if it could
  assert len(generated) == 2 + prefetch
  batch_of_step = pipeline.train_batch_fn(small_dyck(), batch_size_per_process=4, seed=0,
                                          buckets=(99,))
  for step, got in enumerate(first):
    want = batch_of_step(step)
    for key in FIELDS:
      np.testing.assert_array_equal(got[key], want[key])
