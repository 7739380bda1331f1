r"""Where the train step's time goes: a `jax.profiler` trace, per XLA op and source file.

  python -m benchmarks.step_profile --out=results/benchmarks/step_profile.json
  python -m benchmarks.step_profile --profile_configs=protocol80 --profile_kinds=bifocal --traced_steps=3

For each config (`step_benchmark.py`'s names; default the 5-layer protocol
model at lengths 40 and 80) and `position.kind`: the project's train step is
compiled, warmed up, and `--steps` steps run under `jax.profiler.trace`.
The trace's XLA ops (thunks: fusions, YNNPACK kernels, dots, on whichever
thread ran them) are summed by name, and attributed through the compiled
HLO's metadata to the source file and line that produced them (`attention.py`,
`model.py`, `rope.py`, optax's files, ...). Reported: the step time, the
share of the op time per source function, and the top ops with their JAX op
names. Shares on a shared machine are steadier than times.
"""

from __future__ import annotations

from bifocal_jax import machine

machine.use_tuned_allocator()  # as the training benchmarks: see bifocal_jax/machine.py
# pylint: disable=g-import-not-at-top,wrong-import-position,wrong-import-order

import collections
import glob
import os
import re
import tempfile
import time

import jax
from absl import flags

from bifocal_jax.training import sharding
from bifocal_jax import tasks
from bifocal_jax.training import state as state_lib
from bifocal_jax.training import steps as steps_lib
from bifocal_jax.tasks import pipeline

from benchmarks import bench_util
from benchmarks import step_benchmark

# (`--out` is step_benchmark's flag, shared.)
_CONFIGS = flags.DEFINE_list("profile_configs", ["protocol40", "protocol80"],
                             "step_benchmark.py's config names.")
# Not --kinds: step_benchmark (imported for its configs) defines that flag.
_KINDS = flags.DEFINE_list("profile_kinds", ["bifocal", "rope"], "position.kind values.")
_STEPS = flags.DEFINE_integer("traced_steps", 5, "Traced steps.", lower_bound=1)
_TOP = flags.DEFINE_integer("top", 12, "Ops listed per run.")
_INSTR = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = .*?metadata=\{([^}]*)\}")
_FIELD = re.compile(r'(\w+)=(?:"([^"]*)"|([^\s,}]+))')


def _fields(text: str) -> dict[str, str]:
  return {k: quoted or bare for k, quoted, bare in _FIELD.findall(text)}


def _table(hlo_text: str, section: str) -> dict[int, str]:
  """The `id value` lines of one section of the HLO text's stack-frame header."""
  m = re.search(rf"^{section}\n(.*?)(?:\n\n|\n[A-Z])", hlo_text, re.S | re.M)
  rows = {}
  for line in (m.group(1).splitlines() if m else []):
    key, _, value = line.strip().partition(" ")
    if key.isdigit():
      rows[int(key)] = value.strip().strip('"')
  return rows


def _where(frame: int, frames, locations, files, functions) -> str:
  """The innermost frame of the project, flax or optax: `file:function`."""
  seen = set()
  while frame in frames and frame not in seen:
    seen.add(frame)
    location, parent = frames[frame]
    file_id, function_id = locations.get(location, (0, 0))
    path = files.get(file_id, "?")
    if any(part in path for part in ("bifocal_jax/", "optax/", "flax/")):
      return f"{path.split('bifocal_jax/')[-1].split('site-packages/')[-1]}:{functions.get(function_id, '?')}"
    frame = parent
  return "other"


