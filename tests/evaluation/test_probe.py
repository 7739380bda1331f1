"""Mechanism probes: bracket labels, the block-by-block trace against the model,
recomputed attention weights against the layer, closed-form probes on
synthetic features, and `evaluate(..., probe=True)` on a tiny trained run."""

import json
import os
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from bifocal_jax.nn import attention as attention_lib
from bifocal_jax import configs
from bifocal_jax.evaluation import evaluate
from bifocal_jax.nn import model as model_lib
from bifocal_jax.evaluation import probe
from bifocal_jax.evaluation import attention_trace
from bifocal_jax.training import sharding as sharding_lib
from bifocal_jax.training import state as state_lib
from bifocal_jax import tasks
from bifocal_jax import train


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def task_named(name, **overrides):
  config = tasks.default_task_config(name)
  config.update(overrides)
  return tasks.get_task(config)


def encode(task, text):
  ids = np.array([[task.token_ids[t] for t in text.split()]], np.int32)
  return ids, np.ones_like(ids, bool)


# ----------------------------------------------------------------------------
# Labels.
# ----------------------------------------------------------------------------


def test_dyck_labels_by_hand():
  task = task_named("dyck")
  vocab = probe.brackets(task)
  assert vocab.open_ids == tuple(range(1, 9)) and vocab.close_ids == tuple(range(9, 17))
  ids, valid = encode(task, "(a (b b) a) (c (a a) c) END")
  labels = probe.nesting_labels(ids, valid, vocab)
  assert labels["depth"][0].tolist() == [1, 2, 1, 0, 1, 2, 1, 0, 0]
  assert labels["match"][0].tolist() == [-1, -1, 1, 0, -1, -1, 5, 4, -1]
  assert labels["top"][0].tolist() == [0, 1, 0, -1, 4, 5, 4, -1, -1]
  assert labels["height"][0].tolist() == [-1, -1, 1, 2, -1, -1, 1, 2, -1]
  # (b b) and (a a) are each the first pair inside theirs; the outer pairs are
  # outermost (-1), the second one's earlier pair of height 2 notwithstanding
  assert labels["sibling"][0].tolist() == [-1, -1, 0, -1, -1, -1, 0, -1, -1]
  assert (labels["operator"] == -1).all()


def test_listops_labels_by_hand():
  task = task_named("listops_depth")
  vocab = probe.brackets(task)
  ids, valid = encode(task, "[MAX 2 [MIN 4 7 ] [SM 1 ] 0 ]")
  # padding after the string: depth 0, no labels
  ids, valid = np.pad(ids, ((0, 0), (0, 2))), np.pad(valid, ((0, 0), (0, 2)))
  labels = probe.nesting_labels(ids, valid, vocab)
  assert labels["depth"][0].tolist() == [1, 1, 2, 2, 2, 1, 2, 2, 1, 1, 0, 0, 0]
  assert labels["match"][0].tolist() == [-1, -1, -1, -1, -1, 2, -1, -1, 6, -1, 0, -1, -1]
  op = {name: i for i, name in enumerate(vocab.operators)}
  mx, mn, sm = op["MAX"], op["MIN"], op["SM"]
  assert labels["operator"][0].tolist() == [mx, mx, mn, mn, mn, mx, sm, sm, mx, mx, -1, -1, -1]


