"""Mechanism probes: what a trained run's residual stream and heads know of nesting.

`probe_report(run)` (what `eval.py --probe` adds to `results.json` under
`probe`) asks two questions of a bracket task (Dyck, ListOps):

1. Linear probes. From each layer's residual stream (after the embedding, and
   after each block), at every valid position, fit a linear read-out of the
   current nesting depth (the stack height after the token) and, for ListOps,
   of the operator of the innermost open list. Depth is a *regression*
   rounded to the nearest integer (ridge, closed form): a one-vs-rest
   classifier can never name a depth it was not fitted on, and depths unseen
   in fitting are the point of `test_depth`. The operator is a one-vs-rest
   ridge classification (argmax) over the four operators and `none` (no list
   open). Probes are fitted on the even-indexed examples of `valid` and scored
   on its odd-indexed ones (in distribution: held-out strings, not positions,
   since positions of one string are correlated) and on `test_depth`, overall,
   per depth, and on the positions deeper than any fitted (`unseen`).
2. Attention to the bracket. Per layer and head, the mean attention weight at
   each closing bracket on its matching opening bracket (`match_mass`), and on
   the opening bracket left on top of the stack after it (`top_mass`: the one
   whose closing bracket Dyck asks for next). `uniform_mass` is what a head
   attending uniformly to the visible keys would put on one key, for scale.
   `match_mass_by_distance` (octaves of the distance between the brackets)
   and `match_mass_by_level` (the pair's nesting level) average it over the
   heads of one eye.
   Heads carry their eye (`head_eyes`): `geometric` or `spectral` for rotary
   kinds (bifocal with `split="heads"` has both), `pairs` for bifocal with
   `split="pairs"` (both kinds of eye within every head: reported per head),
   else the kind (`alibi`, `nope`, ...). `by_eye` averages heads of one eye.
   Within one bifocal run an eye is also a head index (the spectral heads are
   the last ones) and most kinds of one seed start from RoPE's weights
   (`experiments/extrapolation/probe_report.py`'s `STARTS_AS_ROPE`, checked by its test): set
   an eye's heads against the same heads of a RoPE run of that seed
   (`match_mass` per head) before crediting the eye, as that report does.

The residual stream and the weights are recomputed by looping the model's
blocks (`attention_trace.trace`).

One process, `num_examples` (default 256) examples of each split.

The report (`results["probe"]`):

  method, examples {split: n}, fitted_positions, fitted_max_depth
  layers                   ["embedding", "block 1", ...]
  depth: {split: [per layer: accuracy, positions, by_depth {"d": accuracy},
          by_depth_positions, unseen_accuracy, unseen_positions]}
          (`valid`: its held-out odd-indexed examples; depth keys are the
          positions' current depths)
  operator, operator_classes   ListOps only: the same, for the operator probe
  attention:
    eyes                   [per layer: [eye per head]]
    match_mass, top_mass   {split: [per layer: [mean weight per head]]} (null: heads of
                           data-dependent kinds in results written before their
                           weights were read; a split without such positions)
    match_mass_far         the same over the pairs at least `FAR` (16) tokens apart
                           (null where a split has none: `far_positions`)
    by_eye                 {split: {"match_mass"|"top_mass": {eye: mean over its heads}}}
    uniform_mass           {split: a uniform head's weight on one key, averaged}
    closing_positions      {split: closing brackets averaged over}
    far_positions          {split: those of them at least `FAR` from their match}
    match_mass_by_distance {split: {eye: {"lo-hi" distance octave: mean}}}
    match_mass_by_level    {split: {eye: {"level": mean}}}
  plots                    {"probe": PNG path}
"""

from __future__ import annotations

import dataclasses
import os

import jax
import numpy as np

from bifocal_jax.evaluation import attention_trace
from bifocal_jax.tasks import base
from bifocal_jax.tasks import listops as listops_lib

SPLITS = ("valid", "test_depth")
DEFAULT_EXAMPLES = 256
RIDGE = 1e-3  # ridge strength, relative to the (standardised) features' scale
BATCH = 32  # examples per traced batch
NONE_OPERATOR = "none"
# A bracket pair at least this far apart is "long range" (`match_mass_far`):
# the distances the paper's claim is about, past a local head's reach.
FAR = 16

