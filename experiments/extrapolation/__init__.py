"""The extrapolation experiment: does bifocal attention extrapolate?

Run from the repository root: `python -m experiments.extrapolation --preset NAME`
(the sweep, `sweep.py`). Its modules, from the bottom up:

  runs.py            what a run is: the kinds, a task of a preset, a run, a population, a preset
  run_summary.py     what a finished run leaves: its summary, written and read back
  roster_rules.py    the converged sweep's additions chosen from the roster's results
  presets.py         the presets (`PRESETS`): tasks, kinds, seeds, arms, budgets
  sweep.py           runs a preset: calibration, the runs, their summaries, the report
  report.py          the report rebuilt from the summaries alone, with its parts:
                     report_tables, plot_style, leaderboard_report, progress_report,
                     probe_report, rank_comparison_report, training_time_report,
                     depth_length_plot; where it is written (a preset's page, or a
                     generated block of a file): report_pages
  results_summary.py RESULTS.md, the summary over the sweeps, from: committed_sweeps (each
                     sweep's summaries and the numbers quoted from them), claim_verdicts
                     (the paper's claims), field_verdicts (the field's leaderboards),
                     summary_tables (compact leaderboards, pending cells, what was not
                     run); quoted_numbers checks its numbers against the reports;
                     results_pages writes it and the pages
  rerun.py, paired_revisions.py, roster_choices.py
                     a landed run re-run; summaries at two commits paired; the roster choices
  labelled_counts.py, list_heights.py, dyck_skips.py, scored_runs.py
                     where trained runs fail past the training depth (ListOps, Dyck)

Each script among them runs as `python -m experiments.extrapolation.NAME`.
"""
