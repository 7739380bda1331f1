"""bifocal_jax/cli.py: which log records reach stderr; the commands' --help and config listing."""

import logging as std_logging
import os

import pytest
from absl import logging

from bifocal_jax import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def record(path: str, level: int) -> std_logging.LogRecord:
  return std_logging.LogRecord("absl", level, path, 1, "message", None, None)


@pytest.mark.parametrize("path, level, shown", [
    ("/venv/site-packages/orbax/checkpoint/checkpoint_manager.py", std_logging.INFO, False),
    ("/venv/site-packages/jax/_src/xla_bridge.py", std_logging.INFO, False),
    ("/venv/site-packages/orbax/checkpoint/checkpoint_manager.py", std_logging.WARNING, True),
    ("/venv/site-packages/jax/_src/xla_bridge.py", std_logging.ERROR, True),
    ("/repo/bifocal_jax/train.py", std_logging.INFO, True),
    ("/venv/site-packages/bifocal_jax/evaluation/spectrum.py", std_logging.INFO, True),
])
def test_project_info_only(path, level, shown):
  assert cli._ProjectInfoOnly().filter(record(path.replace("/", os.sep), level)) is shown


@pytest.fixture
def absl_handler():
  handler = logging.get_absl_handler()
  filters, verbosity = list(handler.filters), logging.get_verbosity()
  # Start without the filter: an in-process training test may have installed it.
  handler.filters[:] = [f for f in filters if not isinstance(f, cli._ProjectInfoOnly)]
  yield handler
  handler.filters[:] = filters
  logging.set_verbosity(verbosity)


def test_quiet_library_logs_installs_one_filter(absl_handler):
  logging.set_verbosity(logging.INFO)
  cli.quiet_library_logs()
  cli.quiet_library_logs()
  assert sum(isinstance(f, cli._ProjectInfoOnly) for f in absl_handler.filters) == 1


def test_verbosity_one_shows_everything(absl_handler):
  logging.set_verbosity(logging.DEBUG)
  cli.quiet_library_logs()
  assert not any(isinstance(f, cli._ProjectInfoOnly) for f in absl_handler.filters)


def _help(*command, status=0):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  out = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == status, out.stderr  # absl's --help exits with status 1
  return out.stdout


def test_the_train_commands_help_lists_their_flags_the_configs_and_the_kinds():
  from bifocal_jax.nn import positions  # pylint: disable=g-import-not-at-top
  for command in (["train.py"], ["-m", "bifocal_jax.train"]):
    text = _help(*command, "--help", status=1)
    for flag in ("--config", "--workdir", "--overwrite", "--coordinator_address"):
      assert f"  {flag}" in text or f"  --[no]{flag[2:]}" in text, (command, flag)
    assert "--config.KEY=VALUE" in text
    flat = " ".join(text.split())
    for name in cli.CONFIG_NAMES:
      assert name in flat
    for kind in positions.POSITION_KINDS:
      assert kind in flat


def test_the_eval_commands_help_lists_their_flags():
  for command in (["eval.py"], ["-m", "bifocal_jax.eval"]):
    text = _help(*command, "--help", status=1)
    for flag in ("--workdir", "--dyck_file", "--compare", "--spectrum", "--probe", "--member"):
      assert f"  {flag}" in text or f"  --[no]{flag[2:]}" in text, (command, flag)




def _run(*command, cwd=ROOT, env=None):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  import helpers  # pylint: disable=g-import-not-at-top
  return subprocess.run([sys.executable, *command], cwd=cwd, capture_output=True, text=True,
                        timeout=300, env=env or helpers.subprocess_env())


def _one_line_error(result, *fragments):
  """`result` failed with status 2 and one line on stderr holding `fragments`, nothing on stdout."""
  assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
  lines = result.stderr.splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
  for fragment in fragments:
    assert fragment in lines[0], (fragment, lines[0])
  assert "Traceback" not in result.stdout and not result.stdout.strip(), result.stdout
  return lines[0]


def test_the_help_of_all_four_commands_names_the_data_directory_distribution_and_configs():
  for command in (["train.py"], ["-m", "bifocal_jax.train"], ["eval.py"],
                  ["-m", "bifocal_jax.eval"]):
    flat = " ".join(_help(*command, "--help", status=1).split())
    for needed in ("--data_dir", "BIFOCAL_DATA_DIR", "--coordinator_address", "--num_processes",
                   "--process_id", "python -m bifocal_jax.configs"):
      assert needed in flat, (command, needed)


