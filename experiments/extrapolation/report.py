"""The extrapolation benchmark's report, rebuilt from the committed run summaries alone.

`report(preset, results_dir)` reads `results_dir/**/seed*.json` (what
`run_summary.summary_of` wrote) and `budgets.json`, and returns markdown:

  * the calibrated budgets (and the tasks not learned at them);
  * the runs landed of each part of the preset, and the CPU hours left
    (`progress_report.py`);
  * per task, accuracy per position kind and split: the mean over seeds with a
    95% t-interval (`bifocal_jax.evaluation.stats.seed_interval`);
  * with `preset.leaderboards`, per held-out split the kinds ranked, each
    with its interval, its paired difference from `rope`, how many seeds
    reach the split's target (`preset.targets`) and its step time
    (`leaderboard_report.py`);
  * per split, paired comparisons against `rope` (same seeds, same data): the
    mean difference and its 95% interval; a difference is called only where
    the interval excludes zero (`stats.paired_difference`);
  * the paper's protocol (surgery vs continue), each randomized encoding
    against its base, each mixed kind `a+b` against `a`, `b` and `rope+b`,
    and the sensitivity settings, paired the same way; across
    the Chomsky-hierarchy tasks, the randomized encodings' gain set beside
    Ruoss et al. 2023's;
  * where a preset adds seeds to some cells after seeing the first ones
    (`seed_extensions`), the same tables on the added seeds alone: a
    replication the choice to add them cannot have biased;
  * accuracy against training steps (`training_time_report.py`), and a task
    at two model sizes and two tasks with one model (`rank_comparison_report.py`);
  * the pre-registered question, deeper and longer with one scheme
    (`question_report.py`);
  * what the fixes of schemes changed: the withdrawn summaries
    (`superseded.json`) against their reruns (`fix_report.py`);
  * the learned spectra: drift and harmonic fit against the geometric start;
  * the mechanism probes, each eye also against the same heads of the RoPE
    run of its seed (`probe_report.py`);
  * a plot per task of accuracy against length and depth (mean over seeds;
    `depth_length_plot.py`).

Where the report goes, a preset's page or a generated block of a file:
`report_pages.py`.
"""

from __future__ import annotations

import os

import numpy as np

from bifocal_jax.evaluation import stats
from experiments.extrapolation import committed_sweeps
from experiments.extrapolation import depth_length_plot
from experiments.extrapolation import fix_report
from experiments.extrapolation import leaderboard_report
from experiments.extrapolation import probe_report
from experiments.extrapolation import progress_report
from experiments.extrapolation import question_report
from experiments.extrapolation import rank_comparison_report
from experiments.extrapolation import superseded
from experiments.extrapolation import training_time_report
from experiments.extrapolation.report_tables import (
    fmt_interval, markdown_table, metric_value, scratch_first, seed_values)
from experiments.extrapolation.run_summary import cells, load_budgets, load_summaries


def accuracy_table(groups: dict, splits: list[str], metric: str, *, with_loss: bool = True,
                   scratch: bool = True, learned: float | None = None) -> str:
  """Rows: position kinds of the scratch arm (`scratch`), or every other arm's
  cells; cells: mean [95% interval] over seeds. `learned`: a column counting
  the seeds whose valid accuracy reaches it (a mean hides a bimodal cell)."""
  fits = learned is not None and "valid" in splits
  header = ["position" if scratch else "position (arm)", "seeds",
            *([f"fit (valid >= {learned:g})"] if fits else []),
            *(["final train loss"] if with_loss else []), *splits]
  rows = [header, ["---"] * len(header)]
  for (arm, group), runs in groups.items():
    if (arm == "scratch") != scratch:
      continue
    row = [group if scratch else f"{group} ({arm})", str(len(runs))]
    if fits:
      valid = seed_values(runs, "valid", "accuracy").values()
      row.append(f"{sum(v >= learned for v in valid)}/{len(valid)}")
    losses = [s["final_train_loss"] for s in runs.values() if s["final_train_loss"] is not None]
    if with_loss:
      row.append(fmt_interval(stats.seed_interval(losses)) if losses else "-")
    for split in splits:
      values = list(seed_values(runs, split, metric).values())
      row.append(fmt_interval(stats.seed_interval(values)) if values else "-")
    rows.append(row)
  return markdown_table(rows) if len(rows) > 2 else ""


