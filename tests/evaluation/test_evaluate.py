"""Evaluation: a tiny trained run, the results schema, the published-data path,
a 5,000-token string in bounded memory, comparisons and the CLI (the batching
itself: `test_budget_batches.py`)."""

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from bifocal_jax.evaluation import compare
from bifocal_jax import configs
from bifocal_jax.evaluation import budget_batches
from bifocal_jax.evaluation import report as eval_report
from bifocal_jax.evaluation import evaluate
from bifocal_jax.evaluation import evaluator
from bifocal_jax.training import metrics
from bifocal_jax import tasks
from bifocal_jax import train

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tiny_config():
  return configs.load_file(os.path.join(ROOT, "configs", "dyck.py"), "tiny")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """A tiny bifocal Dyck run (checkpoints at steps 10, 20, 30)."""
  workdir = str(tmp_path_factory.mktemp("run"))
  config = tiny_config()
  config.buckets = (40,)  # one train-step compilation instead of three
  train.train_and_evaluate(config, workdir)
  return workdir


@pytest.fixture(scope="module")
def run(trained):
  """Its latest checkpoint, restored once (each restore builds the trainer's setup)."""
  return evaluate.load_run(trained)


@pytest.fixture(scope="module")
def evaluated(run):
  """The run evaluated on 16 examples of each held-out split, with the spectrum."""
  return evaluate.evaluate(run, num_examples=16, spectrum=True, log=lambda _: None)


def quiet(**kwargs):
  return dict(log=lambda _: None, **kwargs)


# ----------------------------------------------------------------------------
# Evaluation of a trained run.
# ----------------------------------------------------------------------------


def test_results_schema(trained, evaluated):
  with open(os.path.join(trained, "eval", "results.json")) as f:
    assert json.load(f) == evaluated
  r = evaluated
  assert r["step"] == 30 and r["task"] == "dyck" and r["position_kind"] == "bifocal"
  assert r["position"] == "bifocal_heads"  # the scheme's one name: bifocal with its split
  assert r["workdir"] == os.path.abspath(trained)
  assert set(r["splits"]) == {"valid", "test_length", "test_depth"}
  config = tiny_config().task
  for name, s in r["splits"].items():
    assert s["source"] == "task" and s["examples"] == 16
    for key in ("token_accuracy", "sequence_accuracy", "close_accuracy",
                "close_sequence_accuracy", "che_score"):
      assert 0.0 <= s[key] <= 1.0, (name, key)
      lo, hi = s["ci95"][key]  # every accuracy carries its 95% interval
      assert lo <= s[key] <= hi and hi - lo < 0.6, (name, key, lo, hi)
    assert s["loss"] > 0
    assert sum(s["by_length_tokens"].values()) == s["tokens"] == sum(s["by_depth_tokens"].values())
    pooled = sum(s["by_length"][k] * n for k, n in s["by_length_tokens"].items()) / s["tokens"]
    assert pooled == pytest.approx(s["token_accuracy"])
    assert s["che_score"] == pytest.approx(np.mean(list(s["by_length"].values())))
    lengths = [int(k) for k in s["by_length"]]
    depths = [int(k) for k in s["by_depth"]]
    spec = config[name]
    assert spec.min_length <= min(lengths) and max(lengths) <= spec.max_length
    assert spec.min_depth <= min(depths) and max(depths) <= spec.max_depth
  # Dyck has no CHE protocol: the run's CHE score is test_length's, never pooled with test_depth.
  assert r["che_score"] == r["splits"]["test_length"]["che_score"]
  assert r["che_ci95"] == r["splits"]["test_length"]["ci95"]["che_score"]
  # The spectrum: one fit per layer and spectral head of the bifocal model.
  spectrum = r["spectrum"]
  assert spectrum["step"] == 30 and spectrum["drift"] > 0
  assert len(spectrum["heads"]) == spectrum["shape"][0] * spectrum["shape"][1] > 0
  for path in spectrum["plots"].values():
    assert os.path.getsize(path) > 5000
  table = eval_report.format_results(r)
  assert table.splitlines()[0] == f"{r['workdir']}  step 30  task dyck  position bifocal_heads"
  assert "CHE" in table and f"{r['splits']['valid']['token_accuracy']:.3f}+-" in table


