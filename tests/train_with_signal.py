r"""`train.py` with a test hook: the process signals itself after a given step.

  python tests/train_with_signal.py STEP:NAME <train.py flags>   (e.g. 20:KILL, 7:TERM)

At a checkpoint step the signal comes right after that step's save began, so
a KILL lands during the asynchronous save; at other steps, once the earlier
saves are complete (`helpers.SignalAfter`).
"""

import sys

from bifocal_jax import machine  # pylint: disable=g-import-not-at-top,wrong-import-position

# First: this may re-execute the command line (the host allocator), and the
# re-executed process must see the STEP:NAME argument too.
machine.use_tuned_allocator()

import helpers  # pylint: disable=g-import-not-at-top,wrong-import-position
from bifocal_jax import train  # pylint: disable=g-import-not-at-top,wrong-import-position

if __name__ == "__main__":
  hook = helpers.SignalAfter.parse(sys.argv.pop(1))
  train.run(hooks=[hook])
