"""The same runs' summaries at two commits, paired over seeds
(experiments/extrapolation/paired_revisions.py)."""

import json
import os
import subprocess

import pytest

from experiments.extrapolation import paired_revisions

RUNS = "runs/dyck/scratch/randomized_rope"


def _git(repo, *args):
  return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                        check=True).stdout.strip()


def _write(repo, seed, close, token):
  path = repo / RUNS / f"seed{seed}.json"
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps({"splits": {
      "test_depth": {"accuracy": token, "close_accuracy": close}}}))


@pytest.fixture
def repo(tmp_path, monkeypatch):
  """Seeds 0-2 at the first commit; seeds 0, 1 and 3 at the second."""
  _git(tmp_path, "init", "-q")
  _git(tmp_path, "config", "user.email", "t@example.com")
  _git(tmp_path, "config", "user.name", "t")
  for seed, close in enumerate((0.50, 0.60, 0.70)):
    _write(tmp_path, seed, close, 0.9)
  _git(tmp_path, "add", "-A")
  _git(tmp_path, "commit", "-qm", "old")
  old = _git(tmp_path, "rev-parse", "HEAD")
  (tmp_path / RUNS / "seed2.json").unlink()
  for seed, close in ((0, 0.60), (1, 0.72), (3, 0.10)):
    _write(tmp_path, seed, close, 0.8)
  monkeypatch.chdir(tmp_path)
  return old


def test_pairs_the_seeds_both_revisions_have(repo):
  old, new = paired_revisions.read_revision(RUNS, repo), paired_revisions.read_revision(RUNS, None)
  assert sorted(old) == [0, 1, 2] and sorted(new) == [0, 1, 3]
  (row,) = paired_revisions.paired_rows(old, new)
  assert row["metric"] == "close_accuracy" and row["seeds"] == 2  # Dyck: closing brackets
  assert row["old"] == pytest.approx(0.55) and row["new"] == pytest.approx(0.66)
  assert row["diff"]["mean"] == pytest.approx(0.11)  # (0.10 + 0.12) / 2
  assert "| test_depth | close_accuracy | 2 | 0.550 | 0.660 | +0.110 [" in (
      paired_revisions.markdown([row]))


def test_a_bad_revision_or_file_is_one_clear_error(repo):
  with pytest.raises(ValueError, match="nosuchrev"):
    paired_revisions.read_revision(RUNS, "nosuchrev")
  with open(os.path.join(RUNS, "seed0.json"), "w") as f:
    f.write("{not json")
  with pytest.raises(ValueError, match="seed0.json at the files: not JSON"):
    paired_revisions.read_revision(RUNS, None)


def test_summaries_that_moved_since_are_read_from_where_they_were(repo):
  """`--old_directory`: the old summaries at their old place, the new at theirs."""
  moved = "results/dyck/scratch/randomized_rope"
  os.makedirs(os.path.dirname(moved))
  os.rename(RUNS, moved)
  with pytest.raises(ValueError, match=f"{moved} at {repo}"):  # not there at the old commit
    paired_revisions.compare(moved, repo)
  assert "| test_depth | close_accuracy | 2 | 0.550 | 0.660 | +0.110 [" in (
      paired_revisions.compare(moved, repo, old_directory=RUNS))