def test_training_loop_logs_what_the_evaluator_scores(trained, run):
  """One evaluator: the loop's `valid_*` metrics at the last step are the
  evaluator's results on the same parameters and examples."""
  logged = [r for r in metrics.read_metrics(trained) if "valid_token_accuracy" in r][-1]
  assert logged["step"] == run.step == 30
  mine = run.evaluator.split(run.params, "valid", num_examples=run.config.eval_examples)
  for key in ("token_accuracy", "sequence_accuracy", "close_accuracy", "loss"):
    assert logged[f"valid_{key}"] == pytest.approx(mine[key], rel=1e-6), key


def test_results_merge_by_step(trained, run, evaluated, tmp_path):
  out = str(tmp_path / "merge.json")
  shutil.copy(os.path.join(trained, "eval", "results.json"), out)
  # Same step: the new split replaces its old entry, the others stay.
  r = evaluate.evaluate(run, splits=["valid"], num_examples=4, **quiet(out=out))
  assert set(r["splits"]) == {"valid", "test_length", "test_depth"} and "spectrum" in r
  assert r["splits"]["valid"]["examples"] == 4
  assert r["splits"]["test_depth"] == evaluated["splits"]["test_depth"]
  # Results of another step are dropped.
  with open(out) as f:
    older = dict(json.load(f), step=20)
  with open(out, "w") as f:
    json.dump(older, f)
  r = evaluate.evaluate(run, splits=["valid"], num_examples=4, **quiet(out=out))
  assert set(r["splits"]) == {"valid"} and r["che_score"] is None and "spectrum" not in r
  with pytest.raises(ValueError, match="split='nope'"):
    evaluate.evaluate(run, splits=["nope"], **quiet(out=out))
  with pytest.raises(ValueError, match="step=7"):
    evaluate.load_run(trained, step=7)
  with pytest.raises(ValueError, match="config.json"):
    evaluate.load_run(str(tmp_path))


def test_evaluate_steps_scores_each_checkpoint_as_its_own_evaluation(trained, tmp_path):
  """One process, one compiled step, several checkpoints: each checkpoint's
  results are those of evaluating it alone, in its own results file."""
  options = dict(splits=["valid"], num_examples=8)
  results = evaluate.evaluate_steps(trained, [20, 10], **quiet(**options))
  assert list(results) == [10, 20]
  for step in (10, 20):
    path = evaluate.results_path(trained, step)
    assert path == os.path.join(os.path.abspath(trained), "eval", f"results_step{step}.json")
    with open(path) as f:
      assert json.load(f) == results[step]
    alone = evaluate.evaluate(evaluate.load_run(trained, step=step),
                              **quiet(out=str(tmp_path / f"alone{step}.json"), **options))
    assert results[step]["step"] == step
    assert results[step]["splits"] == alone["splits"]
  assert results[10]["splits"]["valid"]["loss"] != results[20]["splits"]["valid"]["loss"]
  with pytest.raises(ValueError, match=r"steps=\[7\]: no checkpoint"):
    evaluate.evaluate_steps(trained, [10, 7], **quiet(**options))
  with pytest.raises(ValueError, match="out="):
    evaluate.evaluate_steps(trained, [10], **quiet(out="x.json", **options))
  with pytest.raises(ValueError, match="steps=\\[\\]"):
    evaluate.evaluate_steps(trained, [], **quiet(**options))


