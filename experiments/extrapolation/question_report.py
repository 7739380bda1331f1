"""The pre-registered question's answer (`question_rules.py`,
`results/converged/PREREGISTRATION.md`): can one scheme extrapolate both
deeper and longer?

`section(sweep, costs)` is the converged page's section: per task the
candidates beside the references they are paired with (RoPE, PaTH and the
recency kinds), each held-out split's mean over seeds [95% interval] in the
leaderboards' metric, their paired differences (same seeds), where depth is
held by the probes (the last layer's depth probe, the attention on the
matching bracket), the step time over RoPE's, and on Dyck which schemes (candidates and roster alike) meet
both targets. `verdict(sweep)` is RESULTS.md's line, its numbers the
section's. Until every candidate cell has its seeds, both say how many
runs landed and call nothing answered.
"""

from __future__ import annotations

from experiments.extrapolation import probe_report
from experiments.extrapolation import question_rules
from experiments.extrapolation import roster_rules
from experiments.extrapolation.committed_sweeps import Sweep, interval, join, minus
from experiments.extrapolation.report_tables import METRIC_NAMES, fmt_interval, markdown_table

REFERENCES = ("rope", "path", "alibi", "stickbreaking")
TASKS = (roster_rules.DYCK, roster_rules.LISTOPS, roster_rules.DYCK_5LAYER)
TARGET_TASK = roster_rules.DYCK


def _candidates(sweep: Sweep, task: str) -> list[str]:
  """The candidates planned (or landed) on `task`."""
  return [k for k in question_rules.CANDIDATES
          if (task, "scratch", k) in sweep.planned or k in sweep.scratch(task)]


def _seeds(sweep: Sweep, task: str, kind: str) -> tuple[int, int]:
  """(landed, planned) seeds of a candidate's cell: the preset's seeds at least,
  so that a cell is never complete before the registered 5."""
  have, want = sweep.seeds(task, kind)
  return have, max(want, len(sweep.preset.seeds))


def landed(sweep: Sweep) -> tuple[int, int]:
  """(runs landed, runs planned) of the question's cells, every task."""
  done = planned = 0
  for task in TASKS:
    for kind in _candidates(sweep, task):
      have, want = _seeds(sweep, task, kind)
      done, planned = done + have, planned + want
  return done, planned


def _complete(sweep: Sweep, task: str) -> bool:
  kinds = _candidates(sweep, task)
  return bool(kinds) and all(_seeds(sweep, task, k)[0] >= _seeds(sweep, task, k)[1] for k in kinds)


def meeting_targets(sweep: Sweep) -> list[str]:
  """Every scratch kind on Dyck whose mean over seeds meets every target."""
  targets = [(split, value) for name, split, value in sweep.preset.targets if name == TARGET_TASK]
  values = {split: sweep.values(TARGET_TASK, split) for split, _ in targets}
  kinds = sweep.scratch(TARGET_TASK)
  return [k for k in kinds
          if all(k in values[s] and _mean(values[s][k]) >= v for s, v in targets)]


def _mean(values: dict[int, float]) -> float:
  return sum(values.values()) / len(values)


def _task_table(sweep: Sweep, task: str, kinds: list[str]) -> str:
  held = sweep.held_out(task)
  rows = [["position", "seeds", *[f"`{s}`" for s in held]], ["---"] * (len(held) + 2)]
  for kind in kinds:
    cells = [sweep.values(task, s).get(kind) for s in held]
    if any(cells):
      rows.append([f"`{kind}`", str(sweep.seeds(task, kind)[0]),
                   *[interval(c) if c else "-" for c in cells]])
  return markdown_table(rows)


def _paired_table(sweep: Sweep, task: str, kinds: list[str]) -> str:
  held = sweep.held_out(task)
  rows = [["difference", *[f"`{s}`" for s in held]], ["---"] * (len(held) + 1)]
  for kind in kinds:
    for ref in REFERENCES:
      diffs = [minus(sweep.values(task, s).get(kind, {}), sweep.values(task, s).get(ref, {}))
               for s in held]
      if any(diffs):
        rows.append([f"`{kind}` - `{ref}`", *[fmt_interval(d, signed=True) for d in diffs]])
  return markdown_table(rows) if len(rows) > 2 else ""


