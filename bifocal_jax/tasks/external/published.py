"""Where the published Dyck files live (the data directory), and their checksummed fetch.

The files come from the repository of Yao et al. 2021 (github:
princeton-nlp/dyck-transformer, folder `data/`, commit `COMMIT`). That
repository has no license file, so this project does not redistribute them:
`python -m bifocal_jax.tasks.external fetch` downloads them from there into
the data directory and checks each against the sha256 pinned in `FILES`.

The data directory, as TFDS and Hugging Face datasets users know it: the
environment variable `BIFOCAL_DATA_DIR` (CI points it at a folder prepared
beside the clone), else `$XDG_CACHE_HOME/bifocal_jax/data`, else
`~/.cache/bifocal_jax/data`. The files are `DATA_DIR/dyck-yao2021/<name>`,
named as `FILES` lists them (the source's names without `_tr2000000`).
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping

DATA_DIR_ENV = "BIFOCAL_DATA_DIR"
FOLDER = "dyck-yao2021"
REPOSITORY = "princeton-nlp/dyck-transformer"
COMMIT = "5d21fcfff22a2f1446e9a62d80ca3ee08ff0e419"
# `{commit}` and `{file}` (the source's file name) are filled in. Tests and
# mirrors override it with `BIFOCAL_DYCK_URL` (or `fetch --url`), e.g.
# `file:///path/to/copy/{file}` or `http://127.0.0.1:8000/{file}`.
URL_ENV = "BIFOCAL_DYCK_URL"
URL_PATTERN = f"https://raw.githubusercontent.com/{REPOSITORY}/{{commit}}/data/{{file}}"
FETCH_COMMAND = "python -m bifocal_jax.tasks.external fetch"

# The five files of Dyck-(8, m) (8 bracket types, the alphabet of the `dyck`
# config) by their name in the data directory, with their sha256.
SHA256 = {
    "k8_m5.dev": "e681ea64e4bfb591e9fb3873f5ddb05e733a81a5afab4c6bf529cfb3d4cabfcc",
    "k8_m5.test": "82d288739a51f88f9242931b9d0ccfc7bc962b69df4798c89aca9c2fc1546639",
    "k8_m10.dev": "a348c7ce2342f6b756bd9475e6a0f0c8fac3913991bf38d6edbbf931a563ee28",
    "k8_m10.test": "f92e47bf29844e90d2c2c9f13d644d5c085c113b8b9e2a01d079cf9c78cbf0da",
    "k8_m20.test": "5f0e58d27394b50c19900e00fd4f13ef85843a4844d6ac98646c89aa6f9d8729",
}
# name in the data directory: (its file name at COMMIT, sha256).
FILES: dict[str, tuple[str, str]] = {
    name: (name.replace(".", "_tr2000000."), digest) for name, digest in SHA256.items()
}
_CHUNK = 1 << 20


class ChecksumError(ValueError):
  """A downloaded file whose sha256 is not the pinned one (it was not written)."""


def data_dir(environ: Mapping[str, str] | None = None) -> str:
  """`$BIFOCAL_DATA_DIR`, else `bifocal_jax/data` under the user's cache home."""
  environ = os.environ if environ is None else environ
  if environ.get(DATA_DIR_ENV):
    return os.path.abspath(os.path.expanduser(environ[DATA_DIR_ENV]))
  home = environ.get("XDG_CACHE_HOME", "")
  if not os.path.isabs(home):  # unset or relative: ignored, as the XDG spec says
    home = os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(home, "bifocal_jax", "data")


def folder(directory: str | None = None) -> str:
  """`DATA_DIR/dyck-yao2021` (`directory`: the data directory, default `data_dir()`)."""
  return os.path.join(directory or data_dir(), FOLDER)


def how_to_get(directory: str | None = None) -> str:
  """The one line that says how to get the files into `directory`."""
  directory = directory or data_dir()
  flag = "" if directory == data_dir() else f" --data_dir={directory}"
  return (f"run `{FETCH_COMMAND}{flag}` to download them into {folder(directory)} "
          f"(or set {DATA_DIR_ENV} to a data directory that holds {FOLDER}/)")


def path(name: str, directory: str | None = None) -> str:
  """The path of published file `name` (e.g. `k8_m10.test`) in the data
  directory; a FileNotFoundError saying how to get it when it is not there."""
  if name not in FILES:
    raise ValueError(f"published Dyck file {name!r}: unknown, expected one of {sorted(FILES)}")
  found = os.path.join(folder(directory), name)
  if not os.path.isfile(found):
    raise FileNotFoundError(f"published Dyck file {name!r} is not in {folder(directory)}: "
                            f"{how_to_get(directory)}")
  return found