@pytest.mark.parametrize("name", ["dyck", "listops", "listops_depth"])
def test_labels_agree_with_the_tasks(name):
  task = task_named(name)
  vocab = probe.brackets(task)
  for split in ("valid", "test_depth"):
    b = task.batch(split, np.arange(24))
    labels = probe.nesting_labels(b["inputs"], b["valid"], vocab)
    assert (labels["depth"].max(1) == b["depth"]).all()
    assert (labels["depth"][~b["valid"]] == 0).all()
    closing = labels["match"] >= 0
    assert (np.isin(b["inputs"][closing], vocab.close_ids)).all()
    assert (np.isin(np.take_along_axis(b["inputs"], np.maximum(labels["match"], 0), 1)[closing],
                    vocab.open_ids)).all()
    if name == "dyck":  # the target is the closing bracket of the stack's top
      has_top = labels["top"] >= 0
      top_ids = np.take_along_axis(b["inputs"], np.maximum(labels["top"], 0), 1)
      assert (b["mask"].astype(bool) == has_top).all()
      assert (b["targets"][has_top] == top_ids[has_top] + task.k).all()
      # a closing bracket closes the bracket of its own type
      match_ids = np.take_along_axis(b["inputs"], np.maximum(labels["match"], 0), 1)
      assert (b["inputs"][closing] == match_ids[closing] + task.k).all()
    if name == "listops_depth":  # scored exactly at the closing brackets
      assert (b["mask"].astype(bool) == closing).all()


def test_unbalanced_string_is_a_clear_error():
  task = task_named("dyck")
  ids, valid = encode(task, "(a a) b) END")
  with pytest.raises(ValueError, match="closes a bracket at position 2"):
    probe.nesting_labels(ids, valid, probe.brackets(task))


def test_task_without_brackets_is_a_one_line_error():
  task = task_named("parity_check")
  with pytest.raises(ValueError, match=r"^probe: task 'parity_check' has no brackets[^\n]*$"):
    probe.check_task(task)


# ----------------------------------------------------------------------------
# The trace and the attention weights against the model.
# ----------------------------------------------------------------------------


def build_model(position_config, kind, *, layers=2, heads=4, **overrides):
  cfg = model_lib.default_model_config()
  cfg.update(num_layers=layers, d_model=16, num_heads=heads, mlp_dim=32)
  position = position_config(kind, **overrides)
  return model_lib.Transformer(cfg, position, vocab_size=12, causal=True, rngs=nnx.Rngs(3))


def random_batch(seed=0, batch=2, length=20):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(1, 12, (batch, length)).astype(np.int32)
  valid = np.ones((batch, length), bool)
  valid[1, length - 5:] = False  # right padding in one row
  return jnp.asarray(tokens), jnp.asarray(valid)


KINDS = ["rope", "alibi", "bifocal", "spectral+alibi", "sin_cos", "t5", "kerple_log", "cope",
         "randomized_rope", "randomized_alibi"]


@pytest.mark.parametrize("kind", KINDS)
def test_trace_reproduces_the_models_logits(position_config, kind):
  model = build_model(position_config, kind)
  tokens, valid = random_batch()
  rng = jax.random.key(5)  # the randomized kinds draw their positions from it
  out = attention_trace.trace(model, tokens, valid, rng=rng)
  assert out["residuals"].shape == (3, 2, 20, 16)
  np.testing.assert_allclose(out["logits"], model(tokens, valid, rng=rng), atol=1e-5, rtol=1e-5)
  # the stream does change from block to block
  assert float(jnp.abs(out["residuals"][2] - out["residuals"][1]).max()) > 1e-3


WEIGHT_KINDS = [("nope", {}), ("sin_cos", {}), ("rope", {}), ("alibi", {}), ("bifocal", {}), ("bifocal", dict(split="pairs")),
                ("spectral+alibi", {}), ("t5", {}), ("rope+t5", {}), ("kerple_log", {}), ("randomized_alibi", {}),
                # data-dependent kinds: weights read off their own attention
                ("cope", {}), ("fox", {}), ("stickbreaking", {}), ("path", {}), ("path_fox", {}), ("fope", {}),
                ("stickbreaking", dict(stickbreaking_remainder="own_value")), ("rope+cope", {})]


