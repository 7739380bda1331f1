"""Training: the config and its validation (`config`), the train state
(`state`), the jit-compiled steps (`steps`), the loop (`loop`), checkpoints,
populations, sharding, run directories (`workdir`) and metrics.

Over `nn`, `tasks` and `surgery`; under `evaluation` and the commands.
"""
