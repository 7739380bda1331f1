"""The data directory of the published Dyck files, and their checksummed fetch,
against a local copy served as the download source (no network)."""

import functools
import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import threading

import pytest

from bifocal_jax.tasks.external import published

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_data_dir_is_the_setting_else_the_cache_home(tmp_path):
  home = os.path.expanduser("~")
  assert published.data_dir({"BIFOCAL_DATA_DIR": str(tmp_path)}) == str(tmp_path)
  assert published.data_dir({"XDG_CACHE_HOME": "/cache"}) == "/cache/bifocal_jax/data"
  assert published.data_dir({"XDG_CACHE_HOME": "relative"}) == os.path.join(
      home, ".cache", "bifocal_jax", "data")
  assert published.data_dir({}) == os.path.join(home, ".cache", "bifocal_jax", "data")
  assert published.folder(str(tmp_path)) == str(tmp_path / "dyck-yao2021")


def test_an_absent_file_says_in_one_line_how_to_get_it(tmp_path, monkeypatch):
  monkeypatch.setenv("BIFOCAL_DATA_DIR", str(tmp_path))
  with pytest.raises(FileNotFoundError) as error:
    published.path("k8_m10.test")
  message = str(error.value)
  assert "\n" not in message and str(tmp_path / "dyck-yao2021") in message
  assert "run `python -m bifocal_jax.tasks.external fetch` to download them" in message
  with pytest.raises(FileNotFoundError, match="fetch --data_dir=/elsewhere`"):
    published.path("k8_m10.test", "/elsewhere")
  with pytest.raises(ValueError, match="'k8_m7.test': unknown"):
    published.path("k8_m7.test")
  assert published.missing() == list(published.FILES)


def serve(directory):
  """An HTTP server on 127.0.0.1 serving `directory`; returns (url pattern, shutdown)."""
  handler = functools.partial(QuietHandler, directory=str(directory))
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  url = f"http://127.0.0.1:{server.server_address[1]}/{{commit}}/{{file}}"
  return url, server.shutdown


class QuietHandler(http.server.SimpleHTTPRequestHandler):

  def log_message(self, *args):
    del args


def source_copy(tmp_path, contents, commit=published.COMMIT):
  """`contents` ({source file name: bytes}) laid out as the URL pattern's `{commit}/{file}`."""
  source = tmp_path / "source"
  (source / commit).mkdir(parents=True)
  for name, data in contents.items():
    (source / commit / name).write_bytes(data)
  return source


def table(contents):
  """A `published.FILES`-like table for `contents`: local name `<source>.txt`."""
  return {f"{name}.txt": (name, hashlib.sha256(data).hexdigest())
          for name, data in contents.items()}


def test_fetch_from_a_local_server_lands_verified_files(tmp_path):
  contents = {"a.dev": b"(a a) END\n", "b.test": b"(b (c c) b) END\n" * 1000}
  url, shutdown = serve(source_copy(tmp_path, contents))
  logged = []
  try:
    target = published.fetch(str(tmp_path / "data"), url=url, files=table(contents),
                             log=logged.append)
    assert target == str(tmp_path / "data" / "dyck-yao2021")
    assert sorted(os.listdir(target)) == ["a.dev.txt", "b.test.txt"]  # nothing else left
    for name, data in contents.items():
      assert (tmp_path / "data" / "dyck-yao2021" / f"{name}.txt").read_bytes() == data
    assert logged == ["a.dev.txt: downloaded, sha256 verified",
                      "b.test.txt: downloaded, sha256 verified"]
    # Again: verified in place, not downloaded (the server is gone).
    shutdown()
    logged.clear()
    published.fetch(str(tmp_path / "data"), url=url, files=table(contents), log=logged.append)
    assert all(line.endswith("already there, sha256 verified") for line in logged)
  finally:
    shutdown()


def test_fetch_refuses_a_file_whose_checksum_differs(tmp_path):
  contents = {"good.dev": b"(a a) END\n", "bad.test": b"(b b) END\n"}
  files = table(contents)
  source = source_copy(tmp_path, {**contents, "bad.test": b"(b b) END\n(c c) END\n"})
  data = tmp_path / "data"
  with pytest.raises(published.ChecksumError) as error:
    published.fetch(str(data), url=f"file://{source}/{{commit}}/{{file}}", files=files,
                    log=lambda _: None)
  message = str(error.value)
  got = hashlib.sha256(b"(b b) END\n(c c) END\n").hexdigest()
  assert "\n" not in message and "bad.test.txt from file://" in message
  assert f"sha256 {got}, expected {files['bad.test.txt'][1]}" in message
  # The good file landed; the refused one left nothing, not even a partial file.
  assert os.listdir(data / "dyck-yao2021") == ["good.dev.txt"]