def test_the_configs_command_lists_each_config_its_variants_and_purpose():
  import ast  # pylint: disable=g-import-not-at-top
  from bifocal_jax import configs  # pylint: disable=g-import-not-at-top
  text = _help("-m", "bifocal_jax.configs")
  assert _help("-m", "bifocal_jax.tasks") == text  # one listing, two commands
  lines = text.splitlines()
  entries = [(i, line) for i, line in enumerate(lines) if line.startswith("  ") and
             not line.startswith("      ")]
  assert [line.split()[0] for _, line in entries] == list(cli.CONFIG_NAMES)
  for i, line in entries:
    name = line.split()[0]
    variants = line.split("(variants: ")[1].rstrip(")").split(", ")
    assert variants == list(cli.config_variants(name)) and variants, line
    with open(os.path.join(cli.CONFIG_DIRECTORY, f"{name}.py")) as f:
      summary = ast.get_docstring(ast.parse(f.read())).splitlines()[0].rstrip(".")
    assert lines[i + 1] == "      " + summary, name  # its docstring's summary line, on one line
    assert len(summary) < 95, name
    for variant in variants:  # each listed variant loads, and nothing else does
      assert configs.get_config(name, variant).task.name
    with pytest.raises(ValueError, match="unknown variant"):
      configs.get_config(name, "no_such_variant")


@pytest.mark.parametrize("command", [["train.py"], ["-m", "bifocal_jax.train"]])
def test_print_config_prints_the_resolved_config_and_writes_nothing(command, tmp_path):
  workdir = tmp_path / "run"
  result = _run(*command, "--config", "dyck:tiny", "--config.steps=7",
                "--config.position.kind=rope", "--print_config", f"--workdir={workdir}")
  assert result.returncode == 0, result.stderr
  assert "steps: 7\n" in result.stdout and "kind: rope\n" in result.stdout
  assert "batch_size: 8\n" in result.stdout  # the tiny variant's
  assert not workdir.exists()
  # No --workdir needed to print; without --print_config it is.
  assert _run(*command, "--config=dyck", "--print_config").returncode == 0
  _one_line_error(_run(*command, "--config=dyck"), "--workdir is required")


@pytest.mark.parametrize("flags, fragments", [
    (["--config=dyk"], ["no such file, nor a config", "did you mean dyck?",
                        "python -m bifocal_jax.configs"]),
    (["--config=dyck:tinyy"], ["config dyck has no variant 'tinyy'", "dyck:tiny or dyck:paper"]),
    (["--config=dyck:tiny", "--config.stepz=3"], ["--config.stepz: no such config key",
                                                  "Did you mean \"steps\"", "--print_config"]),
    (["--config=dyck:tiny", "--config.steps=abc"], ["--config.steps=abc", "--print_config"]),
    (["--config=dyck:tiny", "--config.position.kind=ropee"], ["config.position.kind='ropee'",
                                                              "must be one of"]),
])
def test_a_bad_config_is_one_line_naming_the_fix(flags, fragments, tmp_path):
  workdir = tmp_path / "run"
  _one_line_error(_run("-m", "bifocal_jax.train", *flags, f"--workdir={workdir}"), *fragments)
  assert not workdir.exists()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
  """The tiny Dyck run trained by `train.py` (its output kept), then evaluated once."""
  import helpers  # pylint: disable=g-import-not-at-top
  workdir = tmp_path_factory.mktemp("tiny") / "run"
  trained = helpers.run_train(workdir)
  assert trained.returncode == 0, trained.stderr
  evaluated = _run("eval.py", f"--workdir={workdir}", "--num_examples=8", "--spectrum")
  assert evaluated.returncode == 0, evaluated.stderr
  return workdir, trained, evaluated


