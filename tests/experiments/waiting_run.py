"""A run whose "training" waits for SIGTERM and counts the signals it gets (for
the Ray tests of stopping: importable by the cluster's workers)."""

import dataclasses
import sys

from experiments.extrapolation import runs

WAITS_FOR_SIGTERM = """
import signal, sys, time
signals = []
signal.signal(signal.SIGTERM, lambda *a: signals.append(1))
print('ready', flush=True)
deadline = time.time() + 120
while not signals and time.time() < deadline:
  time.sleep(0.01)
time.sleep(1.0)  # a second signal would land here
print('signals', len(signals), flush=True)
"""


@dataclasses.dataclass(frozen=True)
class WaitingRun(runs.Run):

  def train_command(self, out, budget):
    del out, budget
    return [sys.executable, "-c", WAITS_FOR_SIGTERM]