@pytest.mark.parametrize("kind,overrides", WEIGHT_KINDS)
def test_weights_times_values_reproduce_the_attention_output(position_config, kind, overrides):
  model = build_model(position_config, kind, **overrides)
  tokens, valid = random_batch(1)
  rng = jax.random.key(2)
  # Layer 1's draw (randomized_alibi draws anew in every layer, as its source).
  positions, distances = (model_lib.layer_input(x, 1) for x in model.draw(tokens, valid, rng, False))
  block = model.blocks[1]
  x = attention_trace.trace(model, tokens, valid, rng=rng)["residuals"][1]
  h = block.ln_attn(x)
  attn = block.attn
  if kind.startswith("bifocal") or kind == "spectral+alibi":  # trained-looking spectra
    for group in [attn] if attn.groups is None else [attn.groups[k] for k in attn.group_kinds]:
      rope = group.rope
      if rope is not None:
        lf = rope.log_frequency[...]
        rope.log_frequency[...] = lf + jax.random.normal(jax.random.key(9), lf.shape)
  # Stick-breaking's model form: its remainder (on head_bias) and per-head norm follow the
  # weights (`finish`); trained-looking head_bias and norm.
  finish = getattr(attn.position, "finish", None)
  to_no_key = finish is not None and attn.position.remainder == "head_bias"
  if to_no_key:
    sb = attn.position
    for seed, p in enumerate((sb.head_bias_HxK, sb.norm_scale_HxK, sb.norm_bias_HxK)):
      p[...] = p[...] + jax.random.normal(jax.random.key(10 + seed), p.shape)
  w = attention_trace.attention_weights(attn, h, positions, valid, shared=model.position,
                              distances_BxL=distances)
  assert w.shape == (2, 4, 20, 20)
  if to_no_key:  # the remainder 1 - sum_j A_ij goes to no key
    assert float(jnp.max(w.sum(-1))) <= 1 + 1e-5 and float(jnp.min(w.sum(-1))) < 0.99
  else:
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
  assert float(jnp.min(w)) >= -1e-6
  assert float(jnp.abs(jnp.triu(w, 1)).max()) == 0.0  # causal
  assert float(jnp.abs(w[1, :, :15, 15:]).max()) == 0.0  # valid queries see no padded key
  v = jnp.einsum("bld,dhk->blhk", h, attn.qkv_DxTxHxK[...][:, 2])
  out = jnp.einsum("bhqs,bshk->bqhk", w, v)
  if finish is not None:
    out = finish(out, 1.0 - jnp.swapaxes(w.sum(-1), 1, 2))
  ours = jnp.einsum("blhk,hkd->bld", out, attn.out_HxKxD[...])
  theirs = attn(h, positions, valid, shared=model.position, distances_BxL=distances)
  np.testing.assert_allclose(ours[:, :, :], theirs, atol=2e-5, rtol=1e-5)
  # The trace picks each head's weight on the given key positions.
  match = np.full((2, 20), -1)
  match[0, 7], match[1, 12] = 3, 0
  masses = attention_trace.trace(model, tokens, valid, rng=rng, match_BxL=jnp.asarray(match))["match_mass"]
  np.testing.assert_allclose(masses[1, 0, :, 7], w[0, :, 7, 3], atol=1e-6)
  np.testing.assert_allclose(masses[1, 1, :, 12], w[1, :, 12, 0], atol=1e-6)
  assert float(jnp.abs(masses[1, 0, :, 8]).max()) == 0.0


