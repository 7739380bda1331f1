"""Orbax checkpoints: training state, data iterator, trajectory and config.

Layout of `WORKDIR/checkpoints/<step>/`:
  state       the train state as a flat `{tree path: array}` dict, restored
              onto whatever mesh the resuming run has (topology changes work);
  data        the grain iterator state (one file per process);
  trajectory  the recorded spectral frequencies so far (small numpy arrays),
              readable without building a model (`analysis.load_trajectory`);
  meta        step, process count and the resolved config (JSON).

Restoring walks back from the newest step: a damaged checkpoint (a file
missing or truncated) is reported with a warning naming it, moved to
`WORKDIR/damaged_checkpoints/<step>` (kept for inspection, and out of the way
of the step's new save), and the next older one is used. If every checkpoint
is damaged the run stops: it never restarts silently from scratch. A save cut
short by a crash leaves only a temporary directory, removed on the next start.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from absl import logging

from bifocal_jax import cli
from bifocal_jax.training import sharding as sharding_lib


class CheckpointError(RuntimeError):
  pass


def _is_empty(leaf) -> bool:
  return 0 in tuple(leaf.shape)


def flatten(tree) -> dict[str, Any]:
  """`{jax.tree_util.keystr(path): leaf}` of the non-empty leaves: container types
  do not matter to Orbax, and Orbax cannot save zero-size arrays (the trajectory
  of a run without spectral frequencies); `unflatten` rebuilds those."""
  leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
  return {jax.tree_util.keystr(path): leaf for path, leaf in leaves if not _is_empty(leaf)}


def _empty(like):
  sharding = getattr(like, "sharding", None)
  return jnp.zeros(like.shape, like.dtype, device=sharding)


def unflatten(like, flat: dict[str, Any]):
  """Inverse of `flatten`, onto the structure of `like` (zero-size leaves from its shapes)."""
  leaves, treedef = jax.tree_util.tree_flatten_with_path(like)
  return jax.tree_util.tree_unflatten(
      treedef,
      [_empty(leaf) if _is_empty(leaf) else flat[jax.tree_util.keystr(p)] for p, leaf in leaves])


def _root_cause(error: BaseException) -> str:
  """`Type: first line` of the innermost error of a chain: Orbax wraps the
  specific one (which file or array, what is wrong with it) in generic ones."""
  while (error.__cause__ or error.__context__) is not None:
    error = error.__cause__ or error.__context__
  lines = str(error).splitlines()
  return f"{type(error).__name__}: {lines[0][:300] if lines else ''}"


def checkpoint_dir(workdir: str) -> str:
  return os.path.join(os.path.abspath(workdir), "checkpoints")


def steps_in(workdir: str) -> list[int]:
  """Steps checkpointed in `workdir` (none when it has no checkpoint directory)."""
  if not os.path.isdir(checkpoint_dir(workdir)):
    return []
  with Checkpointer.read_only(workdir) as ckpt:
    return ckpt.steps()


class Checkpointer:
  """A thin layer over `ocp.CheckpointManager` with damaged-checkpoint fallback.

  A context manager: leaving the `with` block closes it.
  """

  def __init__(self, workdir: str, *, save_every: int, keep: int, async_save: bool = True,
               read_only: bool = False):
    # A reader's options are those Orbax would force (each forced one is a
    # warning in the user's output).
    options = ocp.CheckpointManagerOptions(max_to_keep=None if read_only else keep,
                                           save_interval_steps=0 if read_only else save_every,
                                           enable_async_checkpointing=async_save,
                                           create=not read_only, read_only=read_only,
                                           cleanup_tmp_directories=not read_only)
    self.read_only = read_only
    self.directory = checkpoint_dir(workdir)
    self.damaged_directory = os.path.join(os.path.dirname(self.directory), "damaged_checkpoints")
    with cli.library_warnings_hidden() if read_only else contextlib.nullcontext():
      # (Orbax warns that a read-only manager's directory is read only.)
      self.manager = ocp.CheckpointManager(self.directory, options=options)

  @classmethod
  def read_only(cls, workdir: str) -> Checkpointer:
    """A reader of `workdir`'s checkpoints that never writes or cleans up."""
    return cls(workdir, save_every=1, keep=1, read_only=True)

  def __enter__(self) -> Checkpointer:
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def steps(self) -> list[int]:
    return sorted(self.manager.all_steps())

  def save(self, step: int, state, data_iterator, trajectory: dict[str, np.ndarray], meta: dict, *,
           force: bool = False) -> bool:
    args = dict(
        state=ocp.args.StandardSave(flatten(state)), trajectory=ocp.args.StandardSave({
            k: v for k, v in trajectory.items() if not _is_empty(v)
        }), meta=ocp.args.JsonSave(
            dict(meta, trajectory_shapes={
                k: [list(v.shape), str(v.dtype)] for k, v in trajectory.items()
            })))
    if data_iterator is not None:
      args["data"] = grain.checkpoint.CheckpointSave(data_iterator)
    return self.manager.save(step, args=ocp.args.Composite(**args), force=force)

  def reached_preemption(self, step: int) -> bool:
    return self.manager.reached_preemption(step)

  def restore(self, step: int, abstract_state) -> tuple[Any, dict]:
    """`(state, meta)` of the checkpoint at `step`, laid out like `abstract_state`."""
    restored = self.manager.restore(
        step, args=ocp.args.Composite(state=ocp.args.StandardRestore(flatten(abstract_state)),
                                      meta=ocp.args.JsonRestore()))
    return unflatten(abstract_state, restored["state"]), dict(restored["meta"])

  def is_intact(self, step: int) -> bool:
    """Whether the checkpoint at `step` restores, read as it was saved (no
    model built, nothing compiled): what a finished run checks before
    declaring itself done without restoring onto its model."""
    try:
      self.manager.restore(
          step, args=ocp.args.Composite(state=ocp.args.StandardRestore(),
                                        trajectory=ocp.args.StandardRestore(),
                                        meta=ocp.args.JsonRestore()))
    except Exception:  # pylint: disable=broad-except
      return False  # `restore_latest` names the damage and falls back
    return True

  def restore_latest(self, abstract_state) -> tuple[int, Any, dict] | None:
    """(step, state, meta) of the newest intact checkpoint; None if there is none."""
    steps = self.steps()
    damaged = []
    for step in reversed(steps):
      try:
        state, meta = self.restore(step, abstract_state)
      except Exception as e:  # pylint: disable=broad-except
        why = _root_cause(e)
        logging.warning("checkpoint %s/%d is damaged (%s); falling back to an older one",
                        self.directory, step, why)
        print(
            f"warning: checkpoint {self.directory}/{step} is damaged ({why}); "
            "falling back to an older one", flush=True)
        damaged.append(step)
        continue
      if damaged and not self.read_only:
        self._set_aside(damaged)
      return step, state, meta
    if damaged:
      raise CheckpointError(
          f"every checkpoint in {self.directory} is damaged (steps {damaged}); "
          "refusing to restart from scratch: move the directory away to start over")
    return None

  def _set_aside(self, steps: list[int]) -> None:
    """Moves damaged checkpoints out of the manager's directory (process 0; all wait)."""
    if jax.process_index() == 0:
      os.makedirs(self.damaged_directory, exist_ok=True)
      for step in steps:
        target = os.path.join(self.damaged_directory, str(step))
        if os.path.exists(target):
          shutil.rmtree(target)
        os.replace(os.path.join(self.directory, str(step)), target)
    sharding_lib.barrier("damaged checkpoints set aside")
    self.manager.reload()

  def restore_data(self, step: int, data_iterator) -> bool:
    """Restores the iterator state saved at `step`; False if not restorable here."""
    try:
      self.manager.restore(
          step, args=ocp.args.Composite(data=grain.checkpoint.CheckpointRestore(data_iterator)))
      return True
    except Exception as e:  # pylint: disable=broad-except
      logging.warning("data iterator state at step %d not restored (%s)", step, e)
      return False

  def restore_trajectory(self, step: int | None = None) -> dict[str, np.ndarray]:
    steps = self.steps()
    if not steps:
      raise CheckpointError(f"no checkpoint in {self.directory}")
    step = steps[-1] if step is None else step
    restored = self.manager.restore(
        step, args=ocp.args.Composite(trajectory=ocp.args.StandardRestore(),
                                      meta=ocp.args.JsonRestore()))
    out = {k: np.asarray(v) for k, v in restored["trajectory"].items()}
    for k, (shape, dtype) in restored["meta"].get("trajectory_shapes", {}).items():
      if k not in out:  # a zero-size array, not saved (see `flatten`)
        out[k] = np.zeros(shape, dtype)
    return out

  def wait(self):
    self.manager.wait_until_finished()

  def close(self):
    self.manager.close()
