"""The performance benchmarks run end to end at tiny sizes (`python -m benchmarks.NAME`).

Their figures are measured by hand (docs/performance.md); these tests keep the
scripts working: each runs as a subprocess at its smallest setting and writes
JSON whose figures must be present and sane. `gpu.py --tiny` is the dry run
of the accelerator script on CPU.
"""

import json
import os
import subprocess
import sys

import helpers
import pytest

pytestmark = pytest.mark.slow


def run_script(name, *flags, tmp_path, env=None):
  out = tmp_path / f"{name}.json"
  subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *flags, f"--out={out}"],
                 cwd=helpers.ROOT, env=helpers.subprocess_env(**(env or {})), check=True,
                 capture_output=True, timeout=600)
  return json.loads(out.read_text())


def test_step_benchmark(tmp_path):
  (r,) = run_script("step_benchmark", "--configs=smoke", "--rounds=2", "--peak_scale=0.03",
                    "--data_steps=3", tmp_path=tmp_path)["results"]
  assert set(r["steps"]) == {"bifocal", "rope", "flax"}
  for kind in ("bifocal", "rope", "flax"):
    step = r["steps"][kind]
    assert step["seconds"] > 0 and step["tokens_per_sec"] > 0 and step["mfu"] > 0, kind
  assert r["flops_per_step"] > 0 and r["peak_flops_per_sec"] > 0
  assert r["bifocal_over_rope"] > 0 and r["flax_over_bifocal"] > 0
  assert r["pipeline_over_step"] > 0 and r["steps"]["bifocal"]["compile_seconds"] > 0


def test_length_groups_benchmark(tmp_path):
  (r,) = run_script("length_groups", "--tasks=smoke", "--groups=1,2", "--steps=2", "--rounds=1",
                    tmp_path=tmp_path)["results"]
  plain, grouped = r["groups"]["1"], r["groups"]["2"]
  assert plain["over_plain"] == 1.0 and grouped["over_plain"] > 0
  assert plain["seconds_per_step"] > 0 and grouped["seconds_per_step"] > 0
  # Groups pad less (or as little); every step holds the same real tokens.
  assert r["real_tokens_per_step"] <= grouped["padded_tokens_per_step"]
  assert grouped["padded_tokens_per_step"] <= plain["padded_tokens_per_step"]


def test_dyck_eval_time_reads_the_data_directory(tmp_path):
  # A clone has no folder beside it: by default the files are the data
  # directory's, here the one in the cache home (BIFOCAL_DATA_DIR unset).
  folder = tmp_path / "cache" / "bifocal_jax" / "data" / "dyck-yao2021"
  folder.mkdir(parents=True)
  (folder / "k8_m5.test").write_text("(a (b b) a) END\n(c c) END\n(d (e e) d) (f f) END\n")
  (folder / "notes.txt").write_text("not a split\n")
  r = run_script("dyck_eval_time", tmp_path=tmp_path,
                 env={"BIFOCAL_DATA_DIR": "", "XDG_CACHE_HOME": str(tmp_path / "cache")})
  [row] = r["run"]["files"].values()
  assert list(r["run"]["files"]) == ["k8_m5.test"]
  assert row["examples"] == 3 and row["tokens"] > 0 and 0 <= row["close_accuracy"] <= 1


def test_step_profile_attributes_the_steps_ops_to_their_source(tmp_path):
  (r,) = run_script("step_profile", "--profile_configs=smoke", "--profile_kinds=relative",
                    "--traced_steps=1", "--top=3", tmp_path=tmp_path)["results"]
  assert r["kind"] == "relative" and r["op_seconds_per_step"] > 0
  # The ops are traced back to the project function that made them.
  assert any(source.startswith("nn/positions/relative.py") for source in r["by_source"])
  shares = [op["share"] for op in r["top_ops"]]
  assert len(shares) == 3 and shares == sorted(shares, reverse=True)


