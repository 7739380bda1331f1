"""The sweep driver (experiments/extrapolation/sweep.py, `Sweep`): what is pending
and in which order, each command run and logged, each summary committed as it
lands, jobs on their own cores, runs the results choose, and stopping: by
signal, by deadline (`--stop_by`, `--until`) and by `--limit`."""

import dataclasses
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from extrapolation_helpers import PRESET, TASK

from experiments.extrapolation import run_summary
from experiments.extrapolation import sweep as ex

def test_pending_waits_for_budgets_and_skips_summarised_runs(tmp_path):
  results = str(tmp_path / "results")
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), results, log=lambda m: None)
  assert sweep.pending() == []  # not calibrated
  os.makedirs(results)
  with open(os.path.join(results, ex.BUDGETS_FILE), "w") as f:
    json.dump({"odds_first": {"budget": None}}, f)
  assert sweep.pending() == []  # not learned
  with open(os.path.join(results, ex.BUDGETS_FILE), "w") as f:
    json.dump({"odds_first": {"budget": 400}}, f)
  first = PRESET.runs()[0]
  path = run_summary.summary_path(results, first)
  os.makedirs(os.path.dirname(path))
  with open(path, "w") as f:
    f.write("{}")
  # The smaller group first: the sensitivity arm (2 runs) before the task's
  # scratch and protocol runs (7 left), each group in the preset's order.
  runs = PRESET.runs()
  assert sweep.pending() == runs[-2:] + runs[1:-2]


def test_pending_takes_the_group_with_fewest_steps_left_first(tmp_path):
  cheap, dear = (ex.TaskSpec(name, variant="tiny") for name in ("bucket_sort", "reverse_string"))
  preset = ex.Preset(tasks=(dear, cheap), kinds=("rope", "bifocal_heads"), seeds=(0, 1),
                     protocol_tasks=("reverse_string",), sensitivity_task="reverse_string",
                     sensitivity=(("bifocal_heads", "lr1e-3",
                                   (("spectral.learning_rate", 1e-3),)),))
  results = str(tmp_path / "results")
  os.makedirs(results)
  with open(os.path.join(results, ex.BUDGETS_FILE), "w") as f:
    json.dump({"bucket_sort": {"budget": 250}, "reverse_string": {"budget": 2500}}, f)
  sweep = ex.Sweep(preset, str(tmp_path / "out"), results, log=lambda m: None)
  names = [r.name for r in sweep.pending()]
  assert names == [  # 4 x 250, then 2 x 2500 (sensitivity), then 8 x 2500 (scratch, protocol)
      "bucket_sort/scratch/rope/seed0", "bucket_sort/scratch/bifocal_heads/seed0",
      "bucket_sort/scratch/rope/seed1", "bucket_sort/scratch/bifocal_heads/seed1",
      "reverse_string/sensitivity/bifocal_heads_lr1e-3/seed0",
      "reverse_string/sensitivity/bifocal_heads_lr1e-3/seed1",
      "reverse_string/scratch/rope/seed0", "reverse_string/scratch/bifocal_heads/seed0",
      "reverse_string/scratch/rope/seed1", "reverse_string/scratch/bifocal_heads/seed1",
      "reverse_string/surgery/bifocal_heads/seed0", "reverse_string/continue/rope/seed0",
      "reverse_string/surgery/bifocal_heads/seed1", "reverse_string/continue/rope/seed1"]
  # Runs already summarised shrink their group: reverse_string's scratch and
  # protocol group, 1 run left (2,500 steps), now goes before its sensitivity arm.
  for run in preset.runs()[:7]:
    path = run_summary.summary_path(results, run)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      f.write("{}")
  assert [r.name for r in sweep.pending()] == names[:4] + [
      "reverse_string/continue/rope/seed1"] + names[4:6]


def _git(repo, *args):
  return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                        text=True).stdout


def _repo_with_other_work(tmp_path):
  """A repository with someone's staged and unstaged changes beside a results dir."""
  repo = tmp_path / "repo"
  (repo / "results").mkdir(parents=True)
  _git(repo, "init", "-q")
  _git(repo, "config", "user.email", "t@example.com")
  _git(repo, "config", "user.name", "t")
  (repo / "work.py").write_text("a = 1\n")
  _git(repo, "add", "work.py")
  _git(repo, "commit", "-q", "-m", "start")
  (repo / "work.py").write_text("a = 2\n")  # unstaged
  (repo / "staged.py").write_text("b = 1\n")
  _git(repo, "add", "staged.py")  # staged, not for the sweep to commit
  return repo