def paired_table(groups: dict, splits: list[str], metric: str,
                 pairs: list[tuple[tuple[str, str], tuple[str, str]]], *,
                 with_loss: bool = True) -> str:
  """Rows: `a - b` for each pair of cells; for the final training loss
  (`with_loss`) and per split, the mean paired difference over the seeds both
  have, with its 95% interval (bold: decided)."""
  loss = [("final train loss", lambda s: s.get("final_train_loss"))] if with_loss else []
  columns = loss + [(split, lambda s, split=split: metric_value(s, split, metric)) for split in splits]
  header = ["difference", "seeds", *(name for name, _ in columns)]
  rows = [header, ["---"] * len(header)]
  for a, b in pairs:
    if a not in groups or b not in groups:
      continue
    seeds = sorted(set(groups[a]) & set(groups[b]))
    if not seeds:
      continue
    row = [f"{a[1]} ({a[0]}) - {b[1]} ({b[0]})", str(len(seeds))]
    for _, value in columns:
      va, vb = ({s: v for s in seeds if (v := value(cell[s])) is not None}
                for cell in (groups[a], groups[b]))
      common = [s for s in seeds if s in va and s in vb]
      row.append(fmt_interval(stats.paired_difference([va[s] for s in common],
                                                       [vb[s] for s in common]), signed=True)
                 if common else "-")
    rows.append(row)
  return markdown_table(rows) if len(rows) > 2 else ""


def spectrum_table(groups: dict) -> str:
  header = ["position (arm)", "seeds", "mean abs log drift", "harmonic score (learned)",
            "explained (learned)", "harmonic score (geometric start)"]
  rows = [header, ["---"] * len(header)]
  for (arm, group), runs in scratch_first(groups):
    spectra = [s["spectrum"] for s in runs.values() if s.get("spectrum")]
    if not spectra:
      continue
    rows.append([f"{group} ({arm})", str(len(spectra))] + [
        fmt_interval(stats.seed_interval([sp[key] for sp in spectra]))
        for key in ("drift", "harmonic_score", "fraction_explained", "geometric_score")])
  return markdown_table(rows) if len(rows) > 2 else ""


def _pairs(groups: dict) -> dict[str, list]:
  """The comparisons the report makes, by section: every scratch kind against
  `rope`; surgery against continue; each randomized kind against its base; each
  mixed kind against each of its two kinds; each sensitivity setting against
  its kind at the default settings, and bifocal against `rope` at the same
  setting."""
  kind_of = {key: next(iter(runs.values()))["kind"] for key, runs in groups.items()}
  versus_rope = [(key, ("scratch", "rope")) for key in groups
                 if key[0] == "scratch" and key[1] != "rope"]
  protocol = [(("surgery", "bifocal_heads"), ("continue", "rope"))]
  randomization = _randomized_pairs(groups)
  mixed = _mixed_pairs(groups)
  sensitivity = []
  for key in groups:
    if key[0] != "sensitivity":
      continue
    kind = kind_of[key]
    label = key[1][len(kind) + 1:]
    sensitivity.append((key, ("scratch", kind)))
    if kind != "rope" and ("sensitivity", f"rope_{label}") in groups:
      sensitivity.append((key, ("sensitivity", f"rope_{label}")))
  return dict(versus_rope=versus_rope, protocol=protocol, randomization=randomization,
              mixed=mixed, sensitivity=sensitivity)


RANDOMIZED = "randomized_"


def _randomized_pairs(groups: dict) -> list:
  """Each scratch `randomized_<kind>` cell against its `<kind>` cell, where both ran."""
  return [(key, ("scratch", key[1][len(RANDOMIZED):])) for key in groups
          if key[0] == "scratch" and key[1].startswith(RANDOMIZED)
          and ("scratch", key[1][len(RANDOMIZED):]) in groups]


