"""Writes RESULTS.md (the summary, `results_summary.py`) and each preset's page
`results/<preset>/README.md` (its whole report, `report_pages.write_page`), from the
committed run summaries alone:

  python -m experiments.extrapolation.results_pages                  # all of them
  python -m experiments.extrapolation.results_pages --pages cpu      # one page and RESULTS.md
  python -m experiments.extrapolation.results_pages --pages ''       # RESULTS.md alone

The same inputs give the same bytes (`tests/experiments/test_results_md.py`).
"""

from __future__ import annotations

import argparse
import os

from experiments.extrapolation import committed_sweeps
from experiments.extrapolation import presets
from experiments.extrapolation import report
from experiments.extrapolation import report_pages
from experiments.extrapolation import results_summary
from experiments.extrapolation import runs

RESULTS_MD = os.path.join(runs.REPO, "RESULTS.md")


def write_summary(path: str = RESULTS_MD) -> str:
  """Draws the summary's plots and writes RESULTS.md; returns its text."""
  sweeps = {name: committed_sweeps.load(name) for name in committed_sweeps.PRESET_NAMES}
  results_summary.draw_plots(sweeps)
  text = results_summary.summary(sweeps, repo=os.path.dirname(os.path.abspath(path)))
  with open(path, "w") as f:
    f.write(text)
  return text


def publish(name: str, results_dir: str, results_md: str = RESULTS_MD) -> str:
  """A sweep's `--summarize_only --results_md`: for the repository's own
  results, the preset's page and then the summary (`results_md`); for
  results elsewhere, the report as a generated block of `results_md`
  (`report_pages.replace_block`). Returns the report's markdown."""
  if (os.path.abspath(results_dir) == os.path.join(runs.RESULTS_DIR, name)
      and name in committed_sweeps.PRESET_NAMES):
    markdown = report_pages.write_page(name, results_dir)
    write_summary(results_md)
    return markdown
  markdown = report.report(presets.PRESETS[name].resolved(results_dir), results_dir,
                           link_base=os.path.dirname(os.path.abspath(results_md)))
  report_pages.replace_block(results_md, markdown, name)
  return markdown


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--pages", default=",".join(committed_sweeps.PRESET_NAMES),
                      help="Presets whose page to write, comma-separated ('' for none).")
  parser.add_argument("--results_md", default=RESULTS_MD, help="Where the summary goes.")
  args = parser.parse_args(argv)
  for name in filter(None, args.pages.split(",")):
    report_pages.write_page(name, os.path.join(runs.RESULTS_DIR, name))
    print(f"wrote {report_pages.page_path(os.path.join(runs.RESULTS_DIR, name))}")
  write_summary(args.results_md)
  print(f"wrote {args.results_md}")


if __name__ == "__main__":
  main()