def test_commit_takes_only_the_summary_and_waits_for_the_index_lock(tmp_path):
  repo = _repo_with_other_work(tmp_path)
  summary = repo / "results" / "seed0.json"
  summary.write_text("{}")
  lock = repo / ".git" / "index.lock"
  lock.write_text("")  # another git command at work: released a moment later
  import threading  # pylint: disable=g-import-not-at-top
  threading.Timer(0.8, lock.unlink).start()
  logged = []
  assert ex.git_commit_paths([str(summary)], "sweep: seed0", log=logged.append)
  assert logged == []
  assert _git(repo, "show", "--name-only", "--format=%s", "HEAD").split() == [
      "sweep:", "seed0", "results/seed0.json"]
  status = _git(repo, "status", "--porcelain").splitlines()
  assert sorted(status) == [" M work.py", "A  staged.py"]  # left as they were


def test_commit_outside_a_repository_logs_one_line_and_keeps_the_file(tmp_path):
  summary = tmp_path / "seed0.json"
  summary.write_text("{}")
  logged = []
  assert not ex.git_commit_paths([str(summary)], "sweep: seed0", log=logged.append)
  assert len(logged) == 1 and logged[0].startswith("not committed (sweep: seed0)")
  assert summary.read_text() == "{}"


def test_sweep_commits_each_summary_it_writes(tmp_path, monkeypatch):
  repo = _repo_with_other_work(tmp_path)
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(repo / "results"),
                   log=lambda m: None,
                   on_written=lambda paths, message: ex.git_commit_paths(paths, message))
  run = ex.Run(TASK, "rope", 0)
  monkeypatch.setattr(ex, "execute", lambda *a, **k: "done")
  monkeypatch.setattr(ex, "summary_of", lambda r, *a: {"run": r.name})
  monkeypatch.setattr(sweep, "pending", lambda: [run])
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert sweep.run() == {run.name: "done"}
  committed = _git(repo, "show", "--name-only", "--format=%s", "HEAD").splitlines()
  assert committed[0] == f"sweep (results): {run.name}"
  assert committed[-1] == os.path.relpath(run_summary.summary_path(str(repo / "results"), run), repo)


def test_each_command_logs_its_duration_and_a_resumed_run_counts_every_segment(tmp_path):
  log_path = str(tmp_path / "train.log")
  with ex._Stop() as stop:
    for seconds in (0.3, 0.2):  # a run stopped, then resumed by a later sweep
      status, tail = ex._execute(
          [sys.executable, "-c", f"import time; time.sleep({seconds}); print('step')"],
          log_path, stop)
      assert status == 0 and "step" in tail
  (tmp_path / "eval.log").write_text(f"$ eval.py\n{run_summary.TOOK}2.0 s (exit status 0)\n")
  assert 2.5 <= run_summary.logged_seconds(str(tmp_path)) < 2.5 + 10  # both segments and the eval
  assert run_summary.logged_seconds(str(tmp_path / "missing")) == 0.0


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity (not macOS) and two CPUs to tell a share from all")
def test_a_pinned_command_runs_on_its_cores_only(tmp_path):
  mine = sorted(os.sched_getaffinity(0))
  code = "import os; print('CORES', sorted(os.sched_getaffinity(0)))"
  with ex._Stop() as stop:
    for cores, expected in ((frozenset(mine[:1]), mine[:1]), (None, mine)):
      status, tail = ex._execute([sys.executable, "-c", code], str(tmp_path / "log"), stop, cores)
      assert status == 0 and f"CORES {expected}" in tail, tail


def test_concurrent_jobs_hold_disjoint_core_shares(tmp_path, monkeypatch):
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None,
                   pin_cores=True)
  runs = [ex.Run(TASK, "rope", seed) for seed in range(6)]
  monkeypatch.setattr(ex.machine, "core_slots", lambda jobs: [frozenset({k}) for k in range(jobs)])
  lock, in_flight, seen, overlaps = threading.Lock(), [], [], []

  def execute(unit, *args, cores=None, **kwargs):
    with lock:
      overlaps.extend(cores & c for c in in_flight if cores & c)
      in_flight.append(cores)
      seen.append(cores)
    time.sleep(0.05)
    with lock:
      in_flight.remove(cores)
    return "done"

  monkeypatch.setattr(ex, "execute", execute)
  monkeypatch.setattr(ex, "summary_of", lambda r, *a: {"run": r.name})
  monkeypatch.setattr(sweep, "pending", lambda: runs)
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert set(sweep.run(jobs=2).values()) == {"done"}
  assert not overlaps and set(seen) == {frozenset({0}), frozenset({1})}, (overlaps, seen)