# ----------------------------------------------------------------------------
# Labels from token ids.
# ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Brackets:
  """A task's bracket tokens: `operators[i]` names the list `open_ids[i]` opens
  (ListOps), or is None (Dyck: the bracket type is not probed)."""
  open_ids: tuple[int, ...]
  close_ids: tuple[int, ...]
  operators: tuple[str, ...] | None = None


def brackets(task) -> Brackets:
  """The bracket tokens of a Dyck or ListOps task, from its vocabulary; a
  ValueError for a task without brackets (it has no nesting depth to probe)."""
  if task.name == "dyck":
    letters = [t[1:] for t in task.vocab if t.startswith("(")]
    return Brackets(tuple(task.token_ids[f"({x}"] for x in letters),
                    tuple(task.token_ids[f"{x})"] for x in letters))
  if task.name in listops_lib.NAMES:
    ops = listops_lib.OPERATORS
    return Brackets(tuple(task.token_ids[f"[{op}"] for op in ops),
                    (task.token_ids[listops_lib.CLOSE],), ops)
  raise ValueError(f"probe: task {task.name!r} has no brackets to probe the nesting depth of "
                   f"(needs dyck, {' or '.join(listops_lib.NAMES)})")


def nesting_labels(inputs_BxL: np.ndarray, valid_BxL: np.ndarray,
                   vocab: Brackets) -> dict[str, np.ndarray]:
  """Per position, from a stack over the token ids (int64 `[B, L]`, -1: none):

    depth     lists/brackets open after the token (0 on padding)
    match     at a closing bracket, the position of the opening one it closes
    top       the position of the innermost bracket still open after the token
    operator  ListOps: index into `vocab.operators` of that bracket's list
              (-1 when none is open); all -1 for Dyck
    height    at a closing bracket, the height of the pair it closes: 1 with
              no pair inside, else 1 + the highest pair directly inside
    sibling   at a closing bracket, the height of the highest pair closed
              before it directly inside the same enclosing pair (0: none
              yet; -1 at an outermost pair, which has no enclosing one)
    skipped   after the token, the height of the highest pair closed so far
              directly inside the innermost open bracket (0: none yet; -1
              when none is open): what lies between it and the next token

  A ValueError names the first string that closes more than it opened.
  """
  inputs = np.asarray(inputs_BxL)
  valid = np.asarray(valid_BxL, bool)
  b, length = inputs.shape
  is_open = np.isin(inputs, vocab.open_ids) & valid
  is_close = np.isin(inputs, vocab.close_ids) & valid
  op_of_id = np.full(max(vocab.open_ids) + 1, -1, np.int64)
  if vocab.operators is not None:
    op_of_id[list(vocab.open_ids)] = np.arange(len(vocab.open_ids))
  stack = np.zeros((b, length + 1), np.int64)  # stack[:, h - 1]: position of the h-th open
  # highest[:, h - 1]: the highest pair closed so far directly inside the h-th open
  highest = np.zeros((b, length + 1), np.int64)
  height = np.zeros(b, np.int64)
  rows = np.arange(b)
  out = {
      name: np.full((b, length), -1, np.int64)
      for name in ("depth", "match", "top", "operator", "height", "sibling", "skipped")
  }
  for t in range(length):
    closing = is_close[:, t]
    if (closing & (height == 0)).any():
      raise ValueError(f"probe: string {int(np.flatnonzero(closing & (height == 0))[0])} closes "
                       f"a bracket at position {t} that it never opened")
    r, slot = rows[closing], height[closing] - 1
    out["match"][r, t] = stack[r, slot]
    pair_height = highest[r, slot] + 1
    out["height"][r, t] = pair_height
    inner = slot > 0
    out["sibling"][r[inner], t] = highest[r[inner], slot[inner] - 1]
    highest[r[inner], slot[inner] - 1] = np.maximum(highest[r[inner], slot[inner] - 1],
                                                    pair_height[inner])
    height = height - closing
    opening = is_open[:, t]
    stack[rows[opening], height[opening]] = t
    highest[rows[opening], height[opening]] = 0
    height = height + opening
    out["depth"][:, t] = np.where(valid[:, t], height, 0)
    out["skipped"][:, t] = np.where(valid[:, t] & (height > 0), highest[rows,
                                                                        np.maximum(height - 1, 0)],
                                    -1)
    top = np.where(height > 0, stack[rows, np.maximum(height - 1, 0)], -1)
    out["top"][:, t] = top
    out["operator"][:, t] = np.where(top >= 0, op_of_id[inputs[rows, np.maximum(top, 0)]], -1)
  if vocab.operators is None:
    out["operator"][:] = -1
  return out


