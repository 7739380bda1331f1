#!/usr/bin/env bash
# Prints the path of a Python 3.12+ interpreter, or explains and fails.
# Order: python3.12, python3.13, python3, then any pyenv-installed 3.12+.
ok() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; }
for c in python3.12 python3.13 python3; do
  if command -v "$c" >/dev/null 2>&1 && ok "$c"; then
    "$c" -c 'import sys; print(sys.executable)'; exit 0
  fi
done
for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3 /usr/local/bin/python3.1[2-9] /usr/bin/python3.1[2-9]; do
  if [ -x "$c" ] && ok "$c"; then echo "$c"; exit 0; fi
done
echo "error: bifocal-jax needs Python 3.12 or newer (jax 0.12); none found as python3.12, python3.13, python3 or under pyenv. Install one and re-run." >&2
exit 1
