"""What a position scheme is: the `Scheme` record the registry holds, and the
protocols of the modules its builders return.

A scheme reaches the model through one (or none) of five interfaces (and a
mixed kind `a+b`, `mixed.py`, through a sixth, `mixed`: two of them, each on
its own group of heads):

  none       no positional signal.
  absolute   an embedding of the positions added to the token embeddings at the
             input: `embedding(positions_BxL) -> [B|1, L, d_model]` float32
             (a module at `model.position_embedding`).
  rotary     a rotation of queries and keys: a module with `frequencies()` and
             `layout`, held at `block.attn.rope` (what surgery swaps).
  bias       an additive logit bias: a module with
             `bias_fn(*, causal, distances_BxL=None) -> BiasFn` (see
             `kernels.attend`: called per query chunk with unscaled,
             heads-major q and k, added to the *scaled* scores), held per layer
             at `block.attn.position` or, when the source shares it by all
             layers, once at `model.position`.
  attention  a data-dependent attention function replacing `kernels.attend`:
             a module at `block.attn.position` with
             `attend(x_BxLxD, q, k, v, positions_BxL, valid_BxL, *, causal,
             query_chunk) -> out_BxLxHxK` (q, k, v `[B, L, H, K]`, unscaled).

Builders take the validated `position` config and keyword arguments
`d_model, num_heads, head_dim, causal, rngs` (rotary builders take
`num_heads, head_dim` only), and may return None.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

NONE, ABSOLUTE, ROTARY, BIAS, ATTENTION = "none", "absolute", "rotary", "bias", "attention"
MIXED = "mixed"  # `a+b`: the heads split between two schemes (`mixed.py`)
INTERFACES = (NONE, ABSOLUTE, ROTARY, BIAS, ATTENTION, MIXED)

# How the model makes the positions of a call (`model.Transformer.position_inputs`).
IN_ORDER = "in_order"  # 0 .. L-1, shared by the batch
PER_BATCH = "per_batch"  # sorted draws from [0, max_position), one per batch
DISTANCES = "distances"  # in-order positions, and sorted random distances [0, r_1 < .. < r_{L-1}]
RANDOMIZATIONS = (IN_ORDER, PER_BATCH, DISTANCES)

# q_BxHxQxK, k_BxHxSxK, q_positions_BxQ, k_positions_BxS -> bias broadcastable to [B, H, Q, S].
# A BiasFn may carry `causal_diagonal`, a cheaper function of the same
# arguments for a causal block whose queries and keys start at the same index
# (`Q == S`): it may return anything above the diagonal, which the causal mask
# hides. `attend` calls it there (`diagonal_bias_fn`).
BiasFn = Callable[[Any, Any, Any, Any], Any]

Builder = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class Scheme:
  """One `position.kind`: its interface, where it is defined, and its builders."""
  name: str
  interface: str
  source: str  # where its definition comes from (one line)
  encoder: bool = True  # defined for the bidirectional encoder (Chomsky tasks)
  decoder: bool = True  # defined for the causal decoder (Dyck)
  randomize: str = IN_ORDER
  # The source draws its positions or distances anew in every attention layer
  # (`position.draw_per_layer`'s default; else one draw for all layers).
  layer_draws: bool = False
  rope: Builder | None = None  # -> module at block.attn.rope
  layer: Builder | None = None  # -> module at block.attn.position (one per layer)
  shared: Builder | None = None  # -> module at model.position (shared by all layers)
  embedding: Builder | None = None  # -> module at model.position_embedding
  # (position, *, num_heads, head_dim) -> None, or a ValueError "position.KEY=VALUE: why"
  check: Callable[..., None] | None = None
  # A kind a trained `rope` model can become by Surgical Integration (`init_from`):
  # (position, *, num_heads, head_dim) -> `surgery.spectralize`'s keyword
  # arguments for it, or None where the rope model is kept as it is.
  from_rope: Callable[..., dict | None] | None = None
  why_not: str = ""  # why the unsupported direction is refused

  def __post_init__(self):
    if self.interface not in INTERFACES:
      raise ValueError(f"Scheme {self.name!r}: interface {self.interface!r} not in {INTERFACES}")
    if self.randomize not in RANDOMIZATIONS:
      raise ValueError(f"Scheme {self.name!r}: randomize {self.randomize!r} not in "
                       f"{RANDOMIZATIONS}")

  @property
  def randomized(self) -> bool:
    return self.randomize != IN_ORDER

  def draws_per_layer(self, position) -> bool:
    """`position.draw_per_layer` resolved (None: `layer_draws`, the source's
    way), or a ValueError naming the key where the kind cannot."""
    value = position.get("draw_per_layer")
    if value is None:
      return self.layer_draws
    if not isinstance(value, bool):
      raise ValueError(f"position.draw_per_layer={value!r}: must be True, False or None")
    if value and (not self.randomized or self.interface == ABSOLUTE):
      why = ("draws no positions" if not self.randomized else
             "draws its positions once, for the embedding added at the input")
      raise ValueError(f"position.draw_per_layer=True: position.kind={self.name!r} {why}")
    return value

  def check_direction(self, *, causal: bool) -> None:
    """A ValueError naming the kind where its source does not define it."""
    if causal and not self.decoder:
      raise ValueError(f"position.kind={self.name!r}: not defined for the causal decoder "
                       f"({self.why_not or self.source})")
    if not causal and not self.encoder:
      raise ValueError(f"position.kind={self.name!r}: not defined for the bidirectional "
                       f"encoder ({self.why_not or self.source})")