# ----------------------------------------------------------------------------
# Linear probes in closed form.
# ----------------------------------------------------------------------------


def fit_ridge(x_NxD: np.ndarray, y_NxC: np.ndarray, *, ridge: float = RIDGE) -> dict:
  """Ridge regression of `y` on standardised `x` plus an intercept (float64,
  deterministic): minimises `|y - x w - b|^2 + ridge * N * |w|^2`."""
  x = np.asarray(x_NxD, np.float64)
  y = np.asarray(y_NxC, np.float64)
  mean, scale = x.mean(0), x.std(0)
  scale = np.where(scale > 1e-8 * max(scale.max(initial=0.0), 1e-30), scale, 1.0)
  z = (x - mean) / scale
  y_mean = y.mean(0)
  gram = z.T @ z + ridge * len(z) * np.eye(z.shape[1])
  w = np.linalg.solve(gram, z.T @ (y - y_mean))
  return dict(mean=mean, scale=scale, w=w, b=y_mean)


def predict_ridge(probe: dict, x_NxD: np.ndarray) -> np.ndarray:
  return (
      (np.asarray(x_NxD, np.float64) - probe["mean"]) / probe["scale"]) @ probe["w"] + probe["b"]


def fit_depth_probe(x_NxD, depth_N, *, ridge: float = RIDGE) -> dict:
  """The depth probe: ridge regression of depth, read out rounded (`predict_depth`)."""
  return fit_ridge(x_NxD, np.asarray(depth_N, np.float64)[:, None], ridge=ridge)


def predict_depth(probe: dict, x_NxD) -> np.ndarray:
  return np.maximum(np.rint(predict_ridge(probe, x_NxD)[:, 0]), 0).astype(np.int64)


def fit_class_probe(x_NxD, labels_N, num_classes: int, *, ridge: float = RIDGE) -> dict:
  """One-vs-rest ridge classification of `labels_N` in `0..num_classes-1`."""
  return fit_ridge(x_NxD, np.eye(num_classes)[np.asarray(labels_N)], ridge=ridge)


def predict_class(probe: dict, x_NxD) -> np.ndarray:
  return np.argmax(predict_ridge(probe, x_NxD), axis=-1)


def scores(predicted_N, labels_N, depth_N, *, fitted_max_depth: int | None = None) -> dict:
  """Accuracy overall and per depth (string keys; `by_depth_positions`: how
  many positions each), and on the positions deeper than `fitted_max_depth`."""
  correct = np.asarray(predicted_N) == np.asarray(labels_N)
  depth_N = np.asarray(depth_N)
  by_depth, count = {}, {}
  for d in np.unique(depth_N):
    sel = depth_N == d
    by_depth[str(int(d))] = float(correct[sel].mean())
    count[str(int(d))] = int(sel.sum())
  out = dict(accuracy=float(correct.mean()) if correct.size else None, positions=int(correct.size),
             by_depth=by_depth, by_depth_positions=count)
  if fitted_max_depth is not None:
    unseen = depth_N > fitted_max_depth
    out["unseen_accuracy"] = float(correct[unseen].mean()) if unseen.any() else None
    out["unseen_positions"] = int(unseen.sum())
  return out


# ----------------------------------------------------------------------------
# The report.
# ----------------------------------------------------------------------------


def check_task(task) -> Brackets:
  """The task's brackets, or a ValueError before any work (no brackets, or no
  split to probe)."""
  vocab = brackets(task)
  for split in SPLITS:
    if split not in task.split_names:
      raise ValueError(f"probe: task {task.name!r} has no split {split!r}")
  return vocab


