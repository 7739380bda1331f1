"""The sweep driver (experiments/extrapolation/sweep.py, `Sweep`) on a stand-in
cluster (`FakeCluster`): what is pending and in which order, each summary
written once and committed as it lands, runs the results choose, a protocol
run held while its source trains, and stopping: by a stopped run, by deadline
(`--stop_by`) and by `--limit`; each command run and logged (`execute`). On a
real Ray cluster: test_sweep_on_ray.py."""

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
from fake_cluster import FakeCluster
from waiting_run import WAITS_FOR_SIGTERM

from experiments.extrapolation import engine
from experiments.extrapolation import execute
from experiments.extrapolation import git_commit
from experiments.extrapolation import run_summary
from experiments.extrapolation import sweep as ex


def _fake_runs(monkeypatch, execute_fn=lambda unit: "done",
               summary=lambda r, *a: {"run": r.name}):
  """Tasks that "train and evaluate" with `execute_fn(unit)` (a status) and
  summarise each run with `summary`."""

  def fake_execute(unit, *args, **kwargs):
    status = execute_fn(unit)
    return status, "boom" if status == "failed" else ""

  monkeypatch.setattr(engine.execute_lib, "execute", fake_execute)
  monkeypatch.setattr(engine, "summary_of", summary)


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
  assert git_commit.git_commit_paths([str(summary)], "sweep: seed0", log=logged.append)
  assert logged == []
  assert _git(repo, "show", "--name-only", "--format=%s", "HEAD").split() == [
      "sweep:", "seed0", "results/seed0.json"]
  status = _git(repo, "status", "--porcelain").splitlines()
  assert sorted(status) == [" M work.py", "A  staged.py"]  # left as they were


def test_commit_outside_a_repository_logs_one_line_and_keeps_the_file(tmp_path):
  summary = tmp_path / "seed0.json"
  summary.write_text("{}")
  logged = []
  assert not git_commit.git_commit_paths([str(summary)], "sweep: seed0", log=logged.append)
  assert len(logged) == 1 and logged[0].startswith("not committed (sweep: seed0)")
  assert summary.read_text() == "{}"


def test_sweep_commits_each_summary_it_writes(tmp_path, monkeypatch):
  repo = _repo_with_other_work(tmp_path)
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(repo / "results"),
                   log=lambda m: None,
                   on_written=lambda paths, message: git_commit.git_commit_paths(paths, message))
  run = ex.Run(TASK, "rope", 0)
  _fake_runs(monkeypatch)
  monkeypatch.setattr(sweep, "pending", lambda: [run] if not sweep.done(run) else [])
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert sweep.run(FakeCluster()) == {run.name: "done"}
  committed = _git(repo, "show", "--name-only", "--format=%s", "HEAD").splitlines()
  assert committed[0] == f"sweep (results): {run.name}"
  assert committed[-1] == os.path.relpath(run_summary.summary_path(str(repo / "results"), run), repo)


def test_a_summary_is_written_once_and_whole(tmp_path, monkeypatch):
  """A summary already there (another driver landed it) is not written again;
  the file appears whole (written beside and renamed)."""
  results = tmp_path / "results"
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(results), log=lambda m: None)
  first, second = ex.Run(TASK, "rope", 0), ex.Run(TASK, "rope", 1)
  path = run_summary.summary_path(str(results), second)

  def land_second_meanwhile(unit):
    if unit == second:
      os.makedirs(os.path.dirname(path), exist_ok=True)
      with open(path, "w") as f:
        f.write('{"by": "another driver"}')
    return "done"

  _fake_runs(monkeypatch, land_second_meanwhile)
  monkeypatch.setattr(sweep, "pending", lambda: [first, second])
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  written = []
  sweep.on_written = lambda paths, message: written.extend(paths)
  assert sweep.run(FakeCluster()) == {first.name: "done", second.name: "done"}
  assert written == [run_summary.summary_path(str(results), first)]
  with open(path) as f:
    assert json.load(f) == {"by": "another driver"}
  assert not [n for n in os.listdir(os.path.dirname(path)) if not n.endswith(".json")]


