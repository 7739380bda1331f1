"""The host process: XLA:CPU's allocator, JAX's persistent compilation cache,
and the CPUs of processes that run side by side (`core_slots`).

The first two are set up by the entry points (`train.py`, `eval.py`, the
training benchmarks) before JAX starts; nothing here imports JAX.

The allocator: keep XLA:CPU's per-step buffers instead of re-faulting them.

XLA:CPU allocates each executable's temporaries as one buffer per call (533 MB
for the Chomsky-hierarchy transformer at batch 128, length 80) with
`posix_memalign` from a worker thread. glibc serves such a request from a fresh
`mmap` (a thread arena cannot hold it) and unmaps it on `free`, so every train
step page-faults half a gigabyte of zeroed memory, CPU time spent in the
kernel. With one arena, no `mmap` for large blocks, a high trim threshold and transparent huge
pages, the buffer stays mapped from step to step (the measurements: docs/performance.md,
"What made the difference", "The host allocator"). Peak resident memory
grows (freed blocks are kept for reuse).

glibc reads `GLIBC_TUNABLES` only at process start, so the entry points
(`train.py`, the training benchmarks) call `use_tuned_allocator()` first: it
re-executes the same command line once with the tunables set. Set
`BIFOCAL_HOST_ALLOCATOR=default` to opt out; a `GLIBC_TUNABLES` of your own is
respected. Only Linux with glibc is affected.

The compilation cache: a train step takes seconds to compile (the
Chomsky-hierarchy benchmark compiles one per length bucket), and a second run
of the same config compiles the same programs.
`use_compilation_cache()` points JAX's persistent cache at
`$XDG_CACHE_HOME/bifocal_jax/jax_compilation_cache` (`~/.cache/...` without
it), so a re-run loads them instead. JAX keys each entry by the program, the
compile options, the XLA flags, the device and the jax/jaxlib versions, so a
stale entry is never used. Set `BIFOCAL_COMPILATION_CACHE=DIR` for another
directory, or `=off` for none; a `JAX_COMPILATION_CACHE_DIR` of your own is
respected. The cache is bounded at 2 GiB (least recently used entries go
first; JAX needs the `filelock` package for that, a dependency of this one);
set `JAX_COMPILATION_CACHE_MAX_SIZE` (bytes, -1 for no bound) for another.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
from collections.abc import Iterable

GLIBC_TUNABLES = ("glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:"
                  "glibc.malloc.trim_threshold=1073741824:glibc.malloc.hugetlb=1")
# The pid that re-executed itself: exec keeps the pid, so a process never
# re-executes twice (even if glibc rejected the tunables and dropped them).
_MARKER = "BIFOCAL_HOST_ALLOCATOR_PID"
CACHE_ENV = "BIFOCAL_COMPILATION_CACHE"
_CACHE_OFF = ("off", "none", "0", "false", "")
CACHE_MAX_BYTES = 2 << 30


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


def compilation_cache_dir(environ=None) -> str | None:
  """The persistent compilation cache `use_compilation_cache` sets up, or
  None when it sets up none (opted out; JAX's own setting then applies)."""
  environ = os.environ if environ is None else environ
  if CACHE_ENV in environ:
    value = environ[CACHE_ENV].strip()
    return None if value.lower() in _CACHE_OFF else os.path.abspath(os.path.expanduser(value))
  if environ.get("JAX_COMPILATION_CACHE_DIR"):
    return environ["JAX_COMPILATION_CACHE_DIR"]  # the user's own
  home = environ.get("XDG_CACHE_HOME", "")
  if not os.path.isabs(home):  # unset or relative: ignored, as the XDG spec says
    home = os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(home, "bifocal_jax", "jax_compilation_cache")


def use_compilation_cache() -> str | None:
  """Turns JAX's persistent compilation cache on (see the module docstring);
  returns its directory, or None. Call before the first compilation."""
  directory = compilation_cache_dir()
  if directory is None:
    return None
  os.environ["JAX_COMPILATION_CACHE_DIR"] = directory  # read when JAX starts
  if "JAX_COMPILATION_CACHE_MAX_SIZE" not in os.environ and _can_evict():
    os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(CACHE_MAX_BYTES)
  jax = sys.modules.get("jax")
  if jax is not None:  # already started: its config was read from the environment
    jax.config.update("jax_compilation_cache_dir", directory)
    if "JAX_COMPILATION_CACHE_MAX_SIZE" in os.environ:
      jax.config.update("jax_compilation_cache_max_size",
                        int(os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"]))
  return directory


def _can_evict() -> bool:
  """Whether JAX can bound the cache (it raises at the first write without filelock)."""
  return importlib.util.find_spec("filelock") is not None


def core_slots(jobs: int, cores: Iterable[int] | None = None) -> list[frozenset[int] | None]:
  """`jobs` disjoint shares of `cores` (default: the CPUs this process may
  use), consecutive and as equal as they divide, for `os.sched_setaffinity`;
  `None` for each (no pinning) with one job, more jobs than cores, or no
  `sched_setaffinity` (macOS). The sweep's `--jobs` run each on its own share.

  Why pin: XLA:CPU sizes its thread pool to the CPUs a process may use, so
  processes sharing the same cores each split their small matmuls over all of
  them and contend for them; pinned, each runs on its own share (the
  measurement: docs/performance.md, "Pinning runs to cores"). A run's
  floats then differ in the last bits from an unpinned run's: XLA splits
  reductions by thread. Not for the test suite: its tests wait on
  subprocesses, and an unpinned idle worker's core then helps the other
  (docs/performance.md)."""
  if cores is None:
    if not hasattr(os, "sched_getaffinity"):
      return [None] * jobs
    cores = os.sched_getaffinity(0)
  cores = sorted(cores)
  if jobs <= 1 or jobs > len(cores):
    return [None] * jobs
  share, extra = divmod(len(cores), jobs)
  slots, start = [], 0
  for k in range(jobs):
    end = start + share + (k < extra)
    slots.append(frozenset(cores[start:end]))
    start = end
  return slots