def collect(setup, params, split: str, *, num_examples: int, rng, vocab: Brackets) -> dict:
  """Traces the first `num_examples` examples of `split`: per valid position
  (flattened over examples) residuals `[layers + 1, N, D]`, labels and the
  example index; per closing position the heads' masses `[layers, M, H]`."""
  task = setup.task
  n = min(num_examples, task.split(split).size)
  width = task.max_sequence_length(split)

  @jax.jit
  def run(params, tokens, valid, match, top):
    model = setup.model(params)
    return attention_trace.trace(model, tokens, valid, rng=rng, match_BxL=match, top_BxL=top)

  columns: dict[str, list[np.ndarray]] = {}
  with jax.set_mesh(setup.mesh):
    for start in range(0, n, BATCH):
      batch = base.pad_rows(task.batch(split, np.arange(start, min(start + BATCH, n)), width),
                            BATCH)
      labels = nesting_labels(batch["inputs"], batch["valid"], vocab)
      out = jax.device_get(
          run(params, batch["inputs"], batch["valid"], labels["match"], labels["top"]))
      valid = batch["valid"].astype(bool)
      closing = labels["match"] >= 0
      example = np.broadcast_to(batch["index"][:, None], valid.shape)
      # The keys a query sees: the valid ones up to it (causal), or all valid ones.
      visible = (np.cumsum(valid, axis=1) if task.causal else np.broadcast_to(
          valid.sum(1, keepdims=True), valid.shape))
      rows = dict(residuals=out["residuals"][:, valid], depth=labels["depth"][valid],
                  operator=labels["operator"][valid], example=example[valid],
                  match_mass=np.moveaxis(out["match_mass"], 2, 3)[:, closing],
                  top_mass=np.moveaxis(out["top_mass"], 2, 3)[:, closing & (labels["top"] >= 0)],
                  uniform_mass=1.0 / visible[closing], close_level=labels["depth"][closing] + 1,
                  close_distance=(np.arange(valid.shape[1]) - labels["match"])[closing])
      for name, value in rows.items():
        columns.setdefault(name, []).append(value)
  axis = dict(residuals=1, match_mass=1, top_mass=1)
  return {k: np.concatenate(v, axis=axis.get(k, 0)) for k, v in columns.items()}


def _masses(per_head_LxMxH: np.ndarray) -> list[list[float | None]]:
  """Mean over positions per layer and head; None where there are no positions."""
  out = []
  for layer in per_head_LxMxH:
    means = layer.mean(0) if layer.shape[0] else np.full(layer.shape[1], np.nan)
    out.append([float(m) if np.isfinite(m) else None for m in means])
  return out


def _octave(distance: np.ndarray) -> np.ndarray:
  """The lower edge of each distance's octave: 1, 2, 4, 8, ..."""
  return 1 << (np.log2(np.maximum(distance, 1)).astype(np.int64))


def _by_eye_and_key(per_head_LxMxH, keys_M, eyes, names) -> dict:
  """{eye: {name(key): mean mass over that eye's heads (all layers) and the
  closing positions with that key}}."""
  out: dict[str, dict[str, float]] = {}
  for key in np.unique(keys_M):
    sel = keys_M == key
    for layer, layer_eyes in zip(per_head_LxMxH, eyes):
      for h, eye in enumerate(layer_eyes):
        out.setdefault(eye, {}).setdefault(names(key), []).append(layer[sel, h].mean())
  return {eye: {k: float(np.mean(v)) for k, v in keyed.items()} for eye, keyed in out.items()}


def _by_eye(masses, eyes) -> dict[str, float | None]:
  groups: dict[str, list[float]] = {}
  for layer_masses, layer_eyes in zip(masses, eyes):
    for m, eye in zip(layer_masses, layer_eyes):
      groups.setdefault(eye, [])
      if m is not None:
        groups[eye].append(m)
  return {eye: (float(np.mean(v)) if v else None) for eye, v in groups.items()}