def test_each_command_logs_its_duration_and_a_resumed_run_counts_every_segment(tmp_path):
  log_path = str(tmp_path / "train.log")
  for seconds in (0.3, 0.2):  # a run stopped, then resumed by a later sweep
    status, tail = execute.run_command(
        [sys.executable, "-c", f"import time; time.sleep({seconds}); print('step')"], log_path)
    assert status == 0 and "step" in tail
  (tmp_path / "eval.log").write_text(f"$ eval.py\n{run_summary.TOOK}2.0 s (exit status 0)\n")
  assert 2.5 <= run_summary.logged_seconds(str(tmp_path)) < 2.5 + 10  # both segments and the eval
  assert run_summary.logged_seconds(str(tmp_path / "missing")) == 0.0


def test_summary_seconds_include_segments_of_earlier_sweeps(tmp_path, monkeypatch):
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None)
  run = ex.Run(TASK, "rope", 0)
  os.makedirs(run.workdir(sweep.out))
  with open(os.path.join(run.workdir(sweep.out), "train.log"), "w") as f:
    f.write(f"{run_summary.TOOK}500.0 s (exit status -2)\n{run_summary.TOOK}100.5 s (exit status 0)\n")
  seconds = []
  _fake_runs(monkeypatch, summary=lambda r, out, budget, s: seconds.append(s) or {})
  monkeypatch.setattr(sweep, "pending", lambda: [run])
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert sweep.run(FakeCluster()) == {run.name: "done"}
  assert seconds == [600.5]


def test_sweep_takes_up_runs_that_became_pending_in_order_and_tries_each_once(
    tmp_path, monkeypatch):
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None)
  first, second, third = (ex.Run(TASK, "rope", seed) for seed in range(3))
  executed, done, calibrated = [], set(), []

  def pending():  # `third` is calibrated while `first` runs, and goes before `second`
    runs = [first] + ([third] if calibrated else []) + [second]
    return [r for r in runs if r.name not in done]

  def run(unit):
    executed.append(unit.name)
    calibrated.append(True)
    status = "done" if unit != second else "failed"  # a failed run stays pending
    if status == "done":
      done.add(unit.name)
    return status

  _fake_runs(monkeypatch, run)
  monkeypatch.setattr(sweep, "pending", pending)
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  statuses = sweep.run(FakeCluster())
  assert executed == [first.name, third.name, second.name]  # third asked for before second
  assert statuses == {first.name: "done", second.name: "failed", third.name: "done"}
  with open(os.path.join(second.workdir(sweep.out), ex.FAILED_FILE)) as f:
    assert f.readline().strip() == "boom"  # the one line, on the driver's disk


def test_as_many_in_flight_as_the_cluster_holds_and_a_protocol_run_waits_for_its_source(
    tmp_path, monkeypatch):
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None)
  rope0, rope1 = ex.Run(TASK, "rope", 0), ex.Run(TASK, "rope", 1)
  surgery0 = ex.Run(TASK, "bifocal_heads", 0, arm="surgery")
  assert surgery0.source() == rope0
  _fake_runs(monkeypatch)
  monkeypatch.setattr(sweep, "pending",
                      lambda: [r for r in (rope0, surgery0, rope1) if not sweep.done(r)])
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  cluster = FakeCluster(capacity=2)
  assert set(sweep.run(cluster).values()) == {"done"}
  # Two at a time; the surgery run not beside the rope run it starts from.
  assert cluster.submitted == [rope0.name, rope1.name, surgery0.name]


