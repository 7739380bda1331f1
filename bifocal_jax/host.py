"""The host allocator: keep XLA:CPU's per-step buffers instead of re-faulting them.

XLA:CPU allocates each executable's temporaries as one buffer per call (533 MB
for the Chomsky-hierarchy transformer at batch 128, length 80) with
`posix_memalign` from a worker thread. glibc serves such a request from a fresh
`mmap` (a thread arena cannot hold it) and unmaps it on `free`, so every train
step page-faults half a gigabyte of zeroed memory: about a quarter of the CPU
time went to the kernel. With one arena, no `mmap` for large blocks, a high trim
threshold and transparent huge pages, the buffer stays mapped from step to step
(that model at length 80: 0.77 s -> 0.58 s per step; the README's Performance
section has the benchmark figures). Peak resident memory grows (freed blocks are kept for reuse).

glibc reads `GLIBC_TUNABLES` only at process start, so the entry points
(`train.py`, the training benchmarks) call `use_tuned_allocator()` first: it
re-executes the same command line once with the tunables set. Set
`BIFOCAL_HOST_ALLOCATOR=default` to opt out; a `GLIBC_TUNABLES` of your own is
respected. Only Linux with glibc is affected. No JAX import here: this runs
before JAX starts.
"""

from __future__ import annotations

import os
import platform
import sys

GLIBC_TUNABLES = ("glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:"
                  "glibc.malloc.trim_threshold=1073741824:glibc.malloc.hugetlb=1")
# The pid that re-executed itself: exec keeps the pid, so a process never
# re-executes twice (even if glibc rejected the tunables and dropped them).
_MARKER = "BIFOCAL_HOST_ALLOCATOR_PID"


def should_reexec(environ=None, pid: int | None = None) -> bool:
  """Whether `use_tuned_allocator` would re-execute this process."""
  environ = os.environ if environ is None else environ
  pid = os.getpid() if pid is None else pid
  if environ.get("BIFOCAL_HOST_ALLOCATOR", "tuned") == "default":
    return False
  if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
    return False
  if environ.get(_MARKER) == str(pid):
    return False
  # Set: the user's own, or ours inherited from a tuned parent process.
  return "GLIBC_TUNABLES" not in environ


def use_tuned_allocator() -> None:
  """Re-executes this process's command line with `GLIBC_TUNABLES` set, once."""
  if not should_reexec():
    return
  os.environ["GLIBC_TUNABLES"] = GLIBC_TUNABLES
  os.environ[_MARKER] = str(os.getpid())
  sys.stdout.flush()
  sys.stderr.flush()
  os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