def probe_report(run, *, num_examples: int = DEFAULT_EXAMPLES, ridge: float = RIDGE,
                 out_dir: str | None = None) -> dict:
  """The probes of a restored `evaluate.Run` (schema: the module docstring);
  with `out_dir`, also the plot (`plots: {"probe": path}`)."""
  setup = run.setup
  task = setup.task
  vocab = check_task(task)
  if jax.process_count() > 1:
    raise ValueError(f"probe: runs on one process (this run has {jax.process_count()})")
  if num_examples < 2:
    raise ValueError(f"probe: num_examples={num_examples} must be >= 2 (fit and held-out halves)")
  model = setup.model(run.params)
  eyes = [attention_trace.head_eyes(block.attn) for block in model.blocks]
  data = {
      split:
          collect(setup, run.params, split, num_examples=num_examples, rng=run.evaluator.rng,
                  vocab=vocab) for split in SPLITS
  }
  valid = data["valid"]
  fit = valid["example"] % 2 == 0
  held = {"valid": ~fit, "test_depth": np.ones(len(data["test_depth"]["depth"]), bool)}
  fitted_max_depth = int(valid["depth"][fit].max())
  layers = ["embedding"] + [f"block {i + 1}" for i in range(len(model.blocks))]
  depth = {split: [] for split in SPLITS}
  operator = {split: [] for split in SPLITS} if vocab.operators is not None else None
  classes = None if vocab.operators is None else list(vocab.operators) + [NONE_OPERATOR]
  for layer in range(len(layers)):
    x_fit = valid["residuals"][layer][fit]
    d_probe = fit_depth_probe(x_fit, valid["depth"][fit], ridge=ridge)
    if operator is not None:
      op_labels = lambda d: np.where(d["operator"] >= 0, d["operator"], len(vocab.operators))
      o_probe = fit_class_probe(x_fit, op_labels(valid)[fit], len(classes), ridge=ridge)
    for split in SPLITS:
      d, sel = data[split], held[split]
      x = d["residuals"][layer][sel]
      depth[split].append(
          scores(predict_depth(d_probe, x), d["depth"][sel], d["depth"][sel],
                 fitted_max_depth=fitted_max_depth))
      if operator is not None:
        operator[split].append(
            scores(predict_class(o_probe, x),
                   op_labels(d)[sel], d["depth"][sel], fitted_max_depth=fitted_max_depth))
  attention = dict(eyes=eyes, match_mass={}, match_mass_far={}, top_mass={}, by_eye={},
                   uniform_mass={}, closing_positions={}, far_positions={},
                   match_mass_by_distance={}, match_mass_by_level={})
  for split in SPLITS:
    d = data[split]
    for name in ("match_mass", "top_mass"):
      attention[name][split] = _masses(d[name])
    far = d["close_distance"] >= FAR
    attention["match_mass_far"][split] = _masses(d["match_mass"][:, far])
    attention["far_positions"][split] = int(far.sum())
    attention["by_eye"][split] = {
        name: _by_eye(attention[name][split], eyes) for name in ("match_mass", "top_mass")
    }
    attention["uniform_mass"][split] = float(
        d["uniform_mass"].mean()) if d["uniform_mass"].size else None
    attention["closing_positions"][split] = int(d["uniform_mass"].size)
    octave = _octave(d["close_distance"])
    attention["match_mass_by_distance"][split] = _by_eye_and_key(d["match_mass"], octave, eyes,
                                                                 lambda lo: f"{lo}-{2 * lo - 1}")
    attention["match_mass_by_level"][split] = _by_eye_and_key(d["match_mass"], d["close_level"],
                                                              eyes, str)
  report = dict(
      method=("depth: ridge regression (closed form, standardised residuals, ridge "
              f"{ridge:g} * N), rounded; operator: one-vs-rest ridge, argmax; fitted on the "
              "even-indexed examples of valid, scored on its odd-indexed ones ('valid') and on "
              "test_depth"),
      examples={split: int(len(np.unique(data[split]["example"]))) for split in SPLITS},
      fitted_positions=int(fit.sum()), fitted_max_depth=fitted_max_depth, layers=layers,
      depth=depth, attention=attention)
  if operator is not None:
    report["operator"] = operator
    report["operator_classes"] = classes
  if out_dir is not None:
    report["plots"] = {"probe": plot_report(report, os.path.join(out_dir, "probe.png"))}
  return report


