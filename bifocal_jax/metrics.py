"""Losses and accuracy counts (pure, jit-friendly), and the metrics writer.

Accuracy is accumulated as counts (`correct`, `total`) so that batches,
devices and hosts add up exactly; ratios are taken on the host at the end.
"""

from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np


def masked_cross_entropy(logits_BxLxV, targets_BxL, mask_BxL):
  """Mean token cross-entropy under the mask, and the mask's weight."""
  logp = jax.nn.log_softmax(logits_BxLxV.astype(jnp.float32))
  nll = -jnp.take_along_axis(logp, targets_BxL[..., None], axis=-1)[..., 0]
  weight = mask_BxL.sum()
  return (nll * mask_BxL).sum() / jnp.maximum(weight, 1.0), weight


def accuracy_counts(logits_BxLxV, targets_BxL, mask_BxL, *, close_ids=None, class_ids=None,
                    ratio=0.8):
  """Per-example counts: correct tokens, masked tokens, and for Dyck the
  Yao et al. closing-bracket score (p(correct close) / p(any close) > ratio).

  `class_ids`: the token ids the argmax ranges over (a Chomsky-hierarchy
  task's output classes, as the original scores); default the whole vocabulary.
  Returns a dict of `[B]` arrays: `token_correct`, `token_total`, and when
  `close_ids` is given `close_correct`.
  """
  mask = mask_BxL > 0
  if class_ids is None:
    predicted_BxL = logits_BxLxV.argmax(-1)
  else:
    class_ids = jnp.asarray(class_ids)
    predicted_BxL = class_ids[logits_BxLxV[..., class_ids].argmax(-1)]
  hit = (predicted_BxL == targets_BxL) & mask
  out = dict(token_correct=hit.sum(-1), token_total=mask.sum(-1))
  if close_ids is not None:
    probs = jax.nn.softmax(logits_BxLxV.astype(jnp.float32), axis=-1)
    close_p = probs[..., jnp.asarray(close_ids)]
    p_target = jnp.take_along_axis(probs, targets_BxL[..., None], axis=-1)[..., 0]
    ok = (p_target / jnp.maximum(close_p.sum(-1), 1e-30) > ratio) & mask
    out["close_correct"] = ok.sum(-1)
  return out


class MetricWriter:
  """Appends one JSON object per logged step to `metrics.jsonl` and mirrors
  scalars to TensorBoard (tensorboardX). Only the writing process writes.

  A run resumed at `start_step` tells TensorBoard to drop the events it had
  logged past that step (they are logged again).
  """

  def __init__(self, workdir: str, *, enabled: bool = True, start_step: int = 0):
    self.enabled = enabled
    self.path = os.path.join(workdir, "metrics.jsonl")
    self._tb = None
    if enabled:
      os.makedirs(workdir, exist_ok=True)
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
      self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"),
                               purge_step=start_step + 1 if start_step else None)

  def write(self, step: int, scalars: dict) -> None:
    if not self.enabled:
      return
    record = {"step": int(step), "time": time.time()}
    record.update({k: _to_python(v) for k, v in scalars.items()})
    with open(self.path, "a") as f:
      f.write(json.dumps(record) + "\n")
    for k, v in record.items():
      if k not in ("step", "time") and isinstance(v, (int, float)):
        self._tb.add_scalar(k, v, step)
    self._tb.flush()

  def close(self):
    if self._tb is not None:
      self._tb.close()


def _to_python(v):
  if isinstance(v, (np.ndarray, jax.Array)):
    v = np.asarray(v).item()
  if isinstance(v, (np.floating, np.integer)):
    v = v.item()
  return v


def read_metrics(workdir: str) -> list[dict]:
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]
