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
import contextlib
import difflib
import functools
import json
import logging as std_logging
import os
import re
import sys
import textwrap
import warnings
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


@functools.cache
def _config_module(name: str) -> ast.Module:
  with open(config_path(name)) as f:
    return ast.parse(f.read())


def config_purpose(name: str) -> str:
  """What packaged config `name` trains: its docstring's summary line (read,
  not imported: this module imports nothing of the project)."""
  doc = ast.get_docstring(_config_module(name)) or ""
  return doc.strip().split("\n")[0].rstrip(".")


def config_variants(name: str) -> tuple[str, ...]:
  """The `:VARIANT`s packaged config `name` accepts besides its default: its
  module's `VARIANTS`, a literal or `_shared.VARIANTS` of a sibling module."""
  return _variants(os.path.join(CONFIG_DIRECTORY, f"{name}.py"))


def _variants(path: str) -> tuple[str, ...]:
  with open(path) as f:
    module = ast.parse(f.read())
  for node in module.body:
    if (isinstance(node, ast.Assign) and len(node.targets) == 1 and
        isinstance(node.targets[0], ast.Name) and node.targets[0].id == "VARIANTS"):
      value = node.value
      if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
        return _variants(os.path.join(CONFIG_DIRECTORY, f"{value.value.id}.py"))
      return tuple(ast.literal_eval(value))
  return ()


CONFIGS_COMMAND = "python -m bifocal_jax.configs"


def configs_help() -> str:
  """The packaged configs, two lines each: the name and its variants, then what it trains."""
  lines = []
  for name in CONFIG_NAMES:
    variants = ", ".join(config_variants(name)) or "none"
    lines += [f"  {name}  (variants: {variants})", "      " + config_purpose(name)]
  return "\n".join(lines)


def configs_listing() -> str:
  """What `python -m bifocal_jax.configs` prints: how to name a config, then `configs_help`."""
  return ("The configs of the package, for --config NAME or --config NAME:VARIANT (from any\n"
          "folder; a config file's path works too: --config configs/dyck.py:tiny). Without a\n"
          "variant, a CPU-sized run; tiny: seconds, for tests; paper: for an accelerator.\n"
          "Print one resolved: python -m bifocal_jax.train --config NAME --print_config\n\n" +
          configs_help())


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
  which the config loader reports itself), or a packaged config's name with a
  variant it lacks, is a one-line ValueError naming what to use instead.
  """
  spec, sep, arg = value.partition(":")
  if os.path.isfile(spec):
    return value
  if spec in CONFIG_NAMES:
    variants = config_variants(spec)
    if arg and arg not in variants:
      raise ValueError(f"--config={value}: config {spec} has no variant {arg!r} (use "
                       f"{' or '.join(f'{spec}:{v}' for v in variants) or spec}; "
                       f"`{CONFIGS_COMMAND}` lists them)")
    return config_path(spec) + sep + arg
  if os.sep in spec or spec.endswith(".py"):
    return value
  close = difflib.get_close_matches(spec, CONFIG_NAMES, n=1)
  raise ValueError(f"--config={value}: no such file, nor a config of the package" +
                   (f" (did you mean {close[0]}?)" if close else "") +
                   f"; `{CONFIGS_COMMAND}` lists them")


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
    return record.levelno >= std_logging.WARNING or _is_project(record)


def _is_project(record: std_logging.LogRecord) -> bool:
  """Whether this project logged `record` (its package, or the entry point itself)."""
  path = os.path.abspath(record.pathname)
  return f"{os.sep}bifocal_jax{os.sep}" in path or path == os.path.abspath(sys.argv[0])


def quiet_library_logs() -> None:
  """Hides other libraries' INFO logs (Orbax, JAX) unless `--verbosity` >= 1."""
  if logging.get_verbosity() > logging.INFO:
    return
  handler = logging.get_absl_handler()
  if not any(isinstance(f, _ProjectInfoOnly) for f in handler.filters):
    handler.addFilter(_ProjectInfoOnly())


class _NoLibraryWarnings(std_logging.Filter):
  """Drops other libraries' records below ERROR (see `library_warnings_hidden`)."""

  def filter(self, record: std_logging.LogRecord) -> bool:
    return record.levelno >= std_logging.ERROR or _is_project(record)


@contextlib.contextmanager
def library_warnings_hidden():
  """Inside the block, other libraries' warnings (absl-logged and Python
  `warnings`) are not shown; errors, and this project's own warnings, are.

  For calls whose library warnings are known and say nothing to the user:
  Orbax announces, opening checkpoints read-only, that the directory is read
  only; a message that came first in every evaluation's output.
  """
  handler = logging.get_absl_handler()
  only_errors = _NoLibraryWarnings()
  handler.addFilter(only_errors)
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      yield
  finally:
    handler.removeFilter(only_errors)


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


def run_main(main) -> None:
  """`app.run(main)`, a ValueError (bad input: a flag, a file) as one line,
  `error: ...`, and exit status 2: the analysis and benchmark commands' main."""
  from absl import app  # pylint: disable=g-import-not-at-top
  try:
    app.run(main)
  except ValueError as e:
    fail(str(e))


def write_json(path: str | None, results: dict) -> None:
  """`results` as indented JSON at `path` (its folder made), said in one line;
  nothing without a path."""
  if not path:
    return
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    json.dump(results, f, indent=2, sort_keys=True)
  print(f"wrote {path}")


def markdown_table(header: list[str], rows: list[list]) -> str:
  """A markdown table of `rows` under `header` (cells as `str` gives them)."""
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
  return "\n".join(lines)


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
    return (f"{flag}: no such config key" + (f" ({hint[0]})" if hint else "") +
            "; --print_config lists the keys")
  if isinstance(error, flags.UnrecognizedFlagError):
    return f"{first_line(error)} (--help lists the flags)"
  if isinstance(error, flags.IllegalFlagValueError):
    message = re.sub(r"^flag ", "", first_line(error))
    if message.startswith("--config."):
      return f"{message} (--print_config shows each key's current value and type)"
    return f"{message} (--help says what it takes)"
  # Messages of config files that fail to load span lines (a traceback even):
  # the last line says what went wrong.
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  if not lines:
    return type(error).__name__
  return re.sub(r"^[A-Za-z_.]*(Error|Exception): ", "", lines[-1])


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
