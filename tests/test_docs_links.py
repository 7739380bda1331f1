"""The documents' links resolve: every `#anchor` names a heading of its file,
and every relative file link names a file of the repository."""

import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCUMENTS = ("README.md", "RESULTS.md")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
  """GitHub's anchor of a heading: lower case, punctuation but `-` and `_`
  dropped, spaces as `-`."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _targets(text: str) -> list[str]:
  # Links may wrap across lines: join each paragraph's lines first.
  return LINK.findall(re.sub(r"\n(?!\n)", " ", text))


def test_anchor_follows_githubs_rule():
  assert anchor("Verdicts on the paper's claims") == "verdicts-on-the-papers-claims"
  assert anchor("Trained models on the Chomsky-hierarchy tasks (`converged_chomsky`, "
                "issues 30 and 31)") == (
                    "trained-models-on-the-chomsky-hierarchy-tasks-converged_chomsky-issues-30-and-31")


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_link_resolves(name):
  path = os.path.join(REPO, name)
  with open(path) as f:
    text = f.read()
  headings = {anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}
  broken = []
  for target in _targets(text):
    if target.startswith(("http://", "https://", "mailto:")):
      continue
    file_part, _, fragment = target.partition("#")
    if file_part:
      if not os.path.exists(os.path.join(os.path.dirname(path), file_part)):
        broken.append(target)
    elif fragment not in headings:
      broken.append(target)
  assert not broken, f"{name}: links to nothing: {broken}"
