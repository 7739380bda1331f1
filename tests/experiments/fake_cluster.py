"""A stand-in for `engine.Cluster` in the sweep driver's tests: the same calls,
tasks run in this process when the driver waits (the oldest first), so the
driver's choices (order, limits, deadlines, what it writes) are tested without
starting Ray. The engine itself is tested on a local Ray cluster
(test_sweep_on_ray.py)."""

from experiments.extrapolation import engine


class FakeCluster:
  """`capacity` tasks at a time; `submitted`: the task names in submission order."""

  def __init__(self, capacity: int = 1):
    self._capacity = capacity
    self._tasks = {}  # ref -> (fn, args)
    self._outcomes = {}
    self.submitted: list[str] = []
    self.cancelled: list[str] = []
    self._next = 0
    self._names = {}

  def capacity(self, resources):
    del resources
    return self._capacity

  def submit(self, fn, *args, resources, name):
    del resources
    self._next += 1
    self._tasks[self._next] = (fn, args)
    self._names[self._next] = name
    self.submitted.append(name)
    return self._next

  def wait(self, refs, timeout):
    del timeout
    ref = min(refs)
    if ref not in self._outcomes:
      fn, args = self._tasks.pop(ref)
      self._outcomes[ref] = fn(*args)
    return [ref]

  def outcome(self, ref) -> engine.Outcome:
    return self._outcomes.pop(ref)

  def cancel(self, ref, *, force=False):
    del force
    self.cancelled.append(self._names[ref])
    if ref in self._tasks:
      self._tasks.pop(ref)
      self._outcomes[ref] = engine.Outcome("stopped")

  def close(self):
    pass
