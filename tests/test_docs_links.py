"""The documents' links resolve: every `#anchor` names a heading of its file
(or of the Markdown file it links to), and every relative file link names a
file of the repository. The documents: the README, RESULTS.md and the pages of
the documentation site (docs/*.md), whose Sphinx build (`make docs`) checks the
same links its own way."""

import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCUMENTS = ("README.md", "RESULTS.md", *sorted(
    os.path.join("docs", n) for n in os.listdir(os.path.join(REPO, "docs")) if n.endswith(".md")))
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def anchor(heading: str) -> str:
  """GitHub's anchor of a heading: lower case, punctuation but `-` and `_`
  dropped, spaces as `-`."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(path: str) -> set[str]:
  with open(path) as f:
    text = FENCE.sub("", f.read())
  return {anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def _targets(text: str) -> list[str]:
  # Code blocks hold no links; links may wrap across lines: join each paragraph's lines first.
  return LINK.findall(re.sub(r"\n(?!\n)", " ", FENCE.sub("", text)))


def test_anchor_follows_githubs_rule():
  assert anchor("Verdicts on the paper's claims") == "verdicts-on-the-papers-claims"
  assert anchor("Trained models on the Chomsky-hierarchy tasks (`converged_chomsky`, "
                "issues 30 and 31)") == (
                    "trained-models-on-the-chomsky-hierarchy-tasks-converged_chomsky-issues-30-and-31")
  assert anchor("Mixed-scheme heads: `position.kind=a+b`") == "mixed-scheme-heads-positionkindab"


def test_the_site_pages_are_checked():
  assert "docs/index.md" in DOCUMENTS and "docs/own_model.md" in DOCUMENTS


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_link_resolves(name):
  path = os.path.join(REPO, name)
  with open(path) as f:
    text = f.read()
  broken = []
  for target in _targets(text):
    if target.startswith(("http://", "https://", "mailto:")):
      continue
    # `path:` marks, for Sphinx, a file outside the site (a download); on disk it is a path.
    file_part, _, fragment = target.removeprefix("path:").partition("#")
    linked = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
    if not os.path.exists(linked):
      broken.append(target)
    elif fragment and (not linked.endswith(".md") or fragment not in _headings(linked)):
      broken.append(target)
  assert not broken, f"{name}: links to nothing: {broken}"