def test_summary_seconds_include_segments_of_earlier_sweeps(tmp_path, monkeypatch):
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None)
  run = ex.Run(TASK, "rope", 0)
  os.makedirs(run.workdir(sweep.out))
  with open(os.path.join(run.workdir(sweep.out), "train.log"), "w") as f:
    f.write(f"{run_summary.TOOK}500.0 s (exit status -2)\n{run_summary.TOOK}100.5 s (exit status 0)\n")
  seconds = []
  monkeypatch.setattr(ex, "execute", lambda *a, **k: "done")
  monkeypatch.setattr(ex, "summary_of", lambda r, out, budget, s: seconds.append(s) or {})
  monkeypatch.setattr(sweep, "pending", lambda: [run])
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert sweep.run() == {run.name: "done"}
  assert seconds == [600.5]


def test_sweep_takes_up_runs_that_became_pending_in_order_and_tries_each_once(
    tmp_path, monkeypatch):
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None)
  first, second, third = (ex.Run(TASK, "rope", seed) for seed in range(3))
  executed, done, calibrated = [], set(), []

  def pending():  # `third` is calibrated while `first` runs, and goes before `second`
    runs = [first] + ([third] if calibrated else []) + [second]
    return [r for r in runs if r.name not in done]

  def execute(unit, *args, **kwargs):
    executed.append(unit.name)
    calibrated.append(True)
    status = "done" if unit != second else "failed"  # a failed run stays pending
    if status == "done":
      done.add(unit.name)
    return status

  monkeypatch.setattr(ex, "execute", execute)
  monkeypatch.setattr(ex, "summary_of", lambda r, *a: {"run": r.name})
  monkeypatch.setattr(sweep, "pending", pending)
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  statuses = sweep.run()
  assert executed == [first.name, third.name, second.name]  # third asked for before second
  assert statuses == {first.name: "done", second.name: "failed", third.name: "done"}


def test_a_run_the_results_choose_starts_in_the_sweep_that_landed_them(tmp_path, monkeypatch):
  # The preset adds `alibi` once `rope` seed 0 has its summary (as
  # roster_choices adds the five best once Dyck's roster is complete).
  results = str(tmp_path / "results")

  def extend(preset, results_dir):
    if not os.path.exists(os.path.join(results_dir, "odds_first/scratch/rope/seed0.json")):
      return preset
    return dataclasses.replace(preset, tasks=(dataclasses.replace(TASK, later_kinds=("alibi",)),))

  preset = ex.Preset(tasks=(TASK,), kinds=("rope",), seeds=(0,), extend=extend)
  monkeypatch.setattr(ex, "execute", lambda *a, **k: "done")
  monkeypatch.setattr(ex, "summary_of", lambda r, *a: {"run": r.name})
  for resolve, expected in ((None, ["rope"]), (lambda: preset.resolved(results), ["rope", "alibi"])):
    shutil.rmtree(results, ignore_errors=True)
    sweep = ex.Sweep(preset.resolved(results), str(tmp_path / "out"), results,
                     log=lambda m: None, resolve=resolve)
    monkeypatch.setattr(sweep, "budget", lambda task: 10)
    statuses = sweep.run()
    assert [name.split("/")[2] for name in statuses] == expected  # without resolve: next sweep


def test_sweep_stopped_by_a_signal_starts_no_further_round(tmp_path, monkeypatch):
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None)
  first, second = (ex.Run(TASK, "rope", seed) for seed in range(2))
  executed = []
  pending_calls = iter([[first], [second]])
  monkeypatch.setattr(ex, "execute", lambda unit, *a, **k: executed.append(unit.name) or "stopped")
  monkeypatch.setattr(sweep, "pending", lambda: next(pending_calls))
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert sweep.run() == {first.name: "stopped"}
  assert executed == [first.name]


def test_sweep_limit_counts_across_rounds(tmp_path, monkeypatch):
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None)
  runs = [ex.Run(TASK, "rope", seed) for seed in range(3)]
  pending_calls = iter([runs[:1], runs[1:], runs[2:]])
  monkeypatch.setattr(ex, "execute", lambda *a, **k: "done")
  monkeypatch.setattr(ex, "summary_of", lambda r, *a: {"run": r.name})
  monkeypatch.setattr(sweep, "pending", lambda: next(pending_calls))
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert list(sweep.run(limit=2)) == [runs[0].name, runs[1].name]


def _finished(results_dir, run, seconds):
  path = run_summary.summary_path(results_dir, run)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump({"task": run.task.name, "kind": run.kind, "arm": run.arm, "group": run.group,
               "seed": run.seed, "seconds": seconds}, f)