def _mixed_pairs(groups: dict) -> list:
  """Each scratch `a+b` cell (heads split between two kinds) against its `a`
  cell and its `b` cell, where they ran (does mixing beat either alone?), and
  against `rope+b` (other eyes beside the same `b` heads: bifocal's question)."""
  out = []
  for key in groups:
    if key[0] == "scratch" and key[1].count("+") == 1:
      first, second = key[1].split("+")
      out += [(key, ("scratch", part)) for part in (first, second)
              if ("scratch", part) in groups]
      if first != "rope" and ("scratch", f"rope+{second}") in groups:
        out.append((key, ("scratch", f"rope+{second}")))
  return out


def randomization_section(table: dict) -> str:
  """Ruoss et al. 2023's comparison on the tasks scored by the Chomsky-hierarchy
  protocol (split `che`, its score `che_score`: the mean over test lengths of
  per-length accuracy): each `randomized_<kind>` against `<kind>`, the mean
  paired difference over the seeds both have [95% interval] and the
  difference of their best seeds (the paper reports the best model of a
  sweep over seeds and learning rates: RESULTS.md says what of its protocol
  could be checked); last, the mean over the rows: the figure to set beside
  the paper's "+12.0% on average" (its abstract)."""
  rows = [["task", "randomized - base", "seeds", "mean paired difference",
           "best seed: randomized / base (difference)"], ["---"] * 5]
  means, bests = [], []
  for task, groups in table.items():
    for a, b in _randomized_pairs(groups):
      va, vb = (seed_values(groups[key], "che", "che_score") for key in (a, b))
      seeds = sorted(set(va) & set(vb))
      if not seeds:
        continue
      paired = stats.paired_difference([va[s] for s in seeds], [vb[s] for s in seeds])
      best_a, best_b = max(va[s] for s in seeds), max(vb[s] for s in seeds)
      means.append(paired["mean"])
      bests.append(best_a - best_b)
      rows.append([task, f"{a[1]} - {b[1]}", str(len(seeds)), fmt_interval(paired, signed=True),
                   f"{best_a:.3f} / {best_b:.3f} ({best_a - best_b:+.3f})"])
  if not means:
    return ""
  rows.append([f"mean over the {len(means)} rows", "", "", f"{np.mean(means):+.3f}",
               f"({np.mean(bests):+.3f})"])
  return ("Randomized encodings against their base encodings (Ruoss et al. 2023) on the "
          "Chomsky-hierarchy protocol's score (`che`: mean over test lengths of per-length "
          "accuracy), paired over seeds; their headline, +12.0% on average over 15 tasks and "
          "their encodings, is of the best model of a sweep over seeds and learning rates, "
          "so the best-seed column is the nearer reading:\n\n" + markdown_table(rows))


def replication(groups: dict, splits: list[str], seeds: tuple[int, ...],
                kinds: tuple[str, ...], *, learned: float | None = None) -> str:
  """The scratch cells of `kinds` restricted to `seeds`, and their paired
  differences from `rope` on those seeds alone."""
  added = {key: {seed: runs[seed] for seed in seeds if seed in runs}
           for key, runs in groups.items() if key[0] == "scratch" and key[1] in kinds}
  added = {key: runs for key, runs in added.items() if runs}
  if not added:
    return ""
  return "\n\n".join([
      f"Seeds {', '.join(map(str, seeds))} alone (added after the first seeds had landed, so "
      "a replication of what those showed), token accuracy:",
      accuracy_table(added, splits, "accuracy", learned=learned),
      "Paired against `rope` on those seeds alone:",
      paired_table(added, splits, "accuracy", _pairs(added)["versus_rope"])])


