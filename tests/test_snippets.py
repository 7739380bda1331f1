"""The code the README and the documentation pages show runs as written.

Every ```python block of README.md and docs/*.md is executed, each on its own
(a fresh namespace); a block that needs a host library which is not installed
(tunix, qwix) is skipped saying so. Every shell block's commands name modules,
scripts, `make` targets and flags that exist. `docs/snippets/*.py` are the
blocks the README and docs/own_model.md show, checked verbatim and run with
their results checked.
"""

import importlib.util
import pathlib
import re
import runpy
import shlex

import numpy as np
import pytest

from bifocal_jax import geometric_frequencies

ROOT = pathlib.Path(__file__).resolve().parent.parent
SNIPPETS = ROOT / "docs" / "snippets"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
# What a block may import that `make` installs but a light environment lacks.
OPTIONAL = ("tunix", "qwix", "gemma")


def _blocks(languages):
  """(document, index, code) of every fenced block in one of `languages`."""
  found = []
  for path in DOCUMENTS:
    blocks = [code for lang, code in FENCE.findall(path.read_text()) if lang in languages]
    found += [(path.relative_to(ROOT).as_posix(), i, code) for i, code in enumerate(blocks)]
  return found


PYTHON_BLOCKS = _blocks(("python",))
SHELL_BLOCKS = _blocks(("sh", "bash", "shell"))


@pytest.mark.parametrize("name", ["nnx.py", "linen.py"])
def test_snippet_runs_and_ends_with_per_head_spectral_frequencies(name):
  namespace = runpy.run_path(str(SNIPPETS / name), run_name="__snippet__")
  frequencies = np.asarray(namespace["frequencies"])
  assert frequencies.shape == (2, 8)  # [heads, pairs]
  # One step inside the freeze: still the geometric spectrum.
  np.testing.assert_allclose(frequencies, np.broadcast_to(geometric_frequencies(16), (2, 8)),
                             rtol=1e-6)
  assert np.isfinite(float(namespace["loss"]))


@pytest.mark.parametrize("name,documents", [("nnx.py", ("README.md", "docs/own_model.md")),
                                            ("linen.py", ("docs/own_model.md",))])
def test_documents_show_the_tested_snippet_verbatim(name, documents):
  snippet = (SNIPPETS / name).read_text().strip()
  for document in documents:
    assert snippet in (ROOT / document).read_text(), f"{document} does not show {name}"


def test_the_documents_have_code_blocks():
  assert len(PYTHON_BLOCKS) >= 5 and len(SHELL_BLOCKS) >= 5
  assert {d for d, _, _ in PYTHON_BLOCKS} >= {"README.md", "docs/own_model.md", "docs/method.md"}


@pytest.mark.parametrize("document,index,code", PYTHON_BLOCKS,
                         ids=[f"{d}:{i}" for d, i, _ in PYTHON_BLOCKS])
def test_python_block_runs(document, index, code):
  for module in OPTIONAL:
    if re.search(rf"^\s*(import|from) {module}\b|import_model\(", code, re.MULTILINE) and (
        importlib.util.find_spec(module) is None):
      pytest.skip(f"{document} block {index} needs {module} (make venv installs it)")
  exec(compile(code, f"{document}:block{index}", "exec"), {"__name__": "__snippet__"})


def _defined_flags() -> set[str]:
  """Every flag the project's commands define (absl and argparse), and absl's own."""
  names = {"help", "helpfull", "helpshort", "verbosity", "v", "logtostderr"}
  sources = [ROOT / "train.py", ROOT / "eval.py"]
  for folder in ("bifocal_jax", "experiments", "benchmarks", "examples"):
    sources += (ROOT / folder).rglob("*.py")
  for source in sources:
    text = source.read_text()
    names.update(re.findall(r"DEFINE_\w+\(\s*\"(\w+)\"", text))
    names.update(n.replace("-", "_") for n in re.findall(r"add_argument\(\s*\"--([\w-]+)\"", text))
  return names


def _make_targets() -> set[str]:
  return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))


def _commands(code: str):
  """Each command line of a shell block, continuation lines joined, comments dropped."""
  for line in code.replace("\\\n", " ").splitlines():
    line = line.split(" #", 1)[0].strip()
    if line and not line.startswith("#"):
      yield shlex.split(line)


@pytest.mark.parametrize("document,index,code", SHELL_BLOCKS,
                         ids=[f"{d}:{i}" for d, i, _ in SHELL_BLOCKS])
def test_shell_block_names_commands_and_flags_that_exist(document, index, code):
  flags, targets, problems = _defined_flags(), _make_targets(), []
  for words in _commands(code):
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):  # VAR=value command ...
      words = words[1:]
    if not words:
      continue
    if words[0] == "make":
      problems += [f"make {t}" for t in words[1:] if "=" not in t and t not in targets]
      continue
    if words[0] not in ("python", "python3"):
      continue  # pip, git, echo: not this project's
    if words[1] == "-m":
      if importlib.util.find_spec(words[2]) is None:
        problems.append(f"python -m {words[2]}: no such module")
    elif not (ROOT / words[1]).exists():
      problems.append(f"python {words[1]}: no such file")
    for word in words[2:]:
      if word.startswith("--"):
        name = word[2:].split("=", 1)[0].split(".", 1)[0]
        if name not in flags and not (name.startswith("no") and name[2:] in flags):
          problems.append(f"{' '.join(words[:3])} ... {word}: no such flag")
  assert not problems, f"{document} shell block {index}: {problems}"
