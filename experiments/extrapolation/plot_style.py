"""Line styles for plots with one line per position kind, readable at roster size.

With the whole roster (two dozen kinds) matplotlib's default cycle repeats its
ten colours, so two kinds share a line. Here a kind's colour says its family
(its scheme's interface: rotary blues, additive biases oranges, absolute
embeddings greens, data-dependent attention purples, NoPE black, mixed
kinds reds), its shade, line style and marker tell the family's members
apart, and `rope`, the kind every other is paired against, is drawn heavier.

Seed intervals with two seeds (a t-interval's 12.7 standard errors) span more
than the unit interval and hide every other line; `band` draws none below
`MIN_BAND_SEEDS` seeds and clips the rest to accuracy's [0, 1].
"""

from __future__ import annotations

import os

from bifocal_jax.nn import positions

FAMILY_COLORMAPS = {"none": "Greys", "rotary": "Blues", "bias": "Oranges",
                    "absolute": "Greens", "attention": "Purples", "mixed": "Reds"}
FAMILY_ORDER = tuple(FAMILY_COLORMAPS)
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
REFERENCE = "rope"
MIN_BAND_SEEDS = 3


def kind_of(group: str) -> str:
  """The registered position kind a run group is of: the group itself, a mixed
  kind `a+b`, or the longest registered kind it starts with
  (`bifocal_heads` -> `bifocal`, `rope_base1e3` -> `rope`); "" for none."""
  if positions.is_valid_kind(group):
    return group
  starts = [k for k in positions.POSITION_KINDS if group.startswith(k)]
  return max(starts, key=len) if starts else ""


def family(group: str) -> str:
  """The colour family of a run group: its scheme's interface ("none" for an
  unknown group, drawn grey)."""
  kind = kind_of(group)
  return positions.get(kind).interface if kind else "none"


def kind_styles(groups) -> dict[str, dict]:
  """`{group: matplotlib line keywords}` (color, linestyle, marker, lw), one
  distinct style per group; the same groups get the same styles whatever
  order they come in."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  order = {k: i for i, k in enumerate(positions.POSITION_KINDS)}
  by_family: dict[str, list[str]] = {}
  for group in sorted(set(groups), key=lambda g: (order.get(kind_of(g), len(order)), g)):
    by_family.setdefault(family(group), []).append(group)
  styles = {}
  for name in FAMILY_ORDER:
    members = by_family.get(name, [])
    cmap = matplotlib.colormaps[FAMILY_COLORMAPS[name]]
    for i, group in enumerate(members):
      # Shades from mid to dark: the light end of a sequential map vanishes on white.
      shade = 0.85 if len(members) == 1 else 0.45 + 0.5 * i / (len(members) - 1)
      styles[group] = {
          "color": (0.0, 0.0, 0.0, 1.0) if name == "none" and i == 0 else cmap(shade),
          "linestyle": LINESTYLES[i % len(LINESTYLES)],
          "marker": MARKERS[i % len(MARKERS)],
          "lw": 2.4 if group == REFERENCE else 1.2,
      }
  return styles


def band(ci95, seeds: int):
  """The (lo, hi) to shade for a seed interval, clipped to [0, 1]; None below
  `MIN_BAND_SEEDS` seeds or without an interval."""
  if ci95 is None or seeds < MIN_BAND_SEEDS:
    return None
  lo, hi = ci95
  return max(0.0, lo), min(1.0, hi)


def error_bar(interval: dict):
  """matplotlib's `[[below], [above]]` of a `stats.seed_interval` (None for one seed)."""
  if interval["ci95"] is None:
    return None
  return [[interval["mean"] - interval["ci95"][0]], [interval["ci95"][1] - interval["mean"]]]


def kinds_scatter(ax, points: dict[str, tuple[dict, dict]]) -> None:
  """Each kind a labelled point at its mean on two axes, `points`: {kind:
  (x interval, y interval)} (`stats.seed_interval`s), with its seed
  intervals as error bars, in its `kind_styles` colour and marker; the
  legend counts its seeds (x / y where they differ)."""
  styles = kind_styles(points)
  for kind, (x, y) in points.items():
    style = styles[kind]
    seeds = (f"{x['n']} seed{'s' * (x['n'] > 1)}" if x["n"] == y["n"]
             else f"{x['n']} / {y['n']} seeds")
    ax.errorbar(x["mean"], y["mean"], xerr=error_bar(x), yerr=error_bar(y), color=style["color"],
                marker=style["marker"], ms=5, lw=0.8, capsize=2, label=f"{kind} ({seeds})")
    ax.annotate(kind, (x["mean"], y["mean"]), textcoords="offset points", xytext=(4, 3),
                fontsize=6, color=style["color"])


def legend_outside(fig, axes) -> None:
  """One legend for the figure, right of the panels (a roster's legend covers a panel)."""
  seen = {}
  for ax in axes.flat:
    for handle, label in zip(*ax.get_legend_handles_labels()):
      seen.setdefault(label, handle)
  labels, handles = list(seen), list(seen.values())
  if handles:
    right = max(ax.get_position().x1 for ax in axes.flat if ax.get_visible())
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(right + 0.01, 0.5), fontsize=7,
               ncol=1 if len(labels) <= 14 else 2, frameon=False)


def save(fig, axes, path: str, title: str, **title_keywords) -> str:
  """Finishes a report figure as every plot of the report does: the legend
  outside its panels, `title` above, written to `path` (its folder made),
  closed; returns `path`."""
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  legend_outside(fig, axes)
  fig.suptitle(title, fontsize=9, **title_keywords)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fig.savefig(path, dpi=90, bbox_inches="tight")
  plt.close(fig)
  return path