def test_reference_trainer_with_its_stand_in_then_warm(tmp_path):
  # CI has no checkout of their code: the Haiku stand-in runs, labelled as such.
  # One run of ours from an empty cache, the stand-in, then ours again on that cache.
  cache = tmp_path / "cache"
  env = {"BIFOCAL_COMPILATION_CACHE": str(cache)}
  r = run_script("reference_trainer", "--smoke", "--steps=6", "--fixed_steps=1", "--warm_rerun",
                 tmp_path=tmp_path, env=env)
  assert r["steps"] == 6 and r["compilations"] == len(r["buckets"])
  assert all(b % 8 == 0 for b in r["buckets"]) and r["buckets"][-1] >= 2 * r["max_input_length"]
  assert r["end_to_end_seconds"] >= r["compile_seconds"] + r["loop_seconds"]
  assert r["ours_end_to_end_seconds"] == r["end_to_end_seconds"]
  assert r["valid_tokens"] <= r["padded_tokens"]
  assert r["first_loss"] > 0 and r["steady_tokens_per_sec"] > 0
  # No hard-coded reference figure, and no original without a checkout.
  assert not any(k.startswith("reference_") for k in r)
  assert "original" not in r and "speedup_vs_original" not in r
  h = r["stand_in"]
  assert "not their code" in h["label"]
  assert h["tokens"] == r["valid_tokens"] and h["steps"] == r["steps"]
  assert 1 <= h["compilations"] <= r["max_input_length"]
  assert h["end_to_end_seconds"] >= h["setup_seconds"] + h["loop_seconds"] - 1e-6
  assert r["speedup_vs_stand_in"] == pytest.approx(
      h["end_to_end_seconds"] / r["end_to_end_seconds"])
  # The persistent compilation cache: the first run compiled and wrote it ...
  c = r["compilation_cache"]
  assert c["dir"] == str(cache) and c["state"] == "cold" and c["writes"] >= 1
  assert any(cache.iterdir())
  # ... and the rerun, a fresh process, found the first run's programs there.
  w = r["warm_rerun"]
  assert w["compilation_cache"]["state"] == "warm" and w["compilation_cache"]["hits"] >= len(
      r["buckets"])
  assert w["steps"] == r["steps"] and w["valid_tokens"] == r["valid_tokens"]
  assert w["first_loss"] == pytest.approx(r["first_loss"], rel=1e-6)  # the same run again
  assert r["ours_warm_end_to_end_seconds"] == w["end_to_end_seconds"]
  # A warm first run cannot stand for the cold figure.
  result = subprocess.run(
      [sys.executable, "-m", "benchmarks.reference_trainer", "--smoke", "--steps=6",
       "--fixed_steps=1", "--nostand_in", "--warm_rerun"], cwd=helpers.ROOT,
      env=helpers.subprocess_env(**env), capture_output=True, text=True, timeout=300)
  assert result.returncode != 0 and "needs a cold first run" in result.stderr


def test_reference_trainer_rejects_a_directory_that_is_not_their_checkout(tmp_path):
  (tmp_path / "experiments").mkdir()
  result = subprocess.run(
      [sys.executable, "-m", "benchmarks.reference_trainer", "--smoke", "--steps=1",
       f"--reference_checkout={tmp_path}"], cwd=helpers.ROOT, env=helpers.subprocess_env(),
      capture_output=True, text=True, timeout=300)
  assert result.returncode == 2
  assert result.stderr == (f"error: --reference_checkout={str(tmp_path)!r}: not a checkout of "
                           "neural_networks_chomsky_hierarchy (no experiments/training.py)\n")


def test_a_benchmark_given_a_bad_flag_says_so_in_one_line():
  """`bench_util.run_main`: a ValueError from a flag's value is one line, exit status 2."""
  result = subprocess.run(
      [sys.executable, "-m", "benchmarks.step_benchmark", "--configs=huge"], cwd=helpers.ROOT,
      env=helpers.subprocess_env(), capture_output=True, text=True, timeout=300)
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr.strip().splitlines()[-1] == (
      "error: --configs: unknown config 'huge', expected one of ('default', 'large', 'protocol40', 'protocol80', 'smoke')")
  assert "Traceback" not in result.stderr


@pytest.mark.skipif(not os.environ.get("NNCH_CHECKOUT"),
                    reason="set NNCH_CHECKOUT to a checkout of neural_networks_chomsky_hierarchy")
def test_reference_trainer_against_their_code(tmp_path):
  """Their own trainer from a checkout (not in CI: it has no network)."""
  r = run_script("reference_trainer", "--smoke", "--steps=6", "--fixed_steps=1",
                 f"--reference_checkout={os.environ['NNCH_CHECKOUT']}", tmp_path=tmp_path)
  o = r["original"]
  assert o["steps"] == r["steps"] and o["tokens"] == r["valid_tokens"]
  assert len(r["lengths"]) == 6 and o["compilations"] == len(set(r["lengths"]))  # one per length
  assert o["positional_encodings"] == "ROTARY" and len(o["losses"]) == 1  # logged at step 0
  assert r["speedup_vs_original"] == pytest.approx(
      r["original_end_to_end_seconds"] / r["ours_end_to_end_seconds"])
  assert "stand_in" not in r


