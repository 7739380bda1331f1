"""Grain pipelines: buckets, padding, epochs, process sharding, checkpointing, evaluation."""

import json

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


def test_iterator_state_restores_mid_stream(tmp_path):
  task = tasks.get_task(tasks.default_task_config("modular_arithmetic_brackets"))
  buckets = pipeline.length_buckets(task.max_sequence_length("train"))
  make = lambda: iter(pipeline.train_dataset(task, batch_size_per_process=4, seed=1,
                                             buckets=buckets))
  iterator = make()
  take(iterator, 3)
  handler = grain.checkpoint.CheckpointHandler()
  handler.save(epath.Path(tmp_path), args=grain.checkpoint.CheckpointSave(iterator))
  state = json.loads(json.dumps(iterator.get_state()))
  expected = take(iterator, 3)
  restored = handler.restore(epath.Path(tmp_path), args=grain.checkpoint.CheckpointRestore(make()))
  from_state = make()
  from_state.set_state(state)
  started_late = iter(pipeline.train_dataset(task, batch_size_per_process=4, seed=1,
                                             buckets=buckets, start_step=3))
  for other in (restored, from_state, started_late):
    for want, got in zip(expected, take(other, 3)):
      for key in FIELDS:
        np.testing.assert_array_equal(got[key], want[key])


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
