"""The performance benchmarks: step time, evaluation time, attention kernels,
compile time, the data pipeline, the original Chomsky-hierarchy trainer, the
accelerator script. Each runs from the repository root as
`python -m benchmarks.NAME` (its docstring); `bench_util` is what they share.
Their figures are committed under `results/benchmarks/` and quoted in the
docs/performance.md."""
