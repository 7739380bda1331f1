r"""ListOps as the Long Range Arena generates it: an expression's value, at its last token.

The published ListOps task (Nangia and Bowman 2018) as the Long
Range Arena generates it, the value of the whole expression (a digit) scored at
its last token, at CPU sizes: depth <= `task.d_train` (3), lengths 4..100
(LRA's own: depth <= 9, lengths 501..1999); `test_length` longer (101..300),
`test_depth` deeper (4..6). See `bifocal_jax.tasks.listops`.

  python -m bifocal_jax.train --config listops --workdir runs/listops
  python -m bifocal_jax.train --config listops:tiny --workdir /tmp/listops_tiny
  python -m bifocal_jax.train --config listops:paper --workdir runs/listops_paper
  python -m bifocal_jax.tasks --config listops --split test_depth --num 3

Variants: default (CPU-sized), `tiny` (tests), `paper` (5 layers, width 64,
8 heads, batch 128; for an accelerator). See `_listops.py`.
"""

from bifocal_jax.configs import _listops

VARIANTS = ("tiny", "paper")


def get_config(arg=None):
  return _listops.get_config("listops", arg)