def test_dyck_file_on_trained_run(run, tmp_path, published_dir):
  path = tmp_path / "k8_m5_head.test"
  path.write_text("".join(select_lines(os.path.join(published_dir, "k8_m5.test"), 183, 192, 6)))
  r = evaluate.evaluate(run, dyck_files=[str(path)], **quiet(out=str(tmp_path / "r.json")))
  s = r["splits"]["k8_m5_head.test"]
  assert set(r["splits"]) == {"k8_m5_head.test"} and s["source"] == str(path)
  assert s["examples"] == 6 and list(s["by_depth"]) == ["5"]
  assert all(183 <= int(k) <= 192 for k in s["by_length"])
  assert 0.0 <= s["close_accuracy"] <= 1.0
  with pytest.raises(ValueError, match="dyck_file="):
    run.evaluator.dyck_file(run.params, str(tmp_path / "missing.test"))


def test_published_files_by_name_come_from_the_data_directory(run, tmp_path):
  data_dir = tmp_path / "data"
  (data_dir / "dyck-yao2021").mkdir(parents=True)
  path = data_dir / "dyck-yao2021" / "k8_m5.test"
  path.write_text("(a a) END\n(b (c c) b) END\n")
  r = evaluate.evaluate(run, dyck_files=["k8_m5.test"], data_dir=str(data_dir),
                        **quiet(out=str(tmp_path / "r.json")))
  assert r["splits"]["k8_m5.test"]["source"] == str(path)
  assert r["splits"]["k8_m5.test"]["examples"] == 2
  with pytest.raises(ValueError, match=r"^published Dyck file 'k8_m10.test' is not in .*: run "
                     r"`python -m bifocal_jax.tasks.external fetch --data_dir=.*`"):
    evaluate.evaluate(run, dyck_files=["k8_m10.test"], data_dir=str(data_dir),
                      **quiet(out=str(tmp_path / "r.json")))
  with pytest.raises(ValueError, match="dyck_file='k8_m7.test': no such file"):
    evaluate.evaluate(run, dyck_files=["k8_m7.test"], **quiet(out=str(tmp_path / "r.json")))


def test_compare(trained, evaluated, tmp_path):
  other = str(tmp_path / "other_run")
  shutil.copytree(trained, other)
  markdown, png = compare.compare([trained, other], **quiet(out=str(tmp_path / "cmp.md")))
  rows = [l for l in markdown.splitlines() if l.startswith("|")]
  assert len(rows) == 4 and "test_depth" in rows[0]
  assert os.path.basename(trained) in rows[2] and "other_run" in rows[3]
  assert f"{evaluated['splits']['valid']['token_accuracy']:.3f}" in rows[2]
  assert (tmp_path / "cmp.md").read_text() == markdown
  assert os.path.getsize(png) > 5000 and png.endswith("cmp.png")


def _hwm_and_rss_mb() -> tuple[float, float]:
  fields = {}
  with open("/proc/self/status") as f:
    for line in f:
      key, _, value = line.partition(":")
      fields[key] = value
  return int(fields["VmHWM"].split()[0]) / 1024, int(fields["VmRSS"].split()[0]) / 1024


def test_5000_token_string_evaluates_in_bounded_memory(run, tmp_path):
  # A depth-20 Dyck-8 string of 5,001 tokens (as long as k8_m20.test's).
  rng = np.random.default_rng(0)
  tokens, stack = [], []
  while len(tokens) + len(stack) < 5000:
    if stack and (len(stack) == 20 or rng.random() < 0.5):
      tokens.append(f"{stack.pop()})")
    else:
      stack.append("abcdefgh"[rng.integers(8)])
      tokens.append(f"({stack[-1]}")
  tokens += [f"{x})" for x in reversed(stack)] + ["END"]
  path = tmp_path / "long.txt"
  path.write_text(" ".join(tokens) + "\n")
  with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets the peak resident set size (VmHWM) to the current one
  _, rss_before = _hwm_and_rss_mb()
  r = run.evaluator.with_batching(memory_budget=128 << 20).dyck_file(run.params, str(path))
  peak, _ = _hwm_and_rss_mb()
  assert r["examples"] == 1 and list(r["by_length"]) == [str(len(tokens))]
  # One row of [4 heads, 5120, 5120] float32 scores is 400 MiB and XLA keeps
  # a few such buffers; the default batch of 16 rows would need over 20 GiB.
  assert peak - rss_before < 1000, (peak, rss_before)


