"""constraints.txt (the tested environment, `make venv`'s `pip install -c`) agrees
with every pin of the requirements files and covers every package they name."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _pins(path: pathlib.Path) -> dict[str, str | None]:
  """{normalised name: pinned version or None} of a requirements file."""
  out = {}
  for line in path.read_text().splitlines():
    line = line.split("#", 1)[0].strip()
    if not line or line.startswith("-"):
      continue
    match = re.match(r"([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*(?:==\s*([^\s;]+))?", line)
    out[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
  return out


def test_the_constraints_pin_every_requirement_at_its_pinned_version():
  constraints = _pins(ROOT / "constraints.txt")
  assert all(constraints.values()), "every constraint is an exact pin"
  for name in ("requirements.txt", "requirements-dev.txt", "requirements-hosts.txt"):
    for package, version in _pins(ROOT / name).items():
      assert package in constraints, f"{name}: {package} is not in constraints.txt"
      assert version is None or constraints[package] == version, (
          f"{name} pins {package}=={version}, constraints.txt {constraints[package]}")


def test_the_makefile_installs_under_the_constraints():
  makefile = (ROOT / "Makefile").read_text()
  installs = [line for line in makefile.splitlines() if "pip install" in line and "-r " in line]
  assert installs and all("-c constraints.txt" in line for line in installs), installs
