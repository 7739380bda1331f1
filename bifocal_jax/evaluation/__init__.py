"""Evaluation of trained runs: the evaluator (`evaluate`), memory-bounded
batches of long strings (`budget_batches`), probes of the residual stream
(`probe`), the spectral analysis of frequency trajectories (`spectrum`),
comparisons of runs (`compare`), results tables (`report`) and statistics.

Over `training` (it restores the trainer's state); under the commands.
"""