@pytest.mark.slow
def test_cli(trained, tmp_path):
  out = tmp_path / "cli.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, "eval.py"), f"--workdir={trained}", "--step=20",
       "--splits=valid", "--num_examples=4", f"--out={out}"],
      capture_output=True, text=True, env=env, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  result = json.loads(out.read_text())
  assert "valid" in proc.stdout and result["step"] == 20
  assert result["splits"]["valid"]["examples"] == 4
  bad = subprocess.run(
      [sys.executable, os.path.join(ROOT, "eval.py"), f"--workdir={tmp_path}"],
      capture_output=True, text=True, env=env, timeout=600)
  assert bad.returncode == 2 and "config.json" in bad.stderr
  absent = subprocess.run(
      [sys.executable, os.path.join(ROOT, "eval.py"), f"--workdir={trained}",
       "--dyck_file=k8_m10.test", f"--data_dir={tmp_path / 'empty'}"],
      capture_output=True, text=True, env=env, timeout=600)
  assert absent.returncode == 2 and len(absent.stderr.splitlines()) == 1, absent.stderr
  assert "python -m bifocal_jax.tasks.external fetch" in absent.stderr
  several = subprocess.run(
      [sys.executable, os.path.join(ROOT, "eval.py"), f"--workdir={trained}", "--steps=10,30",
       "--splits=valid", "--num_examples=4"],
      capture_output=True, text=True, env=env, timeout=600)
  assert several.returncode == 0, several.stderr[-2000:]
  for step in (10, 30):
    with open(evaluate.results_path(trained, step)) as f:
      assert json.load(f)["step"] == step
  clash = subprocess.run(
      [sys.executable, os.path.join(ROOT, "eval.py"), f"--workdir={trained}", "--steps=10",
       "--step=10"], capture_output=True, text=True, env=env, timeout=600)
  assert clash.returncode != 0 and "drop --step" in clash.stderr


# ----------------------------------------------------------------------------
# The published-data path: oracle and chance predictors.
# ----------------------------------------------------------------------------


def select_lines(path, low, high, limit):
  with open(path) as f:
    lines = [l for l in f if low <= len(l.split()) <= high]
  return lines[:limit]


@pytest.fixture(scope="module")
def published_batches(tmp_path_factory, published_dir):
  """Published strings from two files, chosen to fill two length buckets."""
  lines = (select_lines(os.path.join(published_dir, "k8_m10.test"), 705, 768, 12)
           + select_lines(os.path.join(published_dir, "k8_m20.test"), 2900, 3072, 4))
  path = tmp_path_factory.mktemp("published") / "sample.txt"
  path.write_text("".join(lines))
  bs = lambda w: budget_batches.batch_size_for_length(w, num_heads=4, max_batch_size=8)
  return list(budget_batches.dyck_file_batches(str(path), k=8, batch_size_fn=bs)), len(lines)


CLOSE_IDS = tuple(range(9, 17))
VOCAB = 18


@jax.jit
def predictor_counts(targets, mask, key):
  """Accuracy counts of three reference predictors, built from the targets."""
  oracle = jax.nn.one_hot(targets, VOCAB) * 10.0
  uniform = jax.numpy.zeros(targets.shape + (VOCAB,))
  guess = jax.random.randint(key, targets.shape, CLOSE_IDS[0], CLOSE_IDS[-1] + 1)
  random_guess = jax.nn.one_hot(guess, VOCAB) * 10.0
  return {name: metrics.accuracy_counts(logits, targets, mask, close_ids=CLOSE_IDS)
          for name, logits in (("oracle", oracle), ("uniform", uniform),
                               ("random", random_guess))}


def score_predictor(batches, name):
  keys = iter(jax.random.split(jax.random.key(0), len(batches)))
  return evaluator.score_batches(
      batches, lambda b: predictor_counts(b["targets"], b["mask"], next(keys))[name])


