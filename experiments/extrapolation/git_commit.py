"""Committing a sweep's results as they land: exactly the files written, whatever
else the checkout holds, so that a machine lost mid-sweep loses only the runs in flight."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

_GIT_LOCK = threading.Lock()


def git_commit_paths(paths: Sequence[str], message: str, *, log: Callable[[str], None] = print,
                     attempts: int = 8) -> bool:
  """Commits exactly `paths` (`git add`, then `git commit --only`), whatever
  else is staged or changed in their repository; waits and retries while
  another git command holds the index lock. False (and a logged line) when
  it cannot: the files are written either way."""
  paths = [os.path.abspath(p) for p in paths]
  repo = os.path.dirname(paths[0])
  error = ""
  with _GIT_LOCK:
    for attempt in range(attempts):
      add = subprocess.run(["git", "add", "--", *paths], cwd=repo, capture_output=True, text=True)
      commit = add if add.returncode else subprocess.run(
          ["git", "commit", "-q", "--only", "-m", message, "--", *paths], cwd=repo,
          capture_output=True, text=True)
      if commit.returncode == 0:
        return True
      error = (commit.stderr or commit.stdout).strip()
      if "index.lock" not in error:
        break
      time.sleep(0.5 * 2**attempt)
  log(f"not committed ({message}): {error.splitlines()[-1] if error else 'git failed'}")
  return False