def test_the_trainer_reports_progress_and_ends_with_a_summary(tiny_run):
  workdir, trained, _ = tiny_run
  lines = trained.stdout.splitlines()
  assert lines[0] == f"training {workdir}: task dyck, position bifocal_heads, 30 steps of batch 8"
  progress = [line for line in lines if line.startswith("step ")]
  assert [line.split(":")[0] for line in progress] == [f"step {i}/30" for i in range(1, 31)]
  assert all("loss " in line and "tokens/s" in line for line in progress)
  # The evaluation steps (every 10 in the test config) show the validation scores.
  assert [line.split(":")[0] for line in progress if "; valid close " in line] == [
      "step 10/30", "step 20/30", "step 30/30"]
  summary = lines[lines.index(progress[-1]) + 1:]
  assert summary[0].startswith("trained to step 30 in ") and "final loss " in summary[0]
  assert "; valid close " in summary[0] and ", token " in summary[0]
  text = "\n".join(summary)
  for where in (f"{workdir}/checkpoints", f"{workdir}/metrics.jsonl",
                f"load_trajectory('{workdir}')"):
    assert where in text, where
  assert summary[-1] == f"next: python -m bifocal_jax.eval --workdir {workdir}"
  assert len(summary) <= 6
  assert "resum" not in trained.stdout


NO_COMPILE = """
import jax, helpers
from bifocal_jax import train
compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda name, *a, **k: compiles.append(name) if "/compile" in name else None)
summary = train.train_and_evaluate(helpers.tiny_config(), {workdir!r})
print("compiled:", compiles, "step:", summary["step"])
"""


def test_rerunning_a_finished_run_says_so_once_and_compiles_nothing(tiny_run):
  import helpers  # pylint: disable=g-import-not-at-top
  workdir = tiny_run[0]
  before = (workdir / "metrics.jsonl").read_text()
  out = helpers.run_python(NO_COMPILE.format(workdir=str(workdir)))
  assert out.splitlines() == [
      f"{workdir} already finished: it holds step 30 of 30, nothing to train; evaluate it with: "
      f"python -m bifocal_jax.eval --workdir {workdir}", "compiled: [] step: 30"]
  assert (workdir / "metrics.jsonl").read_text() == before
  again = helpers.run_train(workdir)  # the command: the same line, status 0
  assert again.returncode == 0 and again.stdout.count("already finished") == 1, again.stdout
  assert "resum" not in again.stdout + again.stderr and "compiled" not in again.stderr


def test_the_eval_table_has_a_legend_closing_bracket_accuracy_first_and_its_plots(tiny_run):
  workdir, _, evaluated = tiny_run
  out = evaluated.stdout
  header = next(line for line in out.splitlines() if line.startswith("split "))
  assert header.split()[2:] == ["close", "close_seq", "token", "seq", "che"]
  for name, words in (("close", "closing-bracket accuracy (Yao et al. 2021)"),
                      ("token", "token accuracy"), ("che", "CHE score (Deletang et al. 2023)")):
    assert any(line.split()[:1] == [name] and words in line for line in out.splitlines()), name
  assert "the run's CHE score (the benchmark's, from test_length): " in out
  assert "checkpoint_manager" not in evaluated.stderr and "read only" not in evaluated.stderr
  plots = [line[len("wrote "):] for line in out.splitlines() if line.endswith(".png")]
  assert sorted(os.path.basename(p) for p in plots) == [
      "spectral_trajectory.png", "spectrum.png", "wavelengths.png"]
  assert all(os.path.getsize(p) > 5000 and p.startswith(f"{workdir}/eval/") for p in plots)


def test_eval_errors_are_one_line_naming_the_fix_and_leave_results_as_they_were(tiny_run, tmp_path):
  workdir = tiny_run[0]
  results = (workdir / "eval" / "results.json").read_text()
  _one_line_error(_run("eval.py", f"--workdir={workdir}", "--splits=valid,tset_depth"),
                  "split='tset_depth'", "its splits: train, valid, test_length, test_depth")
  _one_line_error(_run("-m", "bifocal_jax.eval", f"--workdir={workdir}", "--member=x"),
                  "--member='x'", "'all'")
  _one_line_error(_run("eval.py", f"--workdir={workdir}", "--member=1"),
                  "holds a single run", "without naming a member")
  _one_line_error(_run("eval.py", f"--workdir={tmp_path / 'absent'}"), "no such directory",
                  "python -m bifocal_jax.train")
  assert not (tmp_path / "absent").exists()
  unsaved = tmp_path / "unsaved"
  unsaved.mkdir()
  (unsaved / "config.json").write_text((workdir / "config.json").read_text())
  _one_line_error(_run("eval.py", f"--workdir={unsaved}"), "no checkpoint",
                  "re-run its training command")
  assert sorted(os.listdir(unsaved)) == ["config.json"]
  _one_line_error(_run("eval.py", f"--workdir={workdir}", "--num_examples=many"),
                  "--num_examples=many", "--help")
  assert (workdir / "eval" / "results.json").read_text() == results
