"""`python -m bifocal_jax.surgery.tunix_lora`, the packaged tunix LoRA example: its
flags and errors (without tunix: it is blocked in the subprocess), and a short run
(skipped where tunix's trainer code or qwix is not installed)."""

import json
import os
import subprocess
import sys

import pytest

import helpers

# Runs the module as `python -m` does, in an interpreter where tunix and qwix
# cannot be imported (as where they are not installed).
WITHOUT_TUNIX = """
import runpy, sys
sys.modules["tunix"] = sys.modules["qwix"] = None
sys.argv = ["tunix_lora", *{args!r}]
runpy.run_module("bifocal_jax.surgery.tunix_lora", run_name="__main__", alter_sys=True)
"""


def without_tunix(*args):
  return subprocess.run([sys.executable, "-c", WITHOUT_TUNIX.format(args=list(args))],
                        cwd=helpers.ROOT, capture_output=True, text=True, timeout=300,
                        env=helpers.subprocess_env())


def one_line_error(result, *fragments):
  assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
  (line,) = result.stderr.splitlines()
  assert line.startswith("error: ")
  for fragment in fragments:
    assert fragment in line, (fragment, line)


def test_help_and_argument_errors_need_no_tunix(tmp_path):
  shown = without_tunix("--help")
  assert shown.returncode == 1, shown.stderr  # absl's --help status
  text = " ".join(shown.stdout.split())
  for needed in ("python -m bifocal_jax.surgery.tunix_lora --workdir", "--family", "--rank",
                 "--steps", "--spectral_learning_rate", "pip install 'bifocal-jax[tunix]'"):
    assert needed in text, needed
  one_line_error(without_tunix("--workdir", str(tmp_path / "a"), "--family=gemma2"), "--family",
                 "gemma3")
  one_line_error(without_tunix("--workdir", str(tmp_path / "a"), "--steps=0"), "--steps")
  one_line_error(without_tunix(), "--workdir is required")
  # Valid flags, no tunix: the install command, and nothing written.
  one_line_error(without_tunix("--workdir", str(tmp_path / "run")),
                 "not installed: pip install 'bifocal-jax[tunix]'")
  assert not (tmp_path / "run").exists()


def test_the_example_fine_tunes_lora_and_the_spectra_and_resumes(tmp_path):
  from bifocal_jax.surgery import tunix_lora  # pylint: disable=g-import-not-at-top
  try:
    from bifocal_jax.surgery import peft  # noqa: F401  pylint: disable=g-import-not-at-top
    import qwix  # noqa: F401  pylint: disable=g-import-not-at-top
  except ImportError as e:
    pytest.skip(f"tunix's trainer code or qwix is not installed ({e})")
  workdir = str(tmp_path / "run")
  summary = tunix_lora.run(workdir, steps=6, spectral_freeze_steps=2)
  assert summary == json.loads(open(os.path.join(workdir, "summary.json")).read())
  assert summary["converted_layers"] == 2 and summary["step0_max_logit_change"] < 1e-5
  assert len(summary["losses"]) == 6 and summary["resumed_from"] == 0
  assert summary["largest_spectral_parameter"] > 0  # the spectra moved after their freeze
  spectra = json.loads(open(summary["spectra_file"]).read())
  assert spectra["format"] == "bifocal-jax spectra"
  again = tunix_lora.run(workdir, steps=6, spectral_freeze_steps=2)
  assert again["resumed_from"] == 6 and again["losses"] == []
  assert again["largest_spectral_parameter"] == summary["largest_spectral_parameter"]


def test_import_tunix_names_the_install_command(monkeypatch):
  import importlib.util  # pylint: disable=g-import-not-at-top
  from bifocal_jax.surgery import tunix_models  # pylint: disable=g-import-not-at-top
  monkeypatch.delitem(sys.modules, "tunix", raising=False)
  monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
  with pytest.raises(ImportError, match=r"^tunix is not installed: pip install "
                     r"'bifocal-jax\[tunix\]'$"):
    tunix_models.import_tunix("tunix.sft.peft_trainer")
