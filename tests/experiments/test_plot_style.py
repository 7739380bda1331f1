"""Line styles for one-line-per-kind plots (experiments/extrapolation/plot_style.py)."""

import matplotlib

from bifocal_jax.nn import positions
from experiments.extrapolation import plot_style

# Every registered kind, the sweeps' group names that are not kinds, and mixed kinds.
GROUPS = (*positions.POSITION_KINDS, "bifocal_heads", "bifocal_pairs", "rope_base1e3",
          "rope+cope", "spectral+alibi")


def _key(style):
  return (tuple(style["color"]), style["linestyle"], style["marker"])


def test_every_group_gets_its_own_style():
  styles = plot_style.kind_styles(GROUPS)
  assert set(styles) == set(GROUPS)
  assert len({_key(s) for s in styles.values()}) == len(GROUPS)


def test_a_group_keeps_its_style_whatever_order_the_groups_come_in():
  forward = plot_style.kind_styles(GROUPS)
  backward = plot_style.kind_styles(tuple(reversed(GROUPS)))
  assert {g: _key(s) for g, s in forward.items()} == {g: _key(s) for g, s in backward.items()}


def test_colour_says_the_family_and_rope_is_drawn_heavier():
  styles = plot_style.kind_styles(GROUPS)
  for group in ("rope", "spectral", "bifocal_heads", "randomized_rope"):
    r, _, b, _ = styles[group]["color"]
    assert b > r, group  # blues
  for group in ("alibi", "t5", "fire", "kerple_log"):
    r, _, b, _ = styles[group]["color"]
    assert r > b, group  # oranges
  for group in ("sin_cos", "learnt"):
    r, g, b, _ = styles[group]["color"]
    assert g > max(r, b), group  # greens
  assert styles["nope"]["color"] == (0.0, 0.0, 0.0, 1.0)
  assert styles["rope"]["lw"] > max(s["lw"] for g, s in styles.items() if g != "rope")
  assert matplotlib.colors.is_color_like(styles["rope+cope"]["color"])


def test_kind_of_a_group():
  assert plot_style.kind_of("bifocal_heads") == "bifocal"
  assert plot_style.kind_of("rope_base1e3") == "rope"
  assert plot_style.kind_of("randomized_rope") == "randomized_rope"  # not `rope`
  assert plot_style.kind_of("rope+cope") == "rope+cope"
  assert plot_style.kind_of("unknown") == ""
  assert plot_style.family("rope+cope") == "mixed"
  assert plot_style.family("unknown") == "none"


def test_band_needs_three_seeds_and_stays_in_the_unit_interval():
  assert plot_style.band((-0.4, 1.3), 2) is None
  assert plot_style.band(None, 5) is None
  assert plot_style.band((-0.4, 1.3), 3) == (0.0, 1.0)
  assert plot_style.band((0.2, 0.6), 5) == (0.2, 0.6)


def test_kinds_scatter_labels_each_kind_with_its_seeds_on_each_axis():
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  from bifocal_jax.evaluation import stats  # pylint: disable=g-import-not-at-top
  three, one = stats.seed_interval([0.5, 0.6, 0.7]), stats.seed_interval([0.8])
  fig, ax = plt.subplots()
  plot_style.kinds_scatter(ax, {"rope": (three, three), "alibi": (three, one)})
  assert sorted(ax.get_legend_handles_labels()[1]) == ["alibi (3 / 1 seeds)", "rope (3 seeds)"]
  assert sorted(t.get_text() for t in ax.texts) == ["alibi", "rope"]
  plt.close(fig)
