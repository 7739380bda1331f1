"""Writes RESULTS.md (the summary, `results_summary.py`) and each preset's page
`results/<preset>/README.md` (its whole report, `report.write_page`), from the
committed run summaries alone:

  python -m experiments.extrapolation.results_pages                  # all of them
  python -m experiments.extrapolation.results_pages --pages cpu      # one page and RESULTS.md
  python -m experiments.extrapolation.results_pages --pages ''       # RESULTS.md alone

The same inputs give the same bytes (`tests/experiments/test_results_md.py`).
"""

from __future__ import annotations

import argparse
import os

from experiments.extrapolation import report
from experiments.extrapolation import results_summary
from experiments.extrapolation import runs

RESULTS_MD = os.path.join(runs.REPO, "RESULTS.md")


def write_summary(path: str = RESULTS_MD) -> str:
  """Draws the summary's plots and writes RESULTS.md; returns its text."""
  sweeps = {name: results_summary.load(name) for name in results_summary.PRESET_NAMES}
  results_summary.draw_plots(sweeps)
  text = results_summary.summary(sweeps, repo=os.path.dirname(os.path.abspath(path)))
  with open(path, "w") as f:
    f.write(text)
  return text


def publish(name: str, results_dir: str, results_md: str | None = RESULTS_MD) -> str:
  """A sweep's `--summarize_only --results_md`: its page, then (for the
  repository's own results) the summary. Returns the report's markdown."""
  markdown = report.write_page(name, results_dir)
  own = os.path.abspath(results_dir) == os.path.join(runs.RESULTS_DIR, name)
  if results_md and own and name in results_summary.PRESET_NAMES:
    write_summary(results_md)
  return markdown


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--pages", default=",".join(results_summary.PRESET_NAMES),
                      help="Presets whose page to write, comma-separated ('' for none).")
  parser.add_argument("--results_md", default=RESULTS_MD, help="Where the summary goes.")
  args = parser.parse_args(argv)
  for name in filter(None, args.pages.split(",")):
    report.write_page(name, os.path.join(runs.RESULTS_DIR, name))
    print(f"wrote {report.page_path(os.path.join(runs.RESULTS_DIR, name))}")
  write_summary(args.results_md)
  print(f"wrote {args.results_md}")


if __name__ == "__main__":
  main()
