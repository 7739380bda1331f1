"""RESULTS.md's verdicts on the field's leaderboards, each a paragraph computed from the sweeps.

  * `field_dyck`: what extrapolates in depth on Dyck against every kind of
    `converged` (first on each held-out split, issue 31's targets, the kinds
    ahead of RoPE by family);
  * `field_listops`: the same on `listops_depth`, with the rank correlation
    of the kinds across the two tasks (`across_tasks`);
  * `size_verdict`, `five_layer_dyck`: `listops_depth` at 2 against 5
    layers, and Dyck at 5 layers;
  * `chomsky_verdict`: the Chomsky-hierarchy tasks' first kinds and each
    randomized encoding against its base.

Cells short of their planned seeds are named with their seeds wherever quoted.
"""

from __future__ import annotations

import collections

import numpy as np

from bifocal_jax.evaluation import stats
from experiments.extrapolation import plot_style
from experiments.extrapolation import question_rules
from experiments.extrapolation import rank_comparison_report
from experiments.extrapolation.committed_sweeps import (
    REFERENCE, Sweep, held_out_comparisons, interval, iv, join, mean, minus, paired, ranked)
from experiments.extrapolation.report_tables import metric_value

# Rotary variants that the registry files under another interface (FoPE: RoPE's
# frequencies as Fourier series, computed inside attention).
ROTARY_VARIANTS = ("fope",)


def _first(sweep: Sweep, task: str, split: str | None) -> str:
  values = sweep.overall(task) if split is None else sweep.values(task, split)
  kind = ranked(values)[0]
  return f"{sweep.label(task, kind)} {interval(values[kind])}"


def _targets(sweep: Sweep, task: str) -> list[str]:
  out = []
  for name, split, target in sweep.preset.targets:
    if name != task:
      continue
    values = sweep.values(task, split)
    hits = [f"{sweep.label(task, k)} ({sum(v >= target for v in values[k].values())}/"
            f"{len(values[k])} seeds)" for k in ranked(values)
            if any(v >= target for v in values[k].values())]
    best = ranked(values)[0]
    out.append(f"{target:g} on `{split}`: {join(hits, 'no kind and no seed')}"
               + ("" if hits else f" (best mean {mean(values[best])}, {sweep.label(task, best)})"))
  return out


def _versus_rope_by_kind(sweep: Sweep, task: str, kinds) -> dict[str, dict[str, dict]]:
  out = collections.defaultdict(dict)
  for kind, split, d in held_out_comparisons(sweep, task, kinds):
    if d is not None:
      out[kind][split] = d
  return out


def _splits_text(splits: list[str], held: list[str]) -> str:
  if len(splits) == len(held):
    return "every held-out split"
  missing = [s for s in held if s not in splits]
  if len(splits) > len(held) / 2:
    return f"{len(splits)} of {len(held)} (all but {join([f'`{s}`' for s in missing])})"
  return join([f"`{s}`" for s in splits])