def _step_costs_file(path, kinds_over_rope: list[dict]) -> str:
  with open(path, "w") as f:
    json.dump({"results": [{"config": f"c{i}", "bifocal_over_rope": 1.25, "kinds_over_rope": k}
                           for i, k in enumerate(kinds_over_rope)]}, f)
  return str(path)


def test_expected_seconds_from_finished_runs_like_it(tmp_path):
  results = str(tmp_path / "results")
  costs = _step_costs_file(tmp_path / "costs.json", [{"nope": 0.9, "cope": 3.0},
                                                      {"nope": 1.5, "cope": 2.0}])
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), results, log=lambda m: None,
                   step_costs_file=costs)
  for seed, seconds in enumerate((100, 300, 200)):
    _finished(results, ex.Run(TASK, "rope", seed), seconds)
  _finished(results, ex.Run(TASK, "bifocal_heads", 0), 1000)
  assert sweep.expected_seconds(ex.Run(TASK, "rope", 7)) == 200  # its kind's median
  assert sweep.expected_seconds(ex.Run(TASK, "bifocal_heads", 1)) == 1000
  # A kind not run yet: its slowest step-time reading (a mixed kind: its slower
  # part's) times the task's pace, the median over kinds of time over cost:
  # rope 200 / 1.0, bifocal 1000 / 1.25: 500.
  assert sweep.expected_seconds(ex.Run(TASK, "nope", 0)) == pytest.approx(1.5 * 500)
  assert sweep.expected_seconds(ex.Run(TASK, "nope+cope", 0)) == pytest.approx(3.0 * 500)
  assert sweep.expected_seconds(ex.Run(TASK, "rope", 0, arm="continue")) == pytest.approx(500)
  # A kind the benchmark has not timed: the task and arm's longest run.
  assert sweep.expected_seconds(ex.Run(TASK, "alibi", 0)) == 1000
  no_costs = ex.Sweep(PRESET, str(tmp_path / "out"), results, log=lambda m: None,
                      step_costs_file=str(tmp_path / "absent.json"))
  assert no_costs.expected_seconds(ex.Run(TASK, "nope", 0)) == 1000
  assert no_costs.expected_seconds(ex.Run(TASK, "rope", 0, arm="continue")) is None
  other = dataclasses.replace(TASK, name="dyck")
  assert sweep.expected_seconds(ex.Run(other, "rope", 0)) is None  # nothing landed there


def test_stop_by_passes_over_runs_expected_to_end_after_it_for_the_next_that_fits(
    tmp_path, monkeypatch):
  results = str(tmp_path / "results")
  logged = []
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), results, log=logged.append)
  _finished(results, ex.Run(TASK, "rope", 0), 50)
  _finished(results, ex.Run(TASK, "bifocal_heads", 0), 5000)
  short, long, later = (ex.Run(TASK, "rope", 1), ex.Run(TASK, "bifocal_heads", 1),
                        ex.Run(TASK, "rope", 2))
  executed = []
  monkeypatch.setattr(ex, "execute", lambda unit, *a, **k: executed.append(unit.name) or "done")
  monkeypatch.setattr(ex, "summary_of", lambda r, *a: {"run": r.name})
  monkeypatch.setattr(sweep, "pending",
                      lambda: [r for r in (short, long, later) if r.name not in executed])
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert sweep.run(stop_by=time.time() + 600) == {short.name: "done", later.name: "done"}
  assert executed == [short.name, later.name]  # `long` passed over, the order kept otherwise
  passed = [m for m in logged if "not starting" in m]
  assert len(passed) == 1 and f"{long.name} (expected to take 5000 s)" in passed[0], logged
  executed.clear()
  assert sweep.run(stop_by=time.time() - 1) == {}  # past it: nothing, known or not
  assert sweep.run(stop_by=time.time() + 10_000) == {short.name: "done", long.name: "done",
                                                     later.name: "done"}


def test_a_run_trained_part_way_is_expected_to_take_only_what_is_left(tmp_path):
  results, out = str(tmp_path / "results"), str(tmp_path / "out")
  sweep = ex.Sweep(PRESET, out, results, log=lambda m: None)
  _finished(results, ex.Run(TASK, "rope", 0), 800)
  run = ex.Run(TASK, "rope", 1)
  workdir = run.workdir(out)
  assert run_summary.trained_fraction(workdir) == 0.0  # nothing there yet
  os.makedirs(os.path.join(workdir, "checkpoints", "250"))
  assert run_summary.trained_fraction(workdir) == 0.0  # no config: no budget to count against
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({"steps": 1000}, f)
  # a save in progress (Orbax's temporary name) does not count
  os.makedirs(os.path.join(workdir, "checkpoints", "750.orbax-checkpoint-tmp-1"))
  assert run_summary.trained_fraction(workdir) == 0.25
  assert sweep.expected_seconds(run) == pytest.approx(600)
  os.makedirs(os.path.join(workdir, "checkpoints", "1000"))
  assert run_summary.trained_fraction(workdir) == 1.0
  assert sweep.expected_seconds(run) == pytest.approx(0)