@pytest.mark.parametrize("kind", ["cope", "fox", "stickbreaking", "path", "path_fox", "fope"])
def test_data_dependent_weights_are_what_their_attention_does_to_any_values(position_config, kind):
  # Weights read off one-hot values must reproduce the attention's output for
  # values it never saw (so the weights do not depend on the values), and for
  # a kind with a written-out softmax the same read-off gives those weights.
  model = build_model(position_config, kind)
  tokens, valid = random_batch(1, length=21)  # 21 keys: the last one-hot block overhangs
  x = attention_trace.trace(model, tokens, valid)["residuals"][1]
  attn = model.blocks[1].attn
  h = model.blocks[1].ln_attn(x)
  positions, _ = model.draw(tokens, valid, None, False)
  w = attention_trace.attention_weights(attn, h, positions, valid)
  qkv = jnp.einsum("bld,dthk->tblhk", h, attn.qkv_DxTxHxK[...])
  for seed in (0, 1):
    v = jax.random.normal(jax.random.key(seed), qkv.shape[1:])
    theirs = attention_lib.attend_heads(h, qkv.at[2].set(v), positions, valid, rope=attn.rope,
                                        position=attention_trace.values_part(attn.position),
                                        interface=attn.interface,
                                        shared=None, causal=True, query_chunk=1024)
    np.testing.assert_allclose(jnp.einsum("bhqs,bshk->bqhk", w, v)[valid.astype(bool)],
                               theirs[valid.astype(bool)], atol=2e-5, rtol=1e-5)


def test_basis_values_read_the_written_out_softmax(position_config):
  model = build_model(position_config, "alibi")
  tokens, valid = random_batch(1)
  attn = model.blocks[0].attn
  h = model.blocks[0].ln_attn(attention_trace.trace(model, tokens, valid)["residuals"][0])
  positions, _ = model.draw(tokens, valid, None, False)
  qkv = jnp.einsum("bld,dthk->tblhk", h, attn.qkv_DxTxHxK[...])
  read = attention_trace.weights_from_basis_values(h, qkv, positions, valid, rope=None,
                                         position=attn.position, interface=attn.interface,
                                         shared=None, causal=True, query_chunk=1024)
  written = attention_trace.attention_weights(attn, h, positions, valid)
  rows = valid.astype(bool)[:, None, :, None]  # valid queries
  np.testing.assert_allclose(jnp.where(rows, read, 0), jnp.where(rows, written, 0), atol=1e-6)


def test_head_eyes(position_config):
  eyes = lambda kind, **o: attention_trace.head_eyes(build_model(position_config, kind, **o).blocks[0].attn)
  assert eyes("bifocal") == ["geometric", "geometric", "spectral", "spectral"]
  assert eyes("bifocal", spectral_heads=1) == ["geometric"] * 3 + ["spectral"]
  assert eyes("bifocal", split="pairs") == ["pairs"] * 4
  assert eyes("rope") == ["geometric"] * 4 and eyes("spectral") == ["spectral"] * 4
  assert eyes("alibi") == ["alibi"] * 4
  assert eyes("spectral+alibi") == ["spectral", "spectral", "alibi", "alibi"]


# ----------------------------------------------------------------------------
# Probes on synthetic features.
# ----------------------------------------------------------------------------


def test_depth_probe_reads_a_linear_code_and_extrapolates():
  rng = np.random.default_rng(0)
  direction = rng.normal(size=24)

  def features(depth):
    return (depth[:, None] * direction + 0.05 * rng.normal(size=(len(depth), 24)) +
            rng.normal(size=(1, 24)) * 0.0 + 3.0)

  fit_depth = rng.integers(0, 6, 3000)
  test_depth = rng.integers(0, 11, 2000)
  p = probe.fit_depth_probe(features(fit_depth), fit_depth)
  r = probe.scores(probe.predict_depth(p, features(test_depth)), test_depth, test_depth,
                   fitted_max_depth=5)
  assert r["accuracy"] > 0.99 and r["unseen_accuracy"] > 0.99 and r["unseen_positions"] > 500
  assert set(r["by_depth"]) == {str(d) for d in range(11)}
  assert sum(r["by_depth_positions"].values()) == 2000
  # Features that do not encode depth: the probe does no better than guessing
  noise = lambda n: rng.normal(size=(n, 24))
  p = probe.fit_depth_probe(noise(3000), fit_depth)
  r = probe.scores(probe.predict_depth(p, noise(2000)), test_depth, test_depth, fitted_max_depth=5)
  assert r["accuracy"] < 0.3 and r["unseen_accuracy"] == 0.0


