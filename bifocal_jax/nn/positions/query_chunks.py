"""Query chunking and masks shared by the data-dependent attention functions.

The data-dependent schemes (`cope`, `fox`, `stickbreaking`, `path`) build a
`[B, H, Q, S]` array of per-pair quantities (gates, counts, decays) that is not
"softmax of scores plus a bias", so they cannot use `kernels.attend`'s
kernel. They follow its memory contract instead: queries are processed in
chunks of `query_chunk` with `jax.lax.map`, so a chunk holds `chunk x L`
numbers per head, never `L x L`, and a 5,133-token string evaluates.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

# The logit of a masked key (the same value `kernels.attend` adds): a row
# whose every key is masked averages the values instead of producing NaN.
MASKED = float(np.finfo(np.float32).min)


def map_query_chunks(fn: Callable[..., jax.Array], length: int, query_chunk: int, *per_query:
                     jax.Array, multiple_of: int = 1) -> jax.Array:
  """`fn(q_offset, *slices) -> [B, H, Q, ...]` over chunks of the query axis.

  Each array in `per_query` has the query axis at position 2 (`[B|1, H|1, L, ...]`);
  `fn` receives the slices of one chunk and the index of its first query. With
  `length <= query_chunk` this is one call on the whole arrays (padded to
  `multiple_of`); otherwise the chunks (of `query_chunk` rounded up to
  `multiple_of`) run one after another in `jax.lax.map`, so only one chunk's
  intermediates are live. Returns the outputs concatenated along axis 2 and
  cut back to `length`.
  """
  if query_chunk < 1:
    raise ValueError(f"query_chunk={query_chunk!r}: must be >= 1")
  chunk = -(-min(length, query_chunk) // multiple_of) * multiple_of
  num_chunks = -(-length // chunk)
  pad = num_chunks * chunk - length
  padded = [jnp.pad(x, [(0, 0), (0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 3)) for x in per_query]
  if num_chunks == 1:
    return fn(0, *padded)[:, :, :length]
  chunked = [
      jnp.moveaxis(x.reshape(x.shape[:2] + (num_chunks, chunk) + x.shape[3:]), 2, 0) for x in padded
  ]
  out = jax.lax.map(lambda args: fn(args[0] * chunk, *args[1:]),
                    (jnp.arange(num_chunks),) + tuple(chunked))
  # [chunks, B, H, chunk, ...] -> [B, H, chunks * chunk, ...]
  out = jnp.moveaxis(out, 0, 2)
  return out.reshape(out.shape[:2] + (num_chunks * chunk,) + out.shape[4:])[:, :, :length]


def key_mask(q_offset, q_len: int, k_len: int, valid_BxS, *, causal: bool,
             strict: bool = False) -> jax.Array | None:
  """`[B|1, 1, Q, S]` bool, True where query `q_offset + i` may see key `j`, or None.

  Causal masking is by index (as `kernels.attend`): key `j <= i` (`j < i`
  with `strict`); padding masks keys whose `valid_BxS` is False.
  """
  mask = None
  if causal:
    q_index = q_offset + jnp.arange(q_len)
    k_index = jnp.arange(k_len)
    allowed = q_index[:, None] > k_index[None, :] if strict else q_index[:, None] >= k_index[None]
    mask = allowed[None, None]
  if valid_BxS is not None:
    valid = valid_BxS[:, None, None, :].astype(bool)
    mask = valid if mask is None else mask & valid
  return mask


def masked_softmax_values(logits_BxHxQxS: jax.Array, mask, v_BxHxSxK: jax.Array) -> jax.Array:
  """`softmax(logits) v` over the keys, masked keys at `MASKED` (float32 maths)."""
  logits = logits_BxHxQxS.astype(jnp.float32)
  if mask is not None:
    logits = jnp.where(mask, logits, MASKED)
  probs = jax.nn.softmax(logits, axis=-1)
  return jnp.einsum("bhqs,bhsk->bhqk", probs, v_BxHxSxK.astype(jnp.float32))


def heads_major(*xs_BxLxHxK: jax.Array) -> list[jax.Array]:
  """`[B, L, H, ...] -> [B, H, L, ...]`."""
  return [jnp.swapaxes(x, 1, 2) for x in xs_BxLxHxK]