def task_section(task: str, groups: dict, plots_dir: str, link_base: str, *,
                 learned: float | None = None,
                 extensions: tuple[tuple[tuple[int, ...], tuple[str, ...]], ...] = (),
                 targets: dict[str, float] | None = None, costs=((), {})) -> str:
  splits = list(dict.fromkeys(split for runs in groups.values() for s in runs.values()
                              for split in s["splits"]))
  any_run = next(iter(next(iter(groups.values())).values()))
  parts = [f"### {task}", "",
           f"Config `{any_run['config']}` with the overrides recorded in each summary; "
           f"{any_run['steps'] if any_run['arm'] == 'scratch' else any_run['budget']} steps "
           "from scratch. Token accuracy, mean over seeds [95% t-interval]:", "",
           accuracy_table(groups, splits, "accuracy", learned=learned)]
  closing = any(metric_value(s, splits[0], "close_accuracy") is not None
                for runs in groups.values() for s in runs.values())
  if closing:
    parts += ["", "Closing-bracket accuracy of Yao et al. 2021:", "",
              accuracy_table(groups, splits, "close_accuracy", with_loss=False)]
  others = accuracy_table(groups, splits, "accuracy", scratch=False, learned=learned)
  if others:
    parts += ["", "The other arms (below, paired), token accuracy, mean over seeds:", "", others]
  pairs = _pairs(groups)
  titles = dict(
      versus_rope="Paired against `rope` (same seeds and data), final training loss and token "
      "accuracy; **bold**: the 95% interval of the difference excludes zero:",
      protocol="The paper's protocol: Surgical Integration of the trained `rope` model into "
      "bifocal attention, then Spectral Evolution, against the same further steps as `rope`:",
      randomization="Randomization (Ruoss et al. 2023): each randomized encoding against its "
      "base encoding, paired (same seeds and data):",
      mixed="Mixed-scheme heads: each `a+b` kind (its heads split between `a` and `b`) "
      "against each of its kinds alone, and against `rope+b`, paired (same seeds and data):",
      sensitivity="Sensitivity (paired against the default setting, and bifocal attention "
      "against `rope` at the same setting: rotary base, learning rate, step budget):")
  for section, title in titles.items():
    table = paired_table(groups, splits, "accuracy", pairs[section])
    if table:
      parts += ["", title, "", table]
    # The paper's own claim, and the mixes against their kinds, are also read
    # in the leaderboards' metric.
    if table and section in ("protocol", "mixed") and closing:
      parts += ["", "The same, closing-bracket accuracy:", "",
                paired_table(groups, splits, "close_accuracy", pairs[section],
                             with_loss=False)]
  if targets is not None:
    board = leaderboard_report.leaderboard(groups, splits, targets, costs)
    if board:
      parts += ["", board]
    png = leaderboard_report.targets_plot(task, groups, targets,
                                          os.path.join(plots_dir, f"targets_{task}.png"))
    if png:
      parts += ["", f"![{task}: every kind against both targets]"
                f"({os.path.relpath(png, link_base)})"]
  for seeds, kinds in extensions:
    table = replication(groups, splits, seeds, kinds, learned=learned)
    if table:
      parts += ["", table]
  curve_parts = training_time_report.training_time_section(task, groups, plots_dir, link_base)
  if curve_parts:
    parts += ["", curve_parts]
  spectra = spectrum_table(groups)
  if spectra:
    parts += ["", "Learned spectra (mean over seeds of each run's mean over its spectral heads):",
              "", spectra]
  probes = probe_report.section(groups)
  if probes:
    parts += ["", probes]
  png = depth_length_plot.plot_task(task, groups, os.path.join(plots_dir, f"extrapolation_{task}.png"))
  if png:
    parts += ["", f"![{task}]({os.path.relpath(png, link_base)})"]
  return "\n".join(parts)


