"""Memory-bounded batches of long strings: fine length buckets, batch sizes
within the attention-score budget, partial batches padded to powers of two,
and a published file streamed whole."""

import os

import numpy as np
import pytest

from bifocal_jax.evaluation import budget_batches


def test_length_buckets_and_batch_sizes():
  buckets = np.array(budget_batches.length_buckets(6000))
  assert buckets[0] == 16 and buckets[-1] >= 6000 and np.all(np.diff(buckets) > 0)
  assert np.all(buckets[1:][buckets[:-1] >= 128] / buckets[:-1][buckets[:-1] >= 128] <= 1.125)
  budget = 1 << 30
  for length in (100, 1000, 5133):
    rows = budget_batches.batch_size_for_length(length, num_heads=8, budget=budget, max_batch_size=64)
    assert rows == 1 or rows * 8 * length**2 * 4 <= budget
    assert rows == 64 or (rows + 1) * 8 * length**2 * 4 > budget
  assert budget_batches.batch_size_for_length(5133, num_heads=8, budget=budget) == 1
  assert budget_batches.batch_size_for_length(5133, num_heads=8, multiple=4) == 4
  with pytest.raises(ValueError, match="num_heads=0"):
    budget_batches.batch_size_for_length(10, num_heads=0)


def test_fitted_rows_pads_a_partial_batch_to_a_power_of_two_multiple():
  assert [budget_batches.fitted_rows(n, 64) for n in (1, 2, 3, 5, 33, 64)] == [1, 2, 4, 8, 64, 64]
  assert [budget_batches.fitted_rows(n, 48, multiple=4) for n in (1, 4, 5, 9, 17, 40)] == [
      4, 4, 8, 16, 32, 48]
  rows = [dict(inputs=np.zeros((1, w), np.int32), index=np.array([i]))
          for i, w in enumerate([8] * 5 + [16] * 3)]
  batches = list(budget_batches.regroup(rows, lambda width: 4))
  assert [(b["inputs"].shape, list(b["index"])) for b in batches] == [
      ((4, 8), [0, 1, 2, 3]), ((1, 8), [4]), ((4, 16), [5, 6, 7, -1])]


def test_published_file_streams_in_budget(published_dir):
  budget, heads = 256 << 20, 4
  path = os.path.join(published_dir, "k8_m20.test")
  bs = lambda w: budget_batches.batch_size_for_length(w, num_heads=heads, budget=budget)
  seen, shapes = [], set()
  for batch in budget_batches.dyck_file_batches(path, k=8, batch_size_fn=bs):
    rows, width = batch["inputs"].shape
    shapes.add((rows, width))
    real = int(np.sum(batch["index"] >= 0))
    # full batches, and a width's last one padded only to the next power of two
    assert rows == budget_batches.fitted_rows(real, bs(width)) and real > rows // 2
    assert np.all(batch["length"][batch["index"] >= 0] <= width)
    assert np.all(batch["length"][batch["index"] >= 0] > width / 1.125 - 1)
    seen.extend(batch["index"][batch["index"] >= 0].tolist())
  assert sorted(seen) == list(range(310))
  assert max(w for _, w in shapes) >= 5133 and len(shapes) <= 10