def test_class_probe_reads_one_hot_codes():
  rng = np.random.default_rng(1)
  codes = rng.normal(size=(5, 16))
  labels = rng.integers(0, 5, 2000)
  x = codes[labels] + 0.1 * rng.normal(size=(2000, 16))
  p = probe.fit_class_probe(x[:1000], labels[:1000], 5)
  assert (probe.predict_class(p, x[1000:]) == labels[1000:]).mean() > 0.99
  # constant features (a dead dimension) do not break the solve
  p = probe.fit_depth_probe(np.ones((50, 3)), np.arange(50) % 3)
  assert np.isfinite(p["w"]).all()


# ----------------------------------------------------------------------------
# evaluate(..., probe=True) on a tiny trained run.
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("run"))
  config = configs.load_file(os.path.join(ROOT, "configs", "dyck.py"), "tiny")
  config.buckets = (40,)
  config.steps = 10
  config.checkpoint_every = 10
  config.eval_every = 10
  config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, model=1))
  train.train_and_evaluate(config, workdir)
  return evaluate.load_run(workdir)


def test_evaluate_with_probe(trained_run, tmp_path):
  out = str(tmp_path / "eval" / "results.json")
  r = evaluate.evaluate(trained_run, splits=["valid"], num_examples=4, probe=True,
                        probe_examples=24, out=out, log=lambda _: None)
  with open(out) as f:
    assert json.load(f)["probe"] == r["probe"]
  p = r["probe"]
  layers = trained_run.config.model.num_layers
  assert p["layers"] == ["embedding"] + [f"block {i + 1}" for i in range(layers)]
  assert p["examples"] == {"valid": 24, "test_depth": 24}
  assert p["fitted_max_depth"] <= 5  # valid's depths are those of training
  for split in probe.SPLITS:
    assert len(p["depth"][split]) == layers + 1
    for layer in p["depth"][split]:
      assert 0.0 <= layer["accuracy"] <= 1.0
  deepest = p["depth"]["test_depth"][0]
  assert deepest["unseen_positions"] > 0 and max(int(d) for d in deepest["by_depth"]) > 5
  att = p["attention"]
  assert att["eyes"] == [["geometric", "geometric", "spectral", "spectral"]] * layers
  for split in probe.SPLITS:
    assert att["closing_positions"][split] > 0
    for name in ("match_mass", "top_mass"):
      masses = np.array(att[name][split], float)
      assert masses.shape == (layers, 4) and ((masses >= 0) & (masses <= 1)).all()
      assert set(att["by_eye"][split][name]) == {"geometric", "spectral"}
    assert 0 < att["uniform_mass"][split] < 1
    assert 0 <= att["far_positions"][split] <= att["closing_positions"][split]
    assert len(att["match_mass_far"][split]) == layers
    by_distance = att["match_mass_by_distance"][split]
    assert set(by_distance) == {"geometric", "spectral"}
    assert list(by_distance["spectral"])[0] == "1-1"  # a bracket closed at once: distance 1
    for by_level in att["match_mass_by_level"][split].values():
      assert all(0 <= m <= 1 for m in by_level.values())
      assert min(int(k) for k in by_level) == 1
  assert max(int(k) for k in att["match_mass_by_level"]["test_depth"]["spectral"]) > 5
  assert os.path.getsize(p["plots"]["probe"]) > 3000
  assert os.path.dirname(p["plots"]["probe"]) == os.path.dirname(out)
  # A later evaluation without --probe keeps it (same step)
  again = evaluate.evaluate(trained_run, splits=["valid"], num_examples=4, out=out,
                            log=lambda _: None)
  assert again["probe"] == p
  assert "depth accuracy" in probe.format_report(p)
  # The sweep's summary of it and its report table (experiments/extrapolation/run_summary.py,
  # probe_report.py)
  from experiments.extrapolation import probe_report  # pylint: disable=g-import-not-at-top
  from experiments.extrapolation import run_summary  # pylint: disable=g-import-not-at-top
  summary = run_summary.probe_summary(p)
  assert summary["depth"]["test_depth"]["accuracy"] == [
      layer["accuracy"] for layer in p["depth"]["test_depth"]]
  assert probe_report.head_eyes({"probe": summary}) == p["attention"]["eyes"]
  assert summary["match_mass_far"] == p["attention"]["match_mass_far"]
  assert summary["top_mass"] == p["attention"]["top_mass"]
  table = probe_report.probe_table({("scratch", "bifocal"): {0: {"probe": summary}}})
  assert "| bifocal (scratch) | 1 |" in table and "spectral 0." in table