def test_compile_options(tmp_path):
  r = run_script("compile_options", "--smoke", "--steps=6", "--rounds=1",
                 '--candidates={"default": {}, "O1": {"xla_backend_optimization_level": 1}}',
                 tmp_path=tmp_path)
  assert sum(r["steps_per_bucket"].values()) == 6 and set(r["candidates"]) == {"default", "O1"}
  base, o1 = r["candidates"]["default"], r["candidates"]["O1"]
  assert base["max_difference"] == 0 and base["loop_over_baseline"] == pytest.approx(1)
  # The same function compiled with less optimisation: equal to float rounding.
  assert 0 <= o1["max_difference"] < 1e-5
  assert o1["compile_seconds"] > 0 and o1["projected_loop_seconds"] > 0


def test_long_eval(tmp_path):
  # 1280 tokens: beyond one query chunk (1024), so the blocked path runs.
  r = run_script("long_eval", "--lengths=256,1280", "--runs=1", "--peak_repeats=1",
                 tmp_path=tmp_path)
  assert [row["length"] for row in r["rows"]] == [256, 1280]
  assert r["peak_flops_per_sec"] > 0
  for row in r["rows"]:
    assert row["seconds"] > 0 and row["peak_rss_mb"] >= row["rss_before_compile_mb"] > 0
    assert row["tokens_per_sec"] == pytest.approx(row["length"] / row["seconds"])
    assert 0 < row["peak_fraction"] == pytest.approx(
        row["attention_flops"] / row["seconds"] / r["peak_flops_per_sec"])


def test_attention_ceiling(tmp_path):
  r = run_script("attention_ceiling", "--block=32", "--blocks=2", "--head_dims=8,16",
                 "--repeats=1", "--calls=2", "--peak_scale=0.05", tmp_path=tmp_path)
  peak = r["peak_flops_per_sec"]
  assert peak > 0 and [row["head_dim"] for row in r["rows"]] == [8, 16]
  for row in r["rows"]:
    t = row["seconds"]
    assert all(v > 0 for v in t.values()) and row["flops_per_pair"] == 4 * 4 * 32**2 * row["head_dim"]
    parts = t["score_product"] + t["softmax_exponentials"] + t["value_product"]
    assert row["ceiling"] == pytest.approx(row["flops_per_pair"] / parts / peak)
    assert row["ceiling"] < row["ceiling_without_softmax"]  # the exponentials cost time
    assert row["blocked"] == pytest.approx(row["flops_per_pair"] / t["blocked"] / peak)


def test_gpu_script_dry_run(tmp_path):
  r = run_script("gpu", "--tiny", "--rounds=1", tmp_path=tmp_path)
  assert r["peak"]["flops_per_sec"] > 0
  for kind in ("bifocal", "rope"):
    t = r["train"]["kinds"][kind]
    assert t["mfu"] > 0 and t["fused_attention_in_step"] is False  # CPU
  assert r["train"]["bifocal_over_rope"] > 0
  assert r["attention"]["ours forward+backward"]["seconds"] > 0
  assert "cudnn forward" not in r["attention"]  # cuDNN needs a GPU
  # bf16 attention against float32 maths (on CPU any mask is exact: no NaN row).
  g = r["agreement"]
  assert g["within_bf16_tolerance"] and max(g["relative_errors"].values()) > 0
  assert not g["cudnn_applies"] and not g["holed_mask_row_nan"] and g["other_rows_finite"]
  assert g["padding_row_finite"]
  assert [row["length"] for row in r["long_eval"]["rows"]] == [64, 256]
  assert all(row["device_mb"] > 0 and row["seconds"] > 0 for row in r["long_eval"]["rows"])


def test_attention_kernels(tmp_path):
  (r,) = run_script("attention_kernels", "--shapes=2,2,16,8", "--repeats=1",
                    tmp_path=tmp_path)["rows"]
  assert r["shape"] == dict(batch=2, heads=2, length=16, head_dim=8)
  assert set(r["seconds"]) == {"kernel dot", "kernel reduce", "attention dot", "attention reduce"}
  assert min(r["seconds"].values()) > 0 and r["attention_dot_over_reduce"] > 0


def test_surgery_tunix(tmp_path):
  from bifocal_jax.surgery import tunix_models  # pylint: disable=g-import-not-at-top
  try:
    tunix_models.import_model("gemma3")
  except ImportError as e:
    pytest.skip(f"tunix's model code is not installed ({e})")
  r = run_script("surgery_tunix", "--tiny", "--families=gemma3", "--rounds=2", "--calls=1",
                 "--decode_calls=1", tmp_path=tmp_path)
  assert [x["config"]["family"] for x in r["results"]] == ["gemma3"]
  for x in r["results"]:
    assert all(s > 0 for s in x["seconds"].values()) and len(x["seconds"]) == 4
    assert x["train_ratio"] > 0 and x["decode_ratio"] > 0
