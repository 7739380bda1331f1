"""bifocal_jax/host.py: when the allocator re-execution happens, and that it happens once."""

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from bifocal_jax import host

PID = 1234
linux_glibc = pytest.mark.skipif(
    sys.platform != "linux" or platform.libc_ver()[0] != "glibc",
    reason="the tunables are glibc's")


@linux_glibc
@pytest.mark.parametrize("environ, expected", [
    ({}, True),                                                        # plain start
    ({"GLIBC_TUNABLES": host.GLIBC_TUNABLES}, False),                  # already complete
    ({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}, False),        # the user's own
    ({"BIFOCAL_HOST_ALLOCATOR": "default"}, False),                    # opted out
    ({"BIFOCAL_HOST_ALLOCATOR_PID": str(PID)}, False),                 # dropped by glibc: no loop
    ({"BIFOCAL_HOST_ALLOCATOR_PID": "99"}, True),                      # a parent's marker
])
def test_should_reexec(environ, expected):
  assert host.should_reexec(environ, pid=PID) is expected


def test_package_import_stays_light():
  # host runs before JAX starts: importing it must not import JAX.
  code = "import sys, bifocal_jax.host; print('jax' in sys.modules)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       timeout=120)
  assert out.stdout.strip() == "False"


@linux_glibc
def test_reexecutes_once_with_the_same_arguments_and_children_inherit(tmp_path):
  script = tmp_path / "entry.py"
  script.write_text(textwrap.dedent("""
      import os, subprocess, sys
      from bifocal_jax import host
      print("start", os.getpid(), os.environ.get("GLIBC_TUNABLES"), flush=True)
      host.use_tuned_allocator()
      print("args", sys.argv[1:], flush=True)
      print("tuned", host.should_reexec() is False, flush=True)
      if sys.argv[1] == "parent":
        subprocess.run([sys.executable, __file__, "child"], check=True)
  """))
  env = {k: v for k, v in os.environ.items()
         if k not in ("GLIBC_TUNABLES", "BIFOCAL_HOST_ALLOCATOR", "BIFOCAL_HOST_ALLOCATOR_PID")}
  out = subprocess.run([sys.executable, str(script), "parent"], env=env, capture_output=True,
                       text=True, check=True, timeout=120).stdout.splitlines()
  starts = [line.split() for line in out if line.startswith("start")]
  # The parent starts twice (re-executed once: same pid, now with the tunables);
  # the child inherits them and starts once.
  assert [s[1:] for s in starts] == [[starts[0][1], "None"],
                                     [starts[0][1], host.GLIBC_TUNABLES],
                                     [starts[2][1], host.GLIBC_TUNABLES]]
  assert starts[2][1] != starts[0][1]
  assert out.count("args ['parent']") == 1 and out.count("args ['child']") == 1
  assert out.count("tuned True") == 2


def test_opt_out_runs_without_reexecution(tmp_path):
  script = tmp_path / "entry.py"
  script.write_text("from bifocal_jax import host\nprint('start')\nhost.use_tuned_allocator()\n")
  env = dict(os.environ, BIFOCAL_HOST_ALLOCATOR="default")
  out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120,
                       check=True).stdout.splitlines()
  assert out == ["start"]
