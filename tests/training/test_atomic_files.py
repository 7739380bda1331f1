"""bifocal_jax/training/atomic_files.py: a file is replaced whole or left as it was."""

import json
import os
import subprocess
import sys

import pytest

from bifocal_jax.training import atomic_files


def test_write_replaces_the_file_whole(tmp_path):
  path = tmp_path / "summary.json"
  path.write_text("old")
  atomic_files.write_atomically(str(path), "new text")
  assert path.read_text() == "new text"
  assert os.listdir(tmp_path) == ["summary.json"]  # no temporary left behind


def test_failed_write_keeps_the_old_file_and_no_temporary(tmp_path):
  path = tmp_path / "summary.json"
  path.write_text("old")
  with pytest.raises(TypeError):
    atomic_files.write_atomically(str(path), b"bytes are not text")  # fails inside the write
  assert path.read_text() == "old"
  assert os.listdir(tmp_path) == ["summary.json"]


def test_json_is_sorted_and_indented_unless_told(tmp_path):
  path = tmp_path / "v.json"
  atomic_files.write_json_atomically(str(path), {"b": 1, "a": [2]})
  assert path.read_text() == json.dumps({"a": [2], "b": 1}, indent=2)
  atomic_files.write_json_atomically(str(path), {"b": 1, "a": 2}, indent=None, sort_keys=False)
  assert path.read_text() == '{"b": 1, "a": 2}'


def test_unserializable_json_leaves_the_old_file(tmp_path):
  path = tmp_path / "v.json"
  path.write_text("old")
  with pytest.raises(ValueError):
    atomic_files.write_json_atomically(str(path), {"x": float("nan")}, allow_nan=False)
  assert path.read_text() == "old"
  assert os.listdir(tmp_path) == ["v.json"]


def test_import_stays_light():
  # The sweep driver imports it and must not start JAX.
  code = "import sys, bifocal_jax.training.atomic_files; print('jax' in sys.modules)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       timeout=120)
  assert out.stdout.strip() == "False"
