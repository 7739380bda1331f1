r"""OUR ListOps variant: the value of every list at its closing bracket (not an LRA task).

Not a task of the Long Range Arena:
LRA's expressions (`[MAX 2 9 [MIN 4 7 ] 0 ]`), and at every `]` the value of
the list it closes (scored; `.` elsewhere), so that intermediate results count
and only depth tracking gets them right. Trains at depth <= `task.d_train` (3),
lengths 4..100; `test_length` longer (101..300) at those depths, `test_depth`
deeper (4..6, stratified) at training lengths. See
`bifocal_jax.tasks.listops`.

  python -m bifocal_jax.train --config listops_depth --workdir runs/listops_depth
  python -m bifocal_jax.train --config listops_depth:tiny --workdir /tmp/listops_depth_tiny
  python -m bifocal_jax.train --config listops_depth:paper --workdir runs/listops_depth_paper
  python -m bifocal_jax.train --config listops_depth:minmax --workdir runs/listops_depth_minmax
  python -m bifocal_jax.train --config listops_depth --config.position.kind=rope --workdir runs/listops_depth_rope
  python -m bifocal_jax.tasks --config listops_depth --split valid --num 3

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator), `minmax` (operators MIN and MAX
only, 8,000 steps: what the 2-layer model learns; the converged sweep's). See `_listops.py`.
"""

from bifocal_jax.configs import _listops

VARIANTS = _listops.VARIANTS


def get_config(arg=None):
  return _listops.get_config("listops_depth", arg)