def test_the_far_masses_are_the_match_masses_of_the_pairs_far_apart(trained_run, monkeypatch):
  monkeypatch.setattr(probe, "FAR", 1)  # every pair: the far masses are all of them
  att = probe.probe_report(trained_run, num_examples=8)["attention"]
  assert att["match_mass_far"] == att["match_mass"]
  assert att["far_positions"] == att["closing_positions"]
  monkeypatch.setattr(probe, "FAR", 10**6)  # no pair: null, not a mean of nothing
  att = probe.probe_report(trained_run, num_examples=8)["attention"]
  assert att["far_positions"] == {split: 0 for split in probe.SPLITS}
  assert all(m is None for split in probe.SPLITS for layer in att["match_mass_far"][split]
             for m in layer)
  assert any(m is not None for layer in att["match_mass"]["test_depth"] for m in layer)


def test_probe_of_a_task_without_brackets_fails_before_any_work(trained_run, tmp_path,
                                                               monkeypatch):
  monkeypatch.setattr(trained_run.evaluator.setup, "task", task_named("parity_check"))
  with pytest.raises(ValueError, match="has no brackets"):
    evaluate.evaluate(trained_run, splits=(), probe=True, out=str(tmp_path / "r.json"),
                      log=lambda _: None)
  assert not os.path.exists(tmp_path / "r.json")


def test_listops_report_probes_the_open_operator(tmp_path):
  """An untrained listops_depth model: the report's operator probe and its schema."""
  config = configs.load_file(os.path.join(ROOT, "configs", "listops_depth.py"), "tiny")
  config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, model=1))
  mesh = sharding_lib.make_mesh(config.mesh)
  with jax.set_mesh(mesh):
    setup, state = state_lib.setup(config, mesh)
  run = types.SimpleNamespace(setup=setup, params=state["params"],
                              evaluator=types.SimpleNamespace(rng=jax.random.key(0)))
  p = probe.probe_report(run, num_examples=16, out_dir=str(tmp_path))
  assert p["operator_classes"] == ["MIN", "MAX", "MED", "SM", "none"]
  for split in probe.SPLITS:
    assert len(p["operator"][split]) == len(p["layers"])
    for layer in p["operator"][split]:
      assert 0.0 <= layer["accuracy"] <= 1.0 and layer["positions"] > 0
  # the embedding of an opening token names its operator: read off linearly
  assert p["operator"]["valid"][0]["accuracy"] > 0.3
  assert os.path.getsize(p["plots"]["probe"]) > 3000


@pytest.mark.slow
def test_cli_probe_flag(trained_run, tmp_path):
  out = tmp_path / "cli.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run(
      [sys.executable, os.path.join(ROOT, "eval.py"), f"--workdir={trained_run.workdir}",
       "--splits=valid", "--num_examples=4", "--probe", "--probe_examples=8", f"--out={out}"],
      capture_output=True, text=True, env=env, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  result = json.loads(out.read_text())
  assert result["probe"]["examples"] == {"valid": 8, "test_depth": 8}
  assert "depth accuracy per layer" in proc.stdout
  assert os.path.exists(tmp_path / "probe.png")
