r"""Downloads the published Dyck files into the data directory, checking their sha256.

  python -m bifocal_jax.tasks.external fetch                  # into $BIFOCAL_DATA_DIR (or the cache)
  python -m bifocal_jax.tasks.external fetch --data_dir DIR   # into DIR/dyck-yao2021/

`--url` (or `BIFOCAL_DYCK_URL`) replaces the source's URL pattern, e.g. with a
mirror or a local copy (`file:///copy/{file}`); see `published`. Files already
there with the pinned checksum are kept; a file whose checksum differs is
refused (one line naming it and both checksums; exit status 1) and not written.
A failed download (offline, a wrong URL) is one line naming the URL and the
other ways to get the files (a local copy in the data directory, `--url`),
exit status 1, and leaves nothing this command wrote behind.
"""

import sys

from absl import app
from absl import flags

from bifocal_jax import cli
from bifocal_jax.tasks.external import published

_DATA_DIR = flags.DEFINE_string(
    "data_dir", None, f"Data directory (default: ${published.DATA_DIR_ENV}, else "
    "$XDG_CACHE_HOME/bifocal_jax/data).")
_URL = flags.DEFINE_string(
    "url", None, f"URL pattern with {{commit}} and {{file}} (default: ${published.URL_ENV}, "
    f"else {published.URL_PATTERN}).")


def main(argv):
  if argv[1:] != ["fetch"]:
    cli.fail(f"expected one command, fetch (got {argv[1:]}): "
             f"`{published.FETCH_COMMAND} [--data_dir DIR] [--url PATTERN]`")
  try:
    target = published.fetch(_DATA_DIR.value, url=_URL.value)
  except (OSError, published.ChecksumError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  print(f"wrote {target} ({len(published.FILES)} files, sha256 verified)")
  return 0


if __name__ == "__main__":
  app.run(main, flags_parser=cli.flags_parser())