def budgets_section(preset, budgets: dict) -> str:
  if not preset.calibrated:
    rows = [["task", "budget (steps)"], ["---"] * 2]
    rows += [[task.name, str(task.max_steps)] for task in preset.tasks]
    return ("Step budgets: fixed per task (sized to the machine, not calibrated):\n\n"
            + markdown_table(rows))
  rows = [["task", "budget (steps)", "valid accuracy at the budget", "calibrated up to"],
          ["---"] * 4]
  for task in preset.tasks:
    b = budgets.get(task.name)
    if b is None:
      rows.append([task.name, "not calibrated yet", "-", "-"])
      continue
    best = max((a for _, a in b["curve"]), default=None)
    at_budget = next((a for s, a in b["curve"] if s == b["budget"]), None)
    rows.append([task.name, str(b["budget"]) if b["budget"] else "**not learned**",
                 f"{at_budget:.3f}" if at_budget is not None else
                 (f"best {best:.3f}" if best is not None else "-"), str(b["max_steps"])])
  if getattr(preset, "converged", None) is not None:
    rows[0][1] = "convergence budget (steps)"
    rows[0] += ["evaluated every", "just-fit budget"]
    rows[1] += ["---", "---"]
    for row, task in zip(rows[2:], preset.tasks):
      record = budgets.get(task.name) or {}
      just_fit = record.get("just_fit", task.just_fit)  # None: to be read off its curve
      row += [str(record.get("interval", task.interval)),
              "-" if just_fit is None else str(just_fit)]
    return ("Step budgets: `rope` (seed 0) trained to the cap (8x the just-fit budget of the "
            "`cpu` sweep where the CPU affords it; a task without a just-fit sweep has it read "
            "off this curve: the first step at valid accuracy 0.9), valid token accuracy at "
            "each evaluation; the convergence budget is the "
            f"first evaluated step (at least twice the just-fit budget) whose valid accuracy "
            f"gained less than {preset.converged:g} over the last quarter of its steps, or the "
            "cap (`--calibrate`; `run_summary.convergence_budget`):\n\n" + markdown_table(rows))
  return ("Step budgets: the first evaluated step at which `rope` (seed 0) reaches valid "
          "token accuracy 0.9 (`--calibrate`); tasks not learned are left out:\n\n"
          + markdown_table(rows))


def report(preset, results_dir: str, *, link_base: str | None = None,
           plots_dir: str | None = None,
           step_costs_file: str | None = leaderboard_report.STEP_COSTS_FILE) -> str:
  """The markdown report of every summary in `results_dir` (the leaderboards'
  step times from `step_costs_file`; None: no such column)."""
  plots_dir = plots_dir or os.path.join(results_dir, "plots")
  link_base = link_base or results_dir
  summaries = load_summaries(results_dir)
  budgets = load_budgets(results_dir)
  # Runs of tasks not learned at their budget are never made: not counted.
  total = len([r for r in preset.runs()
               if not preset.calibrated or (budgets.get(r.task.name) or {}).get("budget")])
  parts = [f"Runs summarised: {len(summaries)} (of the {total} the preset makes for the tasks "
           f"learned; {len(preset.kinds)} position kinds x {len(preset.seeds)} seeds per task, "
           "plus the protocol and sensitivity arms"
           + (" and further seeds of some cells" if preset.seed_extensions else "")
           + "".join(f"; on {t.name} {len(t.later_kinds)} more kinds (the roster) after them"
                     for t in preset.tasks if t.later_kinds) + ").",
           budgets_section(preset, budgets)]
  if summaries:
    dates = sorted(s["date"] for s in summaries)
    seconds = sum(s["seconds"] for s in summaries)
    parts.append(f"Run between {dates[0]} and {dates[-1]}; {seconds / 3600:.1f} hours of "
                 "training and evaluation in all.")
  table = cells(summaries)
  measured = ((), {}) if step_costs_file is None else leaderboard_report.step_costs(
      step_costs_file)
  parts.append(progress_report.progress_section(preset, table, budgets, measured[1]))
  costs = measured if preset.leaderboards else ((), {})
  for task in [t.name for t in preset.tasks if t.name in table]:
    extensions = tuple((seeds, kinds) for name, seeds, kinds in preset.seed_extensions
                       if name == task)
    parts.append(task_section(task, table[task], plots_dir, link_base, learned=preset.learned,
                              extensions=extensions,
                              targets=({split: value for name, split, value in preset.targets
                                        if name == task} if preset.leaderboards else None),
                              costs=costs))
  sweep = committed_sweeps.of("", results_dir, preset, table, budgets)
  question = question_report.section(sweep, measured)
  if question:
    parts.append(question)
  fixes = fix_report.section(sweep, superseded.load(results_dir))
  if fixes:
    parts.append(fixes)
  sizes = rank_comparison_report.model_size_section(preset, table)
  if sizes:
    parts += ["### Model size", sizes]
  across = rank_comparison_report.cross_task_section(preset, table, plots_dir, link_base)
  if across:
    parts += ["### Across tasks", across]
  randomization = randomization_section(table)
  if randomization:
    parts += ["### Randomization", randomization]
  return "\n\n".join(parts) + "\n"

