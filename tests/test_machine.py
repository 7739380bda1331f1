"""bifocal_jax/machine.py: when the allocator re-execution happens, and that it happens once."""

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from bifocal_jax import machine

PID = 1234
linux_glibc = pytest.mark.skipif(
    sys.platform != "linux" or platform.libc_ver()[0] != "glibc",
    reason="the tunables are glibc's")


@linux_glibc
@pytest.mark.parametrize("environ, expected", [
    ({}, True),                                                        # plain start
    ({"GLIBC_TUNABLES": machine.GLIBC_TUNABLES}, False),                  # already complete
    ({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}, False),        # the user's own
    ({"BIFOCAL_HOST_ALLOCATOR": "default"}, False),                    # opted out
    ({"BIFOCAL_HOST_ALLOCATOR_PID": str(PID)}, False),                 # dropped by glibc: no loop
    ({"BIFOCAL_HOST_ALLOCATOR_PID": "99"}, True),                      # a parent's marker
])
def test_should_reexec(environ, expected):
  assert machine.should_reexec(environ, pid=PID) is expected


def test_package_import_stays_light():
  # host runs before JAX starts: importing it must not import JAX.
  code = "import sys, bifocal_jax.machine; print('jax' in sys.modules)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       timeout=120)
  assert out.stdout.strip() == "False"


@linux_glibc
def test_reexecutes_once_with_the_same_arguments_and_children_inherit(tmp_path):
  script = tmp_path / "entry.py"
  script.write_text(textwrap.dedent("""
      import os, subprocess, sys
      from bifocal_jax import machine
      print("start", os.getpid(), os.environ.get("GLIBC_TUNABLES"), flush=True)
      machine.use_tuned_allocator()
      print("args", sys.argv[1:], flush=True)
      print("tuned", machine.should_reexec() is False, flush=True)
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
                                     [starts[0][1], machine.GLIBC_TUNABLES],
                                     [starts[2][1], machine.GLIBC_TUNABLES]]
  assert starts[2][1] != starts[0][1]
  assert out.count("args ['parent']") == 1 and out.count("args ['child']") == 1
  assert out.count("tuned True") == 2


def test_opt_out_runs_without_reexecution(tmp_path):
  script = tmp_path / "entry.py"
  script.write_text("from bifocal_jax import machine\nprint('start')\nmachine.use_tuned_allocator()\n")
  env = dict(os.environ, BIFOCAL_HOST_ALLOCATOR="default")
  out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120,
                       check=True).stdout.splitlines()
  assert out == ["start"]


HOME = os.path.expanduser("~")


@pytest.mark.parametrize("environ, expected", [
    ({}, f"{HOME}/.cache/bifocal_jax/jax_compilation_cache"),                  # the default
    ({"XDG_CACHE_HOME": "/xdg"}, "/xdg/bifocal_jax/jax_compilation_cache"),     # the user's cache home
    ({"XDG_CACHE_HOME": "rel/dir"}, f"{HOME}/.cache/bifocal_jax/jax_compilation_cache"),  # not absolute
    ({"BIFOCAL_COMPILATION_CACHE": "/mine", "XDG_CACHE_HOME": "/xdg"}, "/mine"),  # overridden
    ({"BIFOCAL_COMPILATION_CACHE": "~/c"}, f"{HOME}/c"),
    ({"JAX_COMPILATION_CACHE_DIR": "/jax"}, "/jax"),                           # JAX's own setting
    ({"BIFOCAL_COMPILATION_CACHE": "/mine", "JAX_COMPILATION_CACHE_DIR": "/jax"}, "/mine"),
    ({"BIFOCAL_COMPILATION_CACHE": "off"}, None),                              # opted out
    ({"BIFOCAL_COMPILATION_CACHE": "OFF", "JAX_COMPILATION_CACHE_DIR": "/jax"}, None),
    ({"BIFOCAL_COMPILATION_CACHE": ""}, None),
])
def test_compilation_cache_dir(environ, expected):
  assert machine.compilation_cache_dir(environ) == expected


CACHE_SCRIPT = """
from bifocal_jax import machine
directory = machine.use_compilation_cache()
import jax, os
jax.jit(lambda x: x * 2 + 1)(jax.numpy.ones(3)).block_until_ready()
print(directory, os.environ.get("JAX_COMPILATION_CACHE_DIR"), jax.config.jax_compilation_cache_dir)
print(jax.config.jax_compilation_cache_max_size)
"""


@pytest.mark.parametrize("jax_first", [False, True])
def test_compilation_cache_is_written_where_it_says(tmp_path, jax_first):
  cache = tmp_path / "cache"
  env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
  env.update(BIFOCAL_COMPILATION_CACHE=str(cache), JAX_PLATFORMS="cpu",
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
  code = ("import jax\n" if jax_first else "") + CACHE_SCRIPT
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       check=True, timeout=120).stdout.split()
  assert out == [str(cache)] * 3 + [str(machine.CACHE_MAX_BYTES)]  # bounded by default
  assert len(list(cache.iterdir())) >= 1  # the jitted function's entry


EVICTION_SCRIPT = """
from bifocal_jax import machine
machine.use_compilation_cache()
import jax
for k in range(6):  # six programs, each a few KB in the cache
  jax.jit(lambda x, k=k: (x * k + 1).sum())(jax.numpy.ones(3 + k)).block_until_ready()
print(jax.config.jax_compilation_cache_max_size)
"""


def test_compilation_cache_bound_of_the_users_own_evicts(tmp_path):
  cache = tmp_path / "cache"
  env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
  env.update(BIFOCAL_COMPILATION_CACHE=str(cache), JAX_PLATFORMS="cpu",
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_COMPILATION_CACHE_MAX_SIZE="12000")
  out = subprocess.run([sys.executable, "-c", EVICTION_SCRIPT], env=env, capture_output=True,
                       text=True, check=True, timeout=120).stdout.split()
  assert out == ["12000"]  # the user's bound, not ours
  sizes = [f.stat().st_size for f in cache.iterdir() if f.name.endswith("-cache")]
  assert 1 <= len(sizes) < 6 and sum(sizes) <= 12000  # older entries were evicted


def test_compilation_cache_opt_out_writes_nothing(tmp_path):
  env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
  env.update(BIFOCAL_COMPILATION_CACHE="off", JAX_PLATFORMS="cpu", HOME=str(tmp_path),
             XDG_CACHE_HOME=str(tmp_path / "xdg"), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
  out = subprocess.run([sys.executable, "-c", CACHE_SCRIPT], env=env, capture_output=True,
                       text=True, check=True, timeout=120).stdout.split()
  assert out[:3] == ["None"] * 3
  assert not (tmp_path / "xdg").exists() and not (tmp_path / ".cache").exists()