def test_a_run_the_results_choose_starts_in_the_sweep_that_landed_them(tmp_path, monkeypatch):
  # The preset adds `alibi` once `rope` seed 0 has its summary (as
  # roster_choices adds the five best once Dyck's roster is complete).
  results = str(tmp_path / "results")

  def extend(preset, results_dir):
    if not os.path.exists(os.path.join(results_dir, "odds_first/scratch/rope/seed0.json")):
      return preset
    return dataclasses.replace(preset, tasks=(dataclasses.replace(TASK, later_kinds=("alibi",)),))

  preset = ex.Preset(tasks=(TASK,), kinds=("rope",), seeds=(0,), extend=extend)
  _fake_runs(monkeypatch)
  for resolve, expected in ((None, ["rope"]), (lambda: preset.resolved(results), ["rope", "alibi"])):
    shutil.rmtree(results, ignore_errors=True)
    sweep = ex.Sweep(preset.resolved(results), str(tmp_path / "out"), results,
                     log=lambda m: None, resolve=resolve)
    monkeypatch.setattr(sweep, "budget", lambda task: 10)
    statuses = sweep.run(FakeCluster())
    assert [name.split("/")[2] for name in statuses] == expected  # without resolve: next sweep


def test_a_run_stopped_from_outside_starts_no_other(tmp_path, monkeypatch):
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None)
  first, second = (ex.Run(TASK, "rope", seed) for seed in range(2))
  executed = []
  _fake_runs(monkeypatch, lambda unit: executed.append(unit.name) or "stopped")
  monkeypatch.setattr(sweep, "pending", lambda: [first, second])
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert sweep.run(FakeCluster()) == {first.name: "stopped"}
  assert executed == [first.name]


def test_sweep_limit_counts_across_rounds(tmp_path, monkeypatch):
  sweep = ex.Sweep(PRESET, str(tmp_path / "out"), str(tmp_path / "results"), log=lambda m: None)
  runs = [ex.Run(TASK, "rope", seed) for seed in range(3)]
  _fake_runs(monkeypatch)
  monkeypatch.setattr(sweep, "pending", lambda: [r for r in runs if not sweep.done(r)])
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert list(sweep.run(FakeCluster(), limit=2)) == [runs[0].name, runs[1].name]
  assert list(sweep.run(FakeCluster(), limit=2)) == [runs[2].name]


