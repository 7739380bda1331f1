"""RESULTS.md and the sweeps' pages are the report rebuilt from the committed
summaries in `results/<preset>/` alone (what `python -m
experiments.extrapolation.results_pages` writes), and every decimal number
RESULTS.md quotes is printed by the report of the committed summaries: a
hand-typed number, or one the data no longer gives, fails."""

import os
import re

import pytest

from experiments.extrapolation import committed_sweeps, presets, quoted_numbers, report
from experiments.extrapolation import report_pages, results_summary, runs

RESULTS_MD = os.path.join(runs.REPO, "RESULTS.md")
NAMES = committed_sweeps.PRESET_NAMES
# Pages written before summaries committed since: each fails until regenerated
# (`results_pages --pages NAME`), and then its mark must go (strict).
STALE: dict[str, str] = {}


def _read(path: str) -> str:
  with open(path) as f:
    return f.read()


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, str]:
  """Each preset's report from its committed summaries, its links as the page
  has them (`plots/...`); the plots drawn elsewhere (the committed ones stay)."""
  out = {}
  for name in NAMES:
    results_dir = os.path.join(runs.RESULTS_DIR, name)
    plots = tmp_path_factory.mktemp(f"plots_{name}")
    markdown = report.report(presets.PRESETS[name].resolved(results_dir), results_dir,
                             link_base=results_dir, plots_dir=str(plots))
    out[name] = markdown.replace(os.path.relpath(plots, results_dir) + os.sep, "plots" + os.sep)
  return out


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=STALE[name]))
    if name in STALE else name for name in NAMES])
def test_each_page_is_the_report_of_the_committed_summaries(name, reports):
  page = report_pages.page_path(os.path.join(runs.RESULTS_DIR, name))
  assert _read(page) == report_pages.page(name, reports[name])


@pytest.mark.parametrize("name", NAMES)
def test_each_page_says_how_to_regenerate_it_and_its_links_resolve(name):
  results_dir = os.path.join(runs.RESULTS_DIR, name)
  text = _read(report_pages.page_path(results_dir))
  assert report_pages.PAGE_COMMAND.format(name=name) in text.split("\n\n")[1]
  for target in re.findall(r"\]\(([^)\s#]+)\)", text):
    assert os.path.exists(os.path.join(results_dir, target)), target


def test_results_md_is_the_summary_of_the_committed_summaries():
  assert _read(RESULTS_MD) == results_summary.summary()


def test_every_number_in_results_md_is_printed_by_the_reports(reports):
  text = _read(RESULTS_MD)
  assert len(quoted_numbers.numbers(text)) > 100
  assert quoted_numbers.unsourced(text, "\n".join(reports.values())) == []


def test_an_altered_number_in_results_md_fails_the_check(reports):
  text, reference = _read(RESULTS_MD), "\n".join(reports.values())
  known = set(quoted_numbers.numbers(reference))
  # A few of the quoted numbers, each nudged in its last digit (to a value no
  # report prints), are caught, and only they.
  for number in sorted(set(quoted_numbers.numbers(text)))[::40]:
    nudged = [number[:-1] + str((int(number[-1]) + step) % 10) for step in range(1, 10)]
    altered = next(a for a in [*nudged, number + "1"] if a not in known)
    changed = re.sub(r"(?<![\w.+-])" + re.escape(number) + r"(?![\d.])", altered, text, count=1)
    assert changed != text, number
    assert quoted_numbers.unsourced(changed, reference) == [altered], number


def test_the_number_checker():
  reference = "| rope | 0.798 [0.786, 0.810] | **+0.017 [+0.002, +0.031]** | 1.27x |"
  assert quoted_numbers.numbers("RoPE 0.798, PaTH +0.017 [+0.002, +0.031]; 0.87-0.95") == [
      "0.798", "+0.017", "+0.002", "+0.031", "0.87", "0.95"]
  assert quoted_numbers.unsourced("RoPE 0.798 (+0.017), 1.27x its step", reference) == []
  assert quoted_numbers.unsourced("RoPE 0.799", reference) == ["0.799"]
  assert quoted_numbers.unsourced("PaTH -0.017", reference) == ["-0.017"]  # the sign counts
  # Code spans, link targets and comments are not quotes.
  assert quoted_numbers.numbers("`arXiv:2601.22402` [a](x/0.5.png) <!-- 0.1 --> 0.25") == [
      "0.25"]


def test_publish_elsewhere_writes_the_report_as_a_block(tmp_path):
  """A sweep's `--summarize_only --results_md` for results outside `results/`
  (a scratch sweep) keeps the generated block; only the repository's own
  results get a page and the summary."""
  from experiments.extrapolation import results_pages  # pylint: disable=g-import-not-at-top
  results, results_md = tmp_path / "results", tmp_path / "RESULTS.md"
  results.mkdir()
  markdown = results_pages.publish("smoke", str(results), str(results_md))
  begin, end = report_pages.block_marks("smoke")
  text = results_md.read_text()
  assert begin in text and end in text and markdown.strip() in text
  assert not (results / report_pages.PAGE).exists()


def test_a_stale_page_says_so_under_its_command():
  page = report_pages.page("converged", "the report\n", stale="older than its summaries")
  assert page.split("\n\n")[1].startswith("Generated from")
  assert page.split("\n\n")[2] == ("**Stale:** older than its summaries; the command above "
                                   "brings it up to date.")
  assert report_pages.page("converged", "the report\n").endswith("\n\nthe report\n")
