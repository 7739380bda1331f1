"""The project's experiments, each a package run from the repository root
(`python -m experiments.NAME`); their committed data is under `results/`."""