def test_progress_counts_and_time_left():
  lines = []
  progress = ex.sweep_progress.Progress(4, lines.append, bar=False)
  progress.slots = 2
  assert progress.left() is None  # nothing finished: no guess
  for name in ("a", "b"):
    progress.start(name, 1)
  progress._started["a"] -= 100  # a took 100 s
  progress.end("a", "done")
  progress.end("b", "failed", "exit status 2")
  # 2 left, 2 at a time, at the median landed run's 100 s: one round.
  assert progress.landed == 1 and progress.failed == 1
  assert progress.left() == pytest.approx(100, abs=1)
  assert lines[0].startswith("[1/4] a  started") and lines[2].startswith("a: done in 100s")
  assert lines[3] == "b: failed in 0s: exit status 2"
  assert ex.sweep_progress.clock(3720) == "1h02m" and ex.sweep_progress.clock(90) == "2m"


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
  _fake_runs(monkeypatch, lambda unit: executed.append(unit.name) or "done")
  monkeypatch.setattr(sweep, "pending",
                      lambda: [r for r in (short, long, later) if r.name not in executed])
  monkeypatch.setattr(sweep, "budget", lambda task: 10)
  assert sweep.run(FakeCluster(), stop_by=time.time() + 600) == {short.name: "done", later.name: "done"}
  assert executed == [short.name, later.name]  # `long` passed over, the order kept otherwise
  passed = [m for m in logged if "not starting" in m]
  assert len(passed) == 1 and f"{long.name} (expected to take 5000 s)" in passed[0], logged
  executed.clear()
  assert sweep.run(FakeCluster(), stop_by=time.time() - 1) == {}  # past it: nothing, known or not
  assert sweep.run(FakeCluster(), stop_by=time.time() + 10_000) == {short.name: "done", long.name: "done",
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


def _wait_for_line(path, line, timeout=60):
  deadline = time.time() + timeout
  while time.time() < deadline and not (
      os.path.exists(path) and f"\n{line}\n" in open(path).read()):
    time.sleep(0.05)


def test_a_stopped_task_passes_one_sigterm_to_its_command_and_waits_for_it(tmp_path):
  """Ray's cancel is a KeyboardInterrupt in the task: the command gets one
  SIGTERM however many come (a second would make the trainer skip its save),
  and `Stopped` is raised once it has exited."""
  log_path = str(tmp_path / "log")

  def interrupt_twice():
    _wait_for_line(log_path, "ready")
    for _ in range(2):
      os.kill(os.getpid(), signal.SIGINT)
      time.sleep(0.2)

  previous = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    threading.Thread(target=interrupt_twice, daemon=True).start()
    with pytest.raises(execute.Stopped):
      execute.run_command([sys.executable, "-c", WAITS_FOR_SIGTERM], log_path)
  finally:
    signal.signal(signal.SIGINT, previous)
  log = open(log_path).read()
  assert "signals 1" in log and "(exit status 0)" in log, log


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_command_dies_with_the_process_that_started_it(tmp_path):
  """A worker killed outright leaves no trainer to race its retry."""
  pid_file = tmp_path / "child.pid"
  sleeper = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
  code = ("import sys; from experiments.extrapolation import execute; "
          f"execute.run_command([sys.executable, '-c', {sleeper!r}], {str(tmp_path / 'log')!r})")
  parent = subprocess.Popen([sys.executable, "-c", code], cwd=ex.engine.REPO)
  deadline = time.time() + 60
  while not (pid_file.exists() and pid_file.read_text()) and time.time() < deadline:
    time.sleep(0.05)
  child = int(pid_file.read_text())
  parent.kill()
  parent.wait()
  deadline = time.time() + 10
  while time.time() < deadline:
    try:
      os.kill(child, 0)
    except ProcessLookupError:
      break
    time.sleep(0.05)
  else:
    os.kill(child, signal.SIGKILL)
    pytest.fail("the command outlived the process that started it")


def test_a_failed_commands_error_line():
  tail = ("$ train.py ...\nI1207 step 0\nTraceback (most recent call last):\n  File x\n"
          "ValueError: batch_size=-3: must be positive\n# took 1.0 s (exit status 1)\n")
  assert execute.error_line(tail) == "ValueError: batch_size=-3: must be positive"
  assert execute.error_line("error: config 'dyk': unknown\n") == "error: config 'dyk': unknown"
  assert execute.error_line("killed\n") == "killed"
  assert execute.error_line("") == ""


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


def test_tasks_side_by_side_claim_disjoint_shares_of_the_cores(tmp_path):
  lock_dir = str(tmp_path / "locks")
  with execute.claimed_cores(2, cores=range(4), lock_dir=lock_dir) as first:
    with execute.claimed_cores(2, cores=range(4), lock_dir=lock_dir) as second:
      with execute.claimed_cores(2, cores=range(4), lock_dir=lock_dir) as third:
        assert {first, second} == {frozenset({0, 1}), frozenset({2, 3})}
        assert third is None  # none free: unpinned
    with execute.claimed_cores(2, cores=range(4), lock_dir=lock_dir) as again:
      assert again == second  # released when its task ended
  with execute.claimed_cores(4, cores=range(4), lock_dir=lock_dir) as whole:
    assert whole is None  # the whole node: nothing to keep apart


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity (not macOS) and two CPUs to tell a share from all")
def test_a_pinned_command_runs_on_its_cores_only(tmp_path):
  mine = sorted(os.sched_getaffinity(0))
  code = "import os; print('CORES', sorted(os.sched_getaffinity(0)))"
  for cores, expected in ((frozenset(mine[:1]), mine[:1]), (None, mine)):
    status, tail = execute.run_command([sys.executable, "-c", code], str(tmp_path / "log"), cores)
    assert status == 0 and f"CORES {expected}" in tail, tail