def hlo_sources(hlo_text: str) -> dict[str, dict]:
  """`{instruction name: {op_name, source}}`: each instruction's JAX op name, and
  the source it came from (`_where` of its metadata's stack frame)."""
  files, functions = _table(hlo_text, "FileNames"), _table(hlo_text, "FunctionNames")
  locations = {}
  for key, value in _table(hlo_text, "FileLocations").items():
    f = _fields((value))
    locations[key] = (int(f.get("file_name_id", 0)), int(f.get("function_name_id", 0)))
  frames = {}
  for key, value in _table(hlo_text, "StackFrames").items():
    f = _fields((value))
    frames[key] = (int(f.get("file_location_id", 0)), int(f.get("parent_frame_id", 0)))
  out = {}
  for line in hlo_text.splitlines():
    m = _INSTR.match(line)
    if m:
      meta = _fields((m.group(2)))
      frame = int(meta.get("stack_frame_id", 0) or 0)
      out[m.group(1)] = dict(op_name=meta.get("op_name", ""),
                             source=_where(frame, frames, locations, files, functions))
  return out


def op_times(trace_dir: str, op_names) -> collections.Counter:
  """Seconds per XLA op over the trace (the events, on any thread, named as
  an instruction of the compiled program: the thunks run on XLA's workers)."""
  path = sorted(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True))[-1]
  data = jax.profiler.ProfileData.from_file(path)
  times = collections.Counter()
  for plane in data.planes:
    for line in plane.lines:
      for event in line.events:
        if event.name in op_names:
          times[event.name] += event.duration_ns * 1e-9
  return times


def profile(name: str, kind: str, steps: int, top: int) -> dict:
  c = step_benchmark.dyck_config(name)
  c.position.kind = kind
  task = tasks.get_task(c.task)
  width = step_benchmark.config_buckets(c, task)[-1]
  mesh = sharding.make_mesh(c.mesh)
  with jax.set_mesh(mesh):
    batch = steps_lib.to_global_batch(next(iter(pipeline.train_dataset(
        task, batch_size_per_process=c.batch_size, seed=0, buckets=(width,)))), mesh)
    s, state = state_lib.setup(c, mesh, task=task)
    compiled = steps_lib.make_train_step(s).lower(state, batch).compile()
    sources = hlo_sources(compiled.as_text())
    for _ in range(3):
      state, metrics = compiled(state, batch)
    jax.block_until_ready(metrics)
    with tempfile.TemporaryDirectory() as trace_dir:
      start = time.perf_counter()
      with jax.profiler.trace(trace_dir):
        for _ in range(steps):
          state, metrics = compiled(state, batch)
        jax.block_until_ready(metrics)
      seconds = (time.perf_counter() - start) / steps
      times = op_times(trace_dir, sources)
  total = sum(times.values())
  by_file = collections.Counter()
  for op, t in times.items():
    by_file[sources[op]["source"]] += t
  ops = [dict(op=op, share=t / total, seconds_per_step=t / steps, source=sources[op]["source"],
              op_name=sources[op]["op_name"][-120:])
         for op, t in times.most_common(top)]
  return dict(config=name, kind=kind, step_seconds_traced=seconds,
              op_seconds_per_step=total / steps, batch_size=c.batch_size, length=width,
              by_source={f: t / total for f, t in by_file.most_common()}, top_ops=ops)


def main(argv):
  del argv
  machine = bench_util.machine()
  results = [profile(n, k, _STEPS.value, _TOP.value) for n in _CONFIGS.value for k in _KINDS.value]
  print(f"{machine['cpu']}, {machine['cores']} cores, {machine['date']}, load average "
        f"{machine['load_average']} -> {bench_util.load_average()}")
  for r in results:
    print(f"\n{r['config']} {r['kind']}: step {r['step_seconds_traced'] * 1e3:.0f} ms traced "
          f"(ops {r['op_seconds_per_step'] * 1e3:.0f} ms); by source: " +
          ", ".join(f"{f} {v:.0%}" for f, v in r["by_source"].items() if v >= 0.01))
    print(bench_util.markdown_table(
        ["op", "share", "ms/step", "source", "JAX op"],
        [[o["op"], f"{o['share']:.1%}", f"{o['seconds_per_step'] * 1e3:.1f}", o["source"],
          o["op_name"][-70:]] for o in r["top_ops"]]))
  bench_util.write_json(step_benchmark._OUT.value,  # pylint: disable=protected-access
                        dict(machine=machine, results=results))


if __name__ == "__main__":
  bench_util.run_main(main)