def _probe_table(sweep: Sweep, task: str, kinds: list[str]) -> str:
  """Where depth is held, per kind (mean over its probed seeds): the depth
  probe's accuracy at the last layer on `test_depth` and on its depths deeper
  than any trained on, and the attention on the matching bracket (mean over
  the kind's eyes; seeds whose weights were not read are left out)."""
  rows = [["position", "seeds probed", "depth probe, `test_depth`", "its unseen depths",
           "matching-bracket mass"], ["---"] * 5]
  for kind in kinds:
    probes = [s for s in sweep.scratch(task).get(kind, {}).values() if s.get("probe")]
    if not probes:
      continue
    cells = []
    for key in ("accuracy", "unseen_accuracy"):
      values = [v for s in probes if (v := s["probe"]["depth"]["test_depth"][key][-1]) is not None]
      cells.append(f"{_mean(dict(enumerate(values))):.3f}" if values else "-")
    masses = [m for s in probes if (m := probe_report.kind_mass(s, "match_mass")) is not None]
    rows.append([f"`{kind}`", str(len(probes)), *cells,
                 f"{_mean(dict(enumerate(masses))):.3f} ({len(masses)} seeds)" if masses else "-"])
  return markdown_table(rows) if len(rows) > 2 else ""


def _costs_line(kinds: list[str], costs: tuple[tuple[str, ...], dict[str, list[float]]]) -> str:
  configs, kind_costs = costs
  measured = [f"`{k}` {' / '.join(f'{r:.2f}x' for r in kind_costs[k])}"
              for k in kinds if k in kind_costs]
  if not measured:
    return "Step time over RoPE's: not measured yet."
  return (f"Training step time over RoPE's, measured in one interleaved run "
          f"(`python -m benchmarks.step_benchmark`, configs {' / '.join(configs)}): "
          f"{join(measured)}.")


def section(sweep: Sweep, costs=((), {})) -> str:
  """The converged page's section on the question (empty for a sweep without it)."""
  done, planned = landed(sweep)
  if not planned:
    return ""
  parts = ["### The question: deeper and longer with one scheme (pre-registered)", "",
           "Registered on 2026-12-07 before any of its runs ([PREREGISTRATION.md]"
           "(PREREGISTRATION.md)): the candidates "
           f"{join([f'`{k}`' for k in question_rules.CANDIDATES])} from scratch, 5 seeds, on "
           "Dyck and `listops_depth` (2 layers), then the best of them on Dyck at 5 layers. "
           f"Runs landed: {done} of {planned}. The target: on Dyck (2 layers), one scheme with "
           + join([f"mean closing-bracket accuracy >= {v:g} on `{s}`"
                   for name, s, v in sweep.preset.targets if name == TARGET_TASK]) + ".", ""]
  for task in TASKS:
    kinds = _candidates(sweep, task)
    if not any(k in sweep.scratch(task) for k in kinds):
      continue
    metric = METRIC_NAMES[sweep.metric(task)]
    refs = [k for k in REFERENCES if k in sweep.scratch(task)]
    parts += [f"`{task}`, {metric}, mean over seeds [95% interval]:", "",
              _task_table(sweep, task, kinds + refs), ""]
    diffs = _paired_table(sweep, task, kinds)
    if diffs:
      parts += ["Paired against the references (same seeds; **bold**: the interval excludes "
                "zero):", "", diffs, ""]
    probes = _probe_table(sweep, task, kinds + refs)
    if probes:
      parts += ["Where depth is held (the probes, `test_depth`; the task's probe section above "
                "has every kind and eye):", "", probes, ""]
  parts += [_costs_line(_candidates(sweep, TARGET_TASK), costs), "", verdict(sweep)]
  return "\n".join(parts)


def verdict(sweep: Sweep) -> str:
  """RESULTS.md's line: the answer, or how many of the runs have landed."""
  done, planned = landed(sweep)
  head = "**Deeper and longer with one scheme (pre-registered): "
  if not _complete(sweep, TARGET_TASK):
    return (head + f"not answered yet.** {done} of the {planned} runs planned so far have landed; the "
            "Dyck cells decide it, and none is called before all of their seeds are in.")
  targets = [(s, v) for name, s, v in sweep.preset.targets if name == TARGET_TASK]
  best = {s: max(sweep.values(TARGET_TASK, s).items(), key=lambda kv: _mean(kv[1]))
          for s, _ in targets}
  reached = meeting_targets(sweep)
  answer = (f"yes: {join([f'`{k}`' for k in reached])}.** " if reached else
            "no scheme does.** ")
  cand = [f"`{k}` " + ", ".join(f"`{s}` {interval(sweep.values(TARGET_TASK, s)[k])}"
                                for s, _ in targets)
          for k in _candidates(sweep, TARGET_TASK) if k in sweep.scratch(TARGET_TASK)]
  firsts = [f"`{s}` (target {v:g}): `{best[s][0]}` {interval(best[s][1])}"
            for s, v in targets]
  return (head + answer + "The candidates on Dyck (2 layers): " + "; ".join(cand)
          + ". Best of every kind: " + "; ".join(firsts) + ".")