def test_a_failed_download_names_the_url_and_leaves_nothing(tmp_path):
  files = {"x.txt": ("missing.dev", "0" * 64)}
  with pytest.raises(OSError, match=r"could not download file://.*/missing.dev"):
    published.fetch(str(tmp_path / "data"), url=f"file://{tmp_path}/{{file}}", files=files,
                    log=lambda _: None)
  assert os.listdir(tmp_path) == []  # not even the folders it would have filled


def test_a_download_failing_midway_removes_what_it_wrote_and_keeps_what_was_there(tmp_path):
  contents = {"a.dev": b"(a a) END\n", "b.dev": b"(b b) END\n", "c.test": b"(c c) END\n"}
  files = table(contents)
  source = source_copy(tmp_path, {k: v for k, v in contents.items() if k != "c.test"})
  folder = tmp_path / "data" / "dyck-yao2021"
  folder.mkdir(parents=True)
  (folder / "a.dev.txt").write_bytes(contents["a.dev"])  # fetched before: kept
  with pytest.raises(OSError, match="could not download .*c.test"):
    published.fetch(str(tmp_path / "data"), url=f"file://{source}/{{commit}}/{{file}}",
                    files=files, log=lambda _: None)
  assert os.listdir(folder) == ["a.dev.txt"]  # b.dev.txt, downloaded by this call, is gone


def test_the_command_offline_says_how_else_to_get_the_files_in_one_line(tmp_path):
  env = dict(os.environ, PYTHONPATH=ROOT)
  env.pop("BIFOCAL_DYCK_URL", None)
  data = tmp_path / "data"
  proc = subprocess.run([sys.executable, "-m", "bifocal_jax.tasks.external", "fetch",
                         f"--data_dir={data}", "--url=http://127.0.0.1:9/{file}"],
                        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
  assert proc.returncode == 1
  (error,) = proc.stderr.splitlines()
  assert error.startswith("error: could not download http://127.0.0.1:9/k8_m5_tr2000000.dev")
  for way in (f"put a copy of the files in {data / 'dyck-yao2021'}", "--data_dir",
              "BIFOCAL_DATA_DIR", "--url 'file:///path/to/copy/{file}'", "BIFOCAL_DYCK_URL"):
    assert way in error, way
  assert os.listdir(tmp_path) == []  # no empty data folder left behind
  usage = subprocess.run([sys.executable, "-m", "bifocal_jax.tasks.external", "fetchh"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
  assert usage.returncode == 2 and len(usage.stderr.splitlines()) == 1, usage.stderr
  assert "expected one command, fetch" in usage.stderr


def test_the_pinned_files_fetch_from_a_copy_of_the_source(tmp_path, published_dir):
  """The pinned table against the real files (CI has them: `BIFOCAL_DATA_DIR`),
  served under their source names at the pinned commit."""
  copy = {source: open(os.path.join(published_dir, name), "rb").read()
          for name, (source, _) in published.FILES.items()}
  url, shutdown = serve(source_copy(tmp_path, copy))
  try:
    target = published.fetch(str(tmp_path / "data"), url=url, log=lambda _: None)
  finally:
    shutdown()
  assert sorted(os.listdir(target)) == sorted(published.FILES)
  assert published.missing(str(tmp_path / "data")) == []
  assert (published.URL_PATTERN.format(commit=published.COMMIT, file="k8_m5_tr2000000.dev") ==
          "https://raw.githubusercontent.com/princeton-nlp/dyck-transformer/"
          "5d21fcfff22a2f1446e9a62d80ca3ee08ff0e419/data/k8_m5_tr2000000.dev")


def test_command_line_refuses_corrupted_files_in_one_line_each(tmp_path):
  source = source_copy(tmp_path, {s: b"not the data\n" for s, _ in published.FILES.values()})
  env = dict(os.environ, BIFOCAL_DYCK_URL=f"file://{source}/{{commit}}/{{file}}",
             PYTHONPATH=ROOT)
  proc = subprocess.run([sys.executable, "-m", "bifocal_jax.tasks.external", "fetch",
                         f"--data_dir={tmp_path / 'data'}"], capture_output=True, text=True,
                        env=env, cwd=tmp_path, timeout=120)
  assert proc.returncode == 1
  (error,) = proc.stderr.splitlines()
  bad = hashlib.sha256(b"not the data\n").hexdigest()
  for name, (_, expected) in published.FILES.items():
    assert f"{name}: refused (sha256 {bad}, expected {expected}); not written" in proc.stdout
    assert f"{name} from file://" in error
  assert error.startswith("error: refused 5 file(s) whose checksum differs")
  assert not (tmp_path / "data").exists()  # nothing written: no empty folder either
  shutil.rmtree(source)
