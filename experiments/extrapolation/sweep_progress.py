"""What a sweep shows as it goes: a bar over its runs (landed, running,
failed, time left) on a terminal, and one line per run that ends."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from tqdm import tqdm


def expected_left(durations: list[float], left: int, running: int, slots: int) -> float | None:
  """Seconds until the runs left (`left`, `running` of them started) are
  done, `slots` at a time: the median finished run's duration per round; a
  running run counts half. None before any run has finished."""
  if not durations:
    return None
  rounds = (left - running / 2) / max(slots, 1)
  return max(rounds, 0.0) * statistics.median(durations)


def clock(seconds: float | None) -> str:
  if seconds is None:
    return "?"
  minutes = round(seconds / 60)
  return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"


class Progress:
  """Counts a sweep's units; `log` gets a line for each that ends; the bar
  (to `stream`, drawn only when it is a terminal unless `bar` says) shows
  the counts and the expected time left."""

  def __init__(self, total: int, log: Callable[[str], None], *, stream=None,
               bar: bool | None = None):
    stream = sys.stderr if stream is None else stream
    self.total, self.log = total, log
    self.landed = self.failed = self.stopped = self.running = 0
    self.slots = 1
    self.durations: list[float] = []
    show = stream.isatty() if bar is None else bar
    self._bar = tqdm(total=total, unit="run", desc="sweep", file=stream, disable=not show,
                     dynamic_ncols=True, leave=True)
    self._started: dict[str, float] = {}

  def resize(self, total: int) -> None:
    """The sweep's size as the results extend it (runs they chose, runs tried)."""
    self.total = self._bar.total = total

  def start(self, name: str, index: int) -> None:
    self.running += 1
    self._started[name] = time.time()
    self._say(f"[{index}/{self.total}] {name}  started {time.strftime('%H:%M:%S')}")
    self._refresh()

  def end(self, name: str, status: str, why: str = "") -> None:
    self.running -= 1
    took = time.time() - self._started.pop(name, time.time())
    if status == "done":
      self.landed += 1
      self.durations.append(took)
    elif status == "failed":
      self.failed += 1
    else:
      self.stopped += 1
    if status in ("done", "failed"):
      self._bar.update(1)
    detail = f": {why}" if why else ""
    self._say(f"{name}: {status} in {took:.0f}s{detail}")
    self._refresh()

  def left(self) -> float | None:
    todo = self.total - self.landed - self.failed
    return expected_left(self.durations, todo, self.running, self.slots)

  def _refresh(self) -> None:
    self._bar.set_postfix_str(f"landed {self.landed}, running {self.running}, failed "
                              f"{self.failed}, left ~{clock(self.left())}", refresh=True)

  def _say(self, line: str) -> None:
    if self._bar.disable:
      self.log(line)
    else:
      self._bar.write(line)

  def close(self) -> None:
    self._bar.close()
