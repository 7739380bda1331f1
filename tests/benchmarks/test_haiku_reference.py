"""The Haiku rebuild of the Chomsky-hierarchy trainer (`benchmarks/haiku_reference.py`)
is the model and data their `odds_first` transformer run uses."""

import haiku as hk
import jax
import numpy as np
import pytest

from benchmarks import haiku_reference as hr


def test_targets_are_odd_indices_then_even_indices():
  batch = hr.sample_batch(jax.random.key(0), 16, 7)
  symbols = np.argmax(batch["input"], -1)
  np.testing.assert_array_equal(np.argmax(batch["output"], -1),
                                np.concatenate([symbols[:, 1::2], symbols[:, ::2]], axis=1))
  assert batch["input"].shape == (16, 7, hr.VOCAB) and batch["output"].shape == (16, 7, hr.VOCAB)


def test_their_encoder_size_and_output_positions():
  model = hk.transform(lambda x: hr.encoder_logits(x, width=64, layers=5, heads=8, dropout=0.1))
  x = hr.sample_batch(jax.random.key(1), 4, 9)["input"]
  params = model.init(jax.random.key(2), x)
  # Counted by hand from their encoder: a 3 -> 64 embedding; per layer q, k,
  # v, output (64 x 64, no bias), two LayerNorms (scale + offset) and the
  # ReLU MLP 64 -> 256 -> 64 with biases; a 64 -> 2 read-out with bias.
  per_layer = 4 * 64 * 64 + 2 * 2 * 64 + (64 * 256 + 256) + (256 * 64 + 64)
  assert hk.data_structures.tree_size(params) == 3 * 64 + 5 * per_layer + 64 * 2 + 2
  logits = model.apply(params, jax.random.key(3), x)
  assert logits.shape == (4, 9, hr.VOCAB)  # the n empty cells after the input tape


def test_sin_cos_table_counts_positions_down():
  table = hr.sin_cos_encoding(5, 8)
  inv_freq = 1e4 ** (-np.arange(0, 8, 2) / 8)
  np.testing.assert_allclose(table[0], np.concatenate([np.sin(5 * inv_freq), np.cos(5 * inv_freq)]))
  np.testing.assert_allclose(table[-1], np.concatenate([np.sin(inv_freq), np.cos(inv_freq)]))


def test_run_rejects_lengths_out_of_range():
  with pytest.raises(ValueError, match="input lengths in 1..4"):
    hr.run(2, smoke=True, lengths=[1, 5])