def format_report(report: dict) -> str:
  """A few lines: probe accuracy per layer, and attention mass per eye."""
  lines = ["probe: depth accuracy per layer (valid / test_depth / unseen depths):"]
  for i, name in enumerate(report["layers"]):
    v, t = report["depth"]["valid"][i], report["depth"]["test_depth"][i]
    cells = [_fmt(v["accuracy"]), _fmt(t["accuracy"]), _fmt(t.get("unseen_accuracy"))]
    if "operator" in report:
      cells.append("operator " + _fmt(report["operator"]["valid"][i]["accuracy"]) + " / " +
                   _fmt(report["operator"]["test_depth"][i]["accuracy"]))
    lines.append(f"  {name:<10} " + " / ".join(cells[:3]) +
                 ("  " + cells[3] if len(cells) > 3 else ""))
  att = report["attention"]
  for split in SPLITS:
    eyes = att["by_eye"][split]["match_mass"]
    cells = [f"{eye} {_fmt(m)}" for eye, m in eyes.items()]
    lines.append(f"  match mass ({split}, uniform {_fmt(att['uniform_mass'][split])}): " +
                 ", ".join(cells))
  return "\n".join(lines)


def _fmt(v) -> str:
  return "-" if v is None else f"{v:.3f}"


def plot_report(report: dict, path: str) -> str:
  """One PNG: probe accuracy per layer (valid vs test_depth), and each head's
  mass on the matching bracket (per split, bars labelled by eye)."""
  from bifocal_jax.evaluation import spectrum  # pylint: disable=g-import-not-at-top
  plt = spectrum.pyplot()
  fig, (ax_probe, ax_heads, ax_distance) = plt.subplots(1, 3, figsize=(17, 4),
                                                        gridspec_kw=dict(width_ratios=(1, 1.3, 1)))
  x = np.arange(len(report["layers"]))
  probes = [("depth", report["depth"])]
  if "operator" in report:
    probes.append(("operator", report["operator"]))
  for name, results in probes:
    for split, style in zip(SPLITS, ("-", "--")):
      ax_probe.plot(x, [np.nan if r["accuracy"] is None else r["accuracy"] for r in results[split]],
                    style, marker="o", label=f"{name}, {split}")
    unseen = [r.get("unseen_accuracy") for r in results["test_depth"]]
    if name == "depth" and any(u is not None for u in unseen):
      ax_probe.plot(x, [np.nan if u is None else u for u in unseen], ":", marker="x",
                    label="depth, test_depth (unseen depths)")
  ax_probe.set_xticks(x, report["layers"], rotation=20)
  ax_probe.set_ylabel("probe accuracy")
  ax_probe.set_ylim(-0.02, 1.02)
  ax_probe.grid(alpha=0.3)
  ax_probe.legend(fontsize=7)
  att = report["attention"]
  labels = [
      f"L{i + 1}H{h} {eye}" for i, eyes in enumerate(att["eyes"]) for h, eye in enumerate(eyes)
  ]
  bar_x = np.arange(len(labels))
  for j, split in enumerate(SPLITS):
    masses = [np.nan if m is None else m for layer in att["match_mass"][split] for m in layer]
    ax_heads.bar(bar_x + (j - 0.5) * 0.4, masses, width=0.4, label=split)
    if att["uniform_mass"][split] is not None:
      ax_heads.axhline(att["uniform_mass"][split], color=f"C{j}", lw=0.8, ls=":")
  ax_heads.set_xticks(bar_x, labels, fontsize=6, rotation=90)
  ax_heads.set_ylabel("attention on the matching open bracket")
  ax_heads.set_ylim(0, 1)
  ax_heads.legend(fontsize=7, title="dotted: uniform", title_fontsize=7)
  ax_heads.grid(alpha=0.3, axis="y")
  for j, split in enumerate(SPLITS):
    for i, (eye, by_distance) in enumerate(att["match_mass_by_distance"][split].items()):
      keys = list(by_distance)
      ax_distance.plot([int(k.split("-")[0]) for k in keys], list(by_distance.values()),
                       ("-", "--")[j], marker="o", ms=3, color=f"C{i}", label=f"{eye}, {split}")
  ax_distance.set_xscale("log", base=2)
  ax_distance.set_xlabel("distance to the matching open bracket (octave)")
  ax_distance.set_ylabel("mean attention on it (heads of one eye)")
  ax_distance.set_ylim(bottom=0)
  ax_distance.grid(alpha=0.3)
  ax_distance.legend(fontsize=7)
  fig.tight_layout()
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  fig.savefig(path, dpi=100, bbox_inches="tight")
  plt.close(fig)
  return path