def resolve(value: str, directory: str | None = None) -> str:
  """A Dyck file as a command names it: an existing path as it is, a published
  file's bare name (`k8_m10.test`) in the data directory (`path`)."""
  if os.path.isfile(value):
    return value
  if value in FILES:
    return path(value, directory)
  raise FileNotFoundError(f"dyck_file={value!r}: no such file (the published ones are named "
                          f"without a folder: {', '.join(FILES)})")


def missing(directory: str | None = None) -> list[str]:
  """The names of `FILES` absent from the data directory (present ones are not re-hashed)."""
  return [n for n in FILES if not os.path.isfile(os.path.join(folder(directory), n))]


def sha256(file_path: str) -> str:
  digest = hashlib.sha256()
  with open(file_path, "rb") as f:
    for chunk in iter(lambda: f.read(_CHUNK), b""):
      digest.update(chunk)
  return digest.hexdigest()


def fetch(directory: str | None = None, *, url: str | None = None,
          files: Mapping[str, tuple[str, str]] = FILES, commit: str = COMMIT,
          log: Callable[[str], None] = print) -> str:
  """Downloads every file of `files` not already there with its checksum; returns the folder.

  `url`: the URL pattern (default `$BIFOCAL_DYCK_URL`, else `URL_PATTERN`).
  Each file streams into a temporary file beside its destination and is
  renamed into place only once its sha256 matches, so nothing half-written or
  unverified is ever left under its name. A mismatch raises `ChecksumError`
  (after fetching the others), naming the file and both checksums. A failed
  download raises OSError naming the URL and the other ways to get the files
  (`offline_help`), after removing what this call wrote: the files it
  downloaded and the folders it created (files there before are kept). A
  folder this call created is removed whenever it ends empty.
  """
  url = url or os.environ.get(URL_ENV) or URL_PATTERN
  target = folder(directory)
  created = _missing_folders(target)
  os.makedirs(target, exist_ok=True)
  refused, written = [], []
  try:
    for name, (source, expected) in files.items():
      destination = os.path.join(target, name)
      if os.path.isfile(destination):
        if sha256(destination) == expected:
          log(f"{name}: already there, sha256 verified")
          continue
        log(f"{name}: checksum differs from the pinned one; downloading it again")
      address = url.format(commit=commit, file=source)
      try:
        got = _download(address, destination, expected)
      except OSError as e:
        for path_written in written:
          _remove(path_written)
        raise OSError(f"{e}; {offline_help(directory)}") from None
      if got != expected:
        refused.append(f"{name} from {address}: sha256 {got}, expected {expected}")
        log(f"{name}: refused (sha256 {got}, expected {expected}); not written")
      else:
        written.append(destination)
        log(f"{name}: downloaded, sha256 verified")
  finally:
    for created_folder in created:  # innermost first
      if os.path.isdir(created_folder) and not os.listdir(created_folder):
        os.rmdir(created_folder)
  if refused:
    raise ChecksumError(f"refused {len(refused)} file(s) whose checksum differs: " +
                        "; ".join(refused))
  return target


def offline_help(directory: str | None = None) -> str:
  """How else to get the files into `directory` (the data directory) than the default source."""
  return (f"offline? put a copy of the files in {folder(directory)} (or point --data_dir or "
          f"{DATA_DIR_ENV} at a data directory holding {FOLDER}/), or fetch them from another "
          f"source: --url 'file:///path/to/copy/{{file}}' (or {URL_ENV})")


def _missing_folders(path_name: str) -> list[str]:
  """`path_name` and its ancestors that do not exist yet, innermost first."""
  out = []
  while path_name and not os.path.exists(path_name):
    out.append(path_name)
    parent = os.path.dirname(path_name)
    if parent == path_name:
      break
    path_name = parent
  return out


def _download(address: str, destination: str, expected: str) -> str:
  """Streams `address` into a temporary file beside `destination`, renamed to
  it only if its sha256 is `expected` (else removed); returns the sha256."""
  tmp = f"{destination}.{os.getpid()}.partial"
  digest = hashlib.sha256()
  try:
    with urllib.request.urlopen(address, timeout=60) as response, open(tmp, "wb") as out:
      for chunk in iter(lambda: response.read(_CHUNK), b""):
        digest.update(chunk)
        out.write(chunk)
    if digest.hexdigest() == expected:
      os.replace(tmp, destination)
  except (urllib.error.URLError, OSError) as e:
    raise OSError(f"could not download {address} ({getattr(e, 'reason', None) or e})") from None
  finally:
    _remove(tmp)  # a refused, failed or interrupted download leaves nothing
  return digest.hexdigest()


def _remove(file_path: str) -> None:
  try:
    os.remove(file_path)
  except FileNotFoundError:
    pass