_WAITS_FOR_SIGTERM = """
import signal, sys, time
signals = []
signal.signal(signal.SIGTERM, lambda *a: signals.append(1))
print('ready', flush=True)
deadline = time.time() + 60
while not signals and time.time() < deadline:
  time.sleep(0.01)
print('got', flush=True)
time.sleep(1.0)  # a second signal would land here
print('signals', len(signals), flush=True)
"""


def test_until_stops_the_runs_in_flight_once_each_and_starts_none(tmp_path, monkeypatch):
  logged = []
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=logged.append)
  runs = [ex.Run(TASK, "rope", seed) for seed in range(3)]
  monkeypatch.setattr(sweep, "pending", lambda: runs)
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  monkeypatch.setattr(ex, "_stages", lambda run, out, budget, evaluate: [
      ("train", run, [sys.executable, "-c", _WAITS_FOR_SIGTERM])])
  start = time.time()
  statuses = sweep.run(jobs=2, until=start + 3)
  assert statuses == {runs[0].name: "stopped", runs[1].name: "stopped"}  # the third not started
  assert 3 <= time.time() - start < 50
  for run in runs[:2]:
    with open(os.path.join(run.workdir(sweep.out), "train.log")) as f:
      log = f.read()
    assert "ready" in log and "signals 1" in log, log  # one signal: the trainer saves
  assert not os.path.exists(runs[2].workdir(sweep.out))
  assert sum("until" in m and "stopping the runs in flight" in m for m in logged) == 1, logged
  assert not any(os.path.exists(os.path.join(r.workdir(sweep.out), ex.FAILED_FILE)) for r in runs)


def test_a_command_started_after_the_stop_gets_the_signal_at_once(tmp_path):
  with ex._Stop() as stop:
    stop.stop(signal.SIGTERM, once=True)
    stop.stop(signal.SIGTERM, once=True)  # once: no second signal for anyone
    start = time.time()
    status, tail = ex._execute([sys.executable, "-c", _WAITS_FOR_SIGTERM], str(tmp_path / "log"),
                               stop)
  # killed before its handler was set, or caught the signal: either way it ended at once
  assert status == -signal.SIGTERM or "signals 1" in tail, tail
  assert time.time() - start < 50


def test_a_second_signal_is_passed_on_to_stop_the_commands_at_once(tmp_path):
  """A user's second Ctrl-C reaches the trainers (which then stop without
  saving); only `until`'s stop is sent once."""
  log_path = str(tmp_path / "log")
  with ex._Stop() as stop:
    result = {}
    worker = threading.Thread(target=lambda: result.update(out=ex._execute(
        [sys.executable, "-c", _WAITS_FOR_SIGTERM], log_path, stop)))
    worker.start()
    def wait_for(line):  # a line the child printed (the command's text has them too)
      deadline = time.time() + 60
      while time.time() < deadline and not (
          os.path.exists(log_path) and f"\n{line}\n" in open(log_path).read()):
        time.sleep(0.05)

    wait_for("ready")
    stop.stop(signal.SIGTERM)
    wait_for("got")  # handled before the next: the kernel merges a pending one
    stop.stop(signal.SIGTERM)
    stop.stop(signal.SIGTERM, once=True)  # already stopped: not sent
    worker.join(60)
  status, tail = result["out"]
  assert status == 0 and "signals 2" in tail, tail


def test_parse_deadline():
  now = datetime.datetime(2026, 12, 4, 8, 0).timestamp()
  assert ex.parse_deadline("90m", now) == now + 5400
  assert ex.parse_deadline(" 2.5h", now) == now + 9000
  assert ex.parse_deadline("09:30", now) == now + 5400  # later today
  assert ex.parse_deadline("07:30", now) == now + 86400 - 1800  # tomorrow's
  assert ex.parse_deadline("2026-12-05T08:00", now) == now + 86400
  for value in ("soon", "-5m", "0h", "25:00", "", "m", "2026-13-01T00:00"):
    with pytest.raises(ValueError, match=f"stop_by={value!r}: expected a duration"):
      ex.parse_deadline(value, now)
  with pytest.raises(ValueError, match="until='soon': expected a duration"):
    ex.parse_deadline("soon", now, flag="until")
