"""Losses and accuracy counts (pure, jit-friendly); the training loop's metrics
window, throughput meter and writer.

Accuracy is accumulated as counts (`correct`, `total`) so that batches,
devices and hosts add up exactly; ratios are taken on the host at the end.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np


def masked_cross_entropy(logits_BxLxV, targets_BxL, mask_BxL):
  """Mean token cross-entropy under the mask, and the mask's weight."""
  total, weight = masked_cross_entropy_sum(logits_BxLxV, targets_BxL, mask_BxL)
  return total / jnp.maximum(weight, 1.0), weight


def masked_cross_entropy_sum(logits_BxLxV, targets_BxL, mask_BxL):
  """Summed token cross-entropy under the mask, and the mask's weight."""
  logp = jax.nn.log_softmax(logits_BxLxV.astype(jnp.float32))
  nll = -jnp.take_along_axis(logp, targets_BxL[..., None], axis=-1)[..., 0]
  return (nll * mask_BxL).sum(), mask_BxL.sum()


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
    out["close_correct"] = close_correct(logits_BxLxV, targets_BxL, mask_BxL, close_ids,
                                         ratio).sum(-1)
  return out


def close_correct(logits_BxLxV, targets_BxL, mask_BxL, close_ids, ratio=0.8):
  """Yao et al.'s closing-bracket score at each position (`[B, L]` bool): the
  target's probability over all closing brackets' exceeds `ratio`, under the mask."""
  probs = jax.nn.softmax(logits_BxLxV.astype(jnp.float32), axis=-1)
  close_p = probs[..., jnp.asarray(close_ids)]
  p_target = jnp.take_along_axis(probs, targets_BxL[..., None], axis=-1)[..., 0]
  return (p_target / jnp.maximum(close_p.sum(-1), 1e-30) > ratio) & (mask_BxL > 0)


class MetricsWindow:
  """Per-step metrics summed on device since the last log step.

  Saved with each checkpoint (`to_json`), so that a run resumed between two
  log steps logs exactly the numbers an uninterrupted run logs.
  """

  def __init__(self, sums: dict | None = None, steps_summed: int = 0):
    self.sums, self.steps = sums, steps_summed
    self.last = None  # the newest step's metrics

  def add(self, step_metrics: dict) -> None:
    self.sums = (step_metrics
                 if self.sums is None else jax.tree.map(jnp.add, self.sums, step_metrics))
    self.steps += 1
    self.last = step_metrics

  def means(self, step: int, schedules: dict[str, Callable]) -> dict:
    """The logged training metrics of the window that ends at `step`."""
    sums = jax.device_get(self.sums)
    return dict(loss=float(sums["loss"]) / self.steps,
                accuracy=float(sums["token_correct"]) / max(float(sums["token_total"]), 1.0),
                grad_norm=float(sums["grad_norm"]) / self.steps,
                spectral_grad_norm=float(sums["spectral_grad_norm"]) / self.steps,
                spectral_drift=float(self.last["spectral_drift"]),
                learning_rate=float(schedules["learning_rate"](step - 1)),
                spectral_learning_rate=float(schedules["spectral_learning_rate"](step - 1)),
                skipped_steps=int(sums["skipped"]))

  def members(self) -> list[MetricsWindow]:
    """A population's window (sums `[P]` per metric) as one window per member."""
    sums, last = jax.device_get((self.sums, self.last))
    out = []
    for i in range(len(sums["loss"])):
      window = MetricsWindow(jax.tree.map(lambda x, i=i: x[i], sums), self.steps)
      window.last = jax.tree.map(lambda x, i=i: x[i], last)
      out.append(window)
    return out

  def to_json(self) -> dict:
    sums = {} if self.sums is None else jax.device_get(self.sums)
    return dict(
        steps=self.steps, sums={
            k: [np.asarray(v).tolist(), str(np.asarray(v).dtype)] for k, v in sums.items()
        })

  @classmethod
  def from_json(cls, value: dict | None) -> MetricsWindow:
    if not value or not value["steps"]:
      return cls()
    sums = {k: np.asarray(v, dtype) for k, (v, dtype) in value["sums"].items()}
    return cls(sums, value["steps"])


class Throughput:
  """Steps and tokens per second of this process since the last `reset`
  (never a restored window's), and MFU when the device peak is known: the
  model's FLOPs at each batch's padded shape (`flops_per_token(width)`), so
  padding counts as computed and a smaller bucket as cheaper."""

  def __init__(self, *, flops_per_token: Callable[[int], float] | None = None,
               peak_flops: float = 0.0):
    self.flops_per_token, self.peak_flops = flops_per_token, peak_flops
    self.reset()

  def reset(self) -> None:
    self.start, self.steps, self.tokens, self.flops = time.perf_counter(), 0, 0, 0.0

  def count(self, batch: dict | tuple) -> None:
    """One step of the local `batch` (`[B, L]` fields, a population's
    `[P, B, L]`, or a tuple of length groups)."""
    self.steps += 1
    for group in batch if isinstance(batch, tuple) else (batch,):
      valid = np.asarray(group["valid"])
      self.tokens += int(valid.sum()) * jax.process_count()
      if self.flops_per_token is not None and self.peak_flops > 0:
        width = valid.shape[-1]
        padded = valid.size * jax.process_count()
        self.flops += padded * self.flops_per_token(width)

  def rates(self) -> dict:
    seconds = time.perf_counter() - self.start
    out = dict(steps_per_sec=self.steps / seconds, tokens_per_sec=self.tokens / seconds)
    if self.peak_flops > 0:
      out["mfu"] = self.flops / seconds / self.peak_flops
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