def test_oracle_scores_perfectly_on_published_data(published_batches):
  batches, num_lines = published_batches
  r = score_predictor(batches, "oracle")
  assert r["examples"] == num_lines and r["tokens"] > 10_000
  for key in ("token_accuracy", "sequence_accuracy", "close_accuracy",
              "close_sequence_accuracy", "che_score"):
    assert r[key] == 1.0, key
  assert set(r["by_depth"]) == {"10", "20"} and set(r["by_depth"].values()) == {1.0}


def test_chance_predictors_on_published_data(published_batches):
  batches, _ = published_batches
  # A uniform distribution: p(correct)/p(any close) = 1/8 is never above 0.8,
  # and its argmax (the first id, padding) is never a closing bracket.
  uniform = score_predictor(batches, "uniform")
  assert uniform["close_accuracy"] == 0.0 and uniform["token_accuracy"] == 0.0
  # Guessing a closing bracket uniformly at random: 1/8 of positions.
  guess = score_predictor(batches, "random")
  sigma = np.sqrt(1 / 8 * 7 / 8 / guess["tokens"])
  assert abs(guess["token_accuracy"] - 1 / 8) < 4 * sigma
  assert guess["close_accuracy"] == guess["token_accuracy"]
  assert guess["sequence_accuracy"] == 0.0


# ----------------------------------------------------------------------------
# The CHE protocol of Deletang et al. (Chomsky-hierarchy tasks).
# ----------------------------------------------------------------------------


def test_argmax_ranges_over_the_task_output_classes():
  # Token 3 has the highest logit, but only tokens 5 and 6 are classes: 6 is predicted.
  logits = jax.numpy.array([[[0.0, 0, 0, 9.0, 0, 1.0, 2.0]]])
  targets, mask = jax.numpy.array([[6]]), jax.numpy.ones((1, 1))
  assert int(metrics.accuracy_counts(logits, targets, mask)["token_correct"][0]) == 0
  counts = metrics.accuracy_counts(logits, targets, mask, class_ids=(5, 6))
  assert int(counts["token_correct"][0]) == 1


@pytest.fixture(scope="module")
def reverse_string_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("reverse_string"))
  config = configs.load_file(os.path.join(ROOT, "configs", "reverse_string.py"), "tiny")
  config.buckets = (48,)
  train.train_and_evaluate(config, workdir)
  return evaluate.load_run(workdir)


def test_che_protocol_scores_every_length_and_averages_them(reverse_string_run, tmp_path):
  run = reverse_string_run
  protocol = evaluator.CheProtocol(stride=3, per_length=5)
  r = evaluate.evaluate(run, che_protocol=protocol, **quiet(out=str(tmp_path / "r.json")))
  # The protocol replaces sampling test_length; valid is scored on its own.
  assert set(r["splits"]) == {"valid", "che"}
  che = r["splits"]["che"]
  assert (che["source"], che["split"], che["stride"], che["per_length"]) == (
      "che_protocol", "test_length", 3, 5)
  assert sorted(int(k) for k in che["by_length"]) == list(range(13, 25, 3))  # tiny: 13..24
  assert che["examples"] == 5 * 4
  # reverse_string outputs n symbols: every length is scored on 5 * n tokens.
  assert {k: v for k, v in che["by_length_tokens"].items()} == {
      str(n): 5 * n for n in range(13, 25, 3)}
  assert r["che_score"] == che["che_score"] == pytest.approx(np.mean(list(
      che["by_length"].values())))
  lo, hi = r["che_ci95"]
  assert lo <= r["che_score"] <= hi
  assert os.path.getsize(che["plot"]) > 3000
  # Examples at a length are their own stream: the same on a second evaluation.
  again = run.evaluator.che_protocol(run.params, protocol)
  assert again["by_length"] == che["by_length"]
  with pytest.raises(ValueError, match="draws no examples at a given length"):
    evaluator.CheProtocol().check(tasks.get_task(tiny_config().task))  # Dyck
