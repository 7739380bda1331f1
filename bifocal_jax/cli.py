"""The commands' shared plumbing (`python -m bifocal_jax.train`, `.eval`, `.tasks`):
a packaged config's name on the command line (`--config dyck:tiny`), expected
failures as one line and an exit status, and quiet library logs.

Exit statuses: 0 done (or preempted and saved), 2 bad input (config, workdir),
1 a failure during the run (non-finite values, damaged checkpoints, a failed
collective), 130 interrupted.

Imports nothing of the project (and not JAX): every layer's command may use it.
"""

from __future__ import annotations

import ast
import logging as std_logging
import os
import re
import sys
import textwrap
from collections.abc import Sequence

from absl import flags
from absl import logging

# The training configs shipped with the package (`bifocal_jax/configs/<name>.py`).
CONFIG_DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
CONFIG_NAMES = tuple(
    sorted(f[:-3] for f in os.listdir(CONFIG_DIRECTORY) if f.endswith(".py") and f[0] not in "_."))


def config_path(name: str) -> str:
  """The file of packaged config `name`."""
  if name not in CONFIG_NAMES:
    raise ValueError(f"config {name!r}: not a config of the package "
                     f"(one of {', '.join(CONFIG_NAMES)})")
  return os.path.join(CONFIG_DIRECTORY, f"{name}.py")


def config_summaries() -> dict[str, str]:
  """`{name: the first sentence of its docstring}` of the packaged
  configs (read, not imported: this module imports nothing of the project)."""
  summaries = {}
  for name in CONFIG_NAMES:
    with open(config_path(name)) as f:
      doc = ast.get_docstring(ast.parse(f.read())) or ""
    first = " ".join(doc.strip().split("\n\n")[0].split())
    summaries[name] = first.split(". ")[0].rstrip(".")
  return summaries


def configs_help() -> str:
  """The packaged configs, one per entry: the name, then its docstring's first sentence."""
  return "\n".join(
      f"  {name}\n" + wrapped(line, "      ") for name, line in config_summaries().items())


def wrapped(text: str, indent: str = "  ") -> str:
  """`text` wrapped to 80 columns under `indent` (for `--help` texts)."""
  return textwrap.fill(text, 80, initial_indent=indent, subsequent_indent=indent)


def use_in_help(usage: str, flag_names) -> None:
  """`--help` of the running command: `usage`, then the flags `flag_names`
  (defined in whichever module; absl lists only the main module's own)."""
  sys.modules["__main__"].__doc__ = usage
  for name in flag_names:
    flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS[name])


def resolve_config(value: str) -> str:
  """`--config`'s value with a packaged config's name (`dyck`, `dyck:tiny`)
  replaced by its file's path; a path to a file is kept as it is.

  A value that is neither a file nor a name (and does not look like a path,
  which the config loader reports itself) is a ValueError naming the configs.
  """
  spec, sep, arg = value.partition(":")
  if os.path.isfile(spec):
    return value
  if spec in CONFIG_NAMES:
    return config_path(spec) + sep + arg
  if os.sep in spec or spec.endswith(".py"):
    return value
  raise ValueError(f"--config={value}: no such file, nor a config of the package "
                   f"(one of {', '.join(CONFIG_NAMES)})")


def resolve_argv(argv: Sequence[str], flag: str = "config") -> list[str]:
  """`argv` with the value of `--flag=VALUE` / `--flag VALUE` put through `resolve_config`."""
  out, argv = [], list(argv)
  i = 0
  while i < len(argv):
    arg = argv[i]
    if arg == "--":
      out += argv[i:]
      break
    if arg.startswith(f"--{flag}="):
      arg = f"--{flag}=" + resolve_config(arg[len(flag) + 3:])
    elif arg == f"--{flag}" and i + 1 < len(argv):
      out.append(arg)
      i += 1
      arg = resolve_config(argv[i])
    out.append(arg)
    i += 1
  return out


class _ProjectInfoOnly(std_logging.Filter):
  """INFO records of this project only; WARNING and above from everyone.

  Orbax logs each checkpoint's stages at INFO (about 200 lines in a 1,500-step
  run), which buried the progress bar and our own messages.
  """

  def filter(self, record: std_logging.LogRecord) -> bool:
    if record.levelno >= std_logging.WARNING:
      return True
    path = os.path.abspath(record.pathname)
    return (f"{os.sep}bifocal_jax{os.sep}" in path or
            path == os.path.abspath(sys.argv[0]))  # the entry point itself


def quiet_library_logs() -> None:
  """Hides other libraries' INFO logs (Orbax, JAX) unless `--verbosity` >= 1."""
  if logging.get_verbosity() > logging.INFO:
    return
  handler = logging.get_absl_handler()
  if not any(isinstance(f, _ProjectInfoOnly) for f in handler.filters):
    handler.addFilter(_ProjectInfoOnly())


def fail(message: str, status: int = 2):
  """One line on stderr, no traceback, and exit with `status`.

  In a multi-process run the process exits at once: JAX's orderly shutdown
  waits at a barrier for every peer, and after a failure some may never come.
  """
  print(f"error: {message}", file=sys.stderr, flush=True)
  if is_multiprocess():
    logging.flush()
    sys.stdout.flush()
    os._exit(status)
  sys.exit(status)


def is_multiprocess() -> bool:
  """Whether JAX runs several processes (JAX is imported lazily: the commands'
  flags are defined, and a bad flag reported, before it starts)."""
  jax = sys.modules.get("jax")
  return jax is not None and jax.distributed.is_initialized()


def first_line(error: BaseException) -> str:
  """The first line of a runtime error, without XLA's repeated prefixes."""
  line = str(error).splitlines()[0] if str(error) else type(error).__name__
  return re.sub(r"(Error dispatching computation: )+", "", line)


def describe_flag_error(error: BaseException, argv) -> str:
  """One line for a flag that failed to parse or a config file that failed to load."""
  context = error.__context__
  if isinstance(error, AttributeError) and isinstance(context, KeyError):
    # An override of a key the config lacks: ml_collections names the last
    # component only, and may suggest a close key on the next line.
    key, *hint = str(context.args[0]).splitlines()
    key = key.strip("'")
    flag = next((a.split("=")[0]
                 for a in argv
                 if a.startswith("--config.") and a.split("=")[0].endswith("." + key)),
                f"--config.*.{key}")
    return f"{flag}: no such config key" + (f" ({hint[0]})" if hint else "")
  # Messages of config files that fail to load span lines (a traceback even):
  # the last line says what went wrong.
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  return lines[-1] if lines else type(error).__name__


def flags_parser(*config_flags):
  """An `app.run` flags parser: a bad flag, config file or `--config.KEY`
  override is one line on stderr and exit status 2 (not usage text or a
  traceback). Config files load here, so their errors are reported here too.
  A config flag's value may name a config of the package (`--config dyck:tiny`,
  `bifocal_jax.configs`) instead of a file."""

  def parse(argv):
    try:
      for config_flag in config_flags:
        argv = resolve_argv(argv, config_flag.name)
      args = flags.FLAGS(argv)
      for config_flag in config_flags:
        if config_flag.value is not None:  # a config that failed to load raises only when used
          config_flag.value.keys()
    except Exception as e:  # pylint: disable=broad-except
      fail(describe_flag_error(e, argv))
    return args

  return parse