def field_dyck(sweeps: dict[str, Sweep]) -> str:
  sweep, task = sweeps["converged"], "dyck"
  held = sweep.held_out(task)
  firsts = [f"`{split}` {_first(sweep, task, split)}" for split in held]
  kinds = [k for k in sweep.scratch(task) if k != REFERENCE]
  by_kind = _versus_rope_by_kind(sweep, task, kinds)
  families = collections.defaultdict(list)
  for kind in kinds:
    families[plot_style.family(kind)].append(kind)
  rotary = families["rotary"] + [k for k in ROTARY_VARIANTS if k in families["attention"]]
  families["attention"] = [k for k in families["attention"] if k not in ROTARY_VARIANTS]
  rotary_lines = []
  for kind in rotary:
    ahead = [s for s, d in by_kind[kind].items() if d["decided"] and d["mean"] > 0]
    behind = [s for s, d in by_kind[kind].items() if d["decided"] and d["mean"] < 0]
    if ahead or behind:
      rotary_lines.append(f"{sweep.label(task, kind)} ahead on {_splits_text(ahead, held)}"
                          + (f", behind on {_splits_text(behind, held)}" if behind else ""))
  level = [sweep.label(task, k) for k in rotary
           if not any(d["decided"] for d in by_kind[k].values())]
  depth_called = [k for k in rotary if by_kind[k].get("test_depth", {}).get("decided")]
  others = []
  for kind in families["bias"] + families["attention"] + families["none"] + families["absolute"]:
    ahead = [s for s, d in by_kind[kind].items() if d["decided"] and d["mean"] > 0]
    others.append((kind, ahead))
  every = [sweep.label(task, k) for k, a in others if len(a) == len(held)]
  some = [f"{sweep.label(task, k)} on {_splits_text(a, held)}" for k, a in others
          if 0 < len(a) < len(held)]
  none = [sweep.label(task, k) for k, a in others if not a]
  return (f"**What extrapolates in depth on Dyck, against the whole field (`converged`, "
          f"{len(sweep.scratch(task))} kinds, 2 layers, closing-bracket accuracy): no single "
          f"scheme.** First on each held-out split: {'; '.join(firsts)}; over the held-out "
          f"splits (each seed's mean) {_first(sweep, task, None)}. Issue 31's targets: "
          f"{'; '.join(_targets(sweep, task))}. Ahead of RoPE (paired interval excluding zero) "
          f"on every held-out split: {join(every)}; on some: {join(some)}; on none: "
          f"{join(none)}. The rotary kinds: on `test_depth` "
          + ("none is told apart from RoPE" if not depth_called else
             f"{join([sweep.label(task, k) for k in depth_called])} told apart from RoPE")
          + f"; on the other splits {join(rotary_lines)}; {join(level)} on none. Learnable "
          "spectra do not move a rotary model out of the rotary cluster.")


def field_listops(sweeps: dict[str, Sweep]) -> str:
  sweep, task = sweeps["converged"], "listops_depth"
  depth, length = sweep.values(task, "test_depth"), sweep.values(task, "test_length")
  order = ranked(depth)
  ahead = [(k, d) for k in order if k != REFERENCE
           if (d := minus(depth[k], depth[REFERENCE])) is not None and d["decided"]
           and d["mean"] > 0]
  behind = [(k, d) for k in order if k != REFERENCE
            if (d := minus(depth[k], depth[REFERENCE])) is not None and d["decided"]
            and d["mean"] < 0]
  missing = [(t, g, landed, planned) for t, arm, g, landed, planned in sweep.pending()
             if t == task and arm == "scratch" and g not in question_rules.CANDIDATES]
  nope = minus(depth["nope"], depth[REFERENCE]) if "nope" in depth else None
  pending = ""
  if missing:
    pending = (" Provisional: " + join([f"`{g}` ({len(landed)} of {len(planned)} seeds)"
                                        for _, g, landed, planned in missing])
               + " have not all landed here, so this ranking waits on them.")
  return (f"**On `listops_depth` (`converged`, {len(sweep.scratch(task))} kinds landed, 2 "
          f"layers, token accuracy) deeper lists are solved by no scheme.** First on "
          f"`test_depth`: {_first(sweep, task, 'test_depth')} (RoPE {mean(depth[REFERENCE])}, "
          f"rank {order.index(REFERENCE) + 1}); ahead of RoPE by a paired interval excluding "
          f"zero: {join([f'{sweep.label(task, k)} {iv(d, True)}' for k, d in ahead])}; behind "
          f"it: {len(behind)} kinds, NoPE among them ({mean(depth['nope'])}, {iv(nope, True)})."
          f" Longer lists are solved: first on `test_length` "
          f"{_first(sweep, task, 'test_length')}, RoPE {mean(length[REFERENCE])}."
          + pending + " " + across_tasks(sweep))


def across_tasks(sweep: Sweep, first: str = "dyck", second: str = "listops_depth") -> str:
  """Spearman's rank correlation of the two tasks' kinds (the report's "Across tasks")."""
  shared = rank_comparison_shared(sweep, first, second)
  if shared is None:
    return ""
  rho = []
  for split in ("test_length", "test_depth"):
    means = [{k: float(np.mean(list(v.values()))) for k, v in side[split].items()}
             for side in shared]
    r = stats.spearman(means[0], means[1])
    p = stats.spearman_permutation_p(means[0], means[1])
    rho.append(f"on `{split}` {r:+.2f} (permutation p {p:.2g})")
  return (f"What extrapolates on Dyck does not carry over: the kinds' ranks on the two tasks "
          f"correlate (Spearman) {join(rho)}.")


def rank_comparison_shared(sweep: Sweep, first: str, second: str):
  shared = rank_comparison_report._shared((sweep.groups(first), sweep.groups(second)))  # pylint: disable=protected-access
  return None if shared is None else shared[4]


def size_verdict(sweeps: dict[str, Sweep]) -> str:
  """2 against 5 layers on `listops_depth`, each kind's mean."""
  sweep = sweeps["converged"]
  small, large = "listops_depth", "listops_depth_5layer"
  kinds = [k for k in sweep.scratch(large) if k in sweep.scratch(small)]
  moves = {}
  for split in ("test_length", "test_depth"):
    a, b = sweep.values(small, split), sweep.values(large, split)
    moves[split] = {k: (mean(a[k]), mean(b[k])) for k in kinds}
  up = {split: [k for k, (x, y) in m.items() if float(y) > float(x)] for split, m in moves.items()}
  def fmt(split, ks):
    return join([f"{k} {moves[split][k][0]} -> {moves[split][k][1]}" for k in ks])
  down = [k for k in kinds if k not in up["test_depth"]]
  length_all = len(up["test_length"]) == len(kinds)
  gains = ("every kind gains" if length_all
           else f"{len(up['test_length'])} of {len(kinds)} kinds gain")
  return (f"**Model size on `listops_depth` (2 layers against the benchmark's 5; "
          f"{len(kinds)} kinds, `converged`): {gains} on longer lists, "
          f"{len(up['test_depth'])} of {len(kinds)} on deeper ones.** "
          f"Longer lists: {fmt('test_length', up['test_length'])}. Deeper lists: "
          f"{fmt('test_depth', up['test_depth']) or 'no kind'} "
          f"{'gains' if len(up['test_depth']) == 1 else 'gain'}; "
          f"{fmt('test_depth', down) or 'no kind'} do not.")


def five_layer_dyck(sweeps: dict[str, Sweep]) -> str:
  sweep, task = sweeps["converged"], "dyck_5layer"
  held = sweep.held_out(task)
  firsts = [f"`{split}` {_first(sweep, task, split)}" for split in held]
  missing = [(g, landed, planned) for t, arm, g, landed, planned in sweep.pending()
             if t == task and arm == "scratch" and g not in question_rules.CANDIDATES]
  return (f"**Dyck at the benchmark's 5-layer size (`dyck_5layer`, "
          f"{len(sweep.scratch(task))} kinds landed).** First on each held-out split: "
          f"{'; '.join(firsts)}."
          + (" Provisional: the five best of the 2-layer roster run here, and "
             + join([f"`{g}` ({len(landed)} of {len(planned)} seeds)"
                     for g, landed, planned in missing])
             + " have not landed yet: the 5-layer leaderboard waits on them." if missing else ""))


def chomsky_verdict(sweeps: dict[str, Sweep]) -> str:
  sweep = sweeps["converged_chomsky"]
  out = []
  for task in sweep.table:
    values = sweep.values(task, "che") if "che" in sweep.held_out(task) else None
    if not values:
      continue
    groups = sweep.groups(task)
    gains = []
    for kind in ranked(values):
      base = kind[len("randomized_"):] if kind.startswith("randomized_") else None
      if base and ("scratch", base) in groups:
        d = paired(groups, ("scratch", kind), ("scratch", base),
                   lambda s: metric_value(s, "che", "che_score"))
        if d is not None:
          gains.append(d["mean"])
    order = ranked(values)
    top = order[:5]
    out.append(f"**`{task}` (`converged_chomsky`, {len(order)} kinds, the Chomsky-hierarchy "
               f"score): only randomization extrapolates in length.** First: "
               + join([f"{sweep.label(task, k)} {mean(values[k])}" for k in top])
               + f"; each randomized encoding minus its base averages {np.mean(gains):+.3f} "
               f"(the Randomization table; Ruoss et al. 2023 report +12.0% over their 15 "
               f"tasks); RoPE {mean(values[REFERENCE])}, bifocal heads "
               f"{mean(values['bifocal_heads'])}, all-spectral {mean(values['spectral'])}.")
  return " ".join(out)

