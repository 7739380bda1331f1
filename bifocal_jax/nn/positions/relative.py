"""Transformer-XL relative encodings (Dai et al. 2019) as the Chomsky-hierarchy
benchmark implements them, and their randomized form (Ruoss et al. 2023).

Source: `compute_attention_with_relative_encodings` and
`compute_attention_with_noisy_relative_encodings` in
google-deepmind/neural_networks_chomsky_hierarchy and
google-deepmind/randomized_positional_encodings, `models/positional_encodings.py`.
Per layer, with `R_t = W_R s(t)` (`s` the sin/cos encoding of width
`H * K`, `W_R` a bias-free linear map reshaped to heads):

    logit(i, j) = ((q_i + u) . k_j + (q_i + v) . R_{rel(i, j)}) / sqrt(K)

so here the bias is `(u . k_j + (q_i + v) . R_{rel(i,j)}) / sqrt(K)` on the
scaled scores. `u` (`relpos_contentbias`) and `v` (`relpos_relativebias`) are
`[H, K]`, initialised N(0, 0.02); `W_R` as `hk.Linear`'s default (a normal
truncated at 2 stddev, stddev `1/sqrt(H K)`); `max_time` 10,000. Their
"relative shift" (the Transformer-XL skew of the `[Q, 2L]` logits) is the same
skew here (`relative_shift`: a slice and reshapes, no gather), per block of `Q`
queries and `S` keys over the `Q + S - 1` distances that block spans; like
theirs it reads the positions as in order (`0 .. L-1`, as the model makes
them for these kinds): a block's distances are those of its first query and
key.

- `relative`: `rel = i - j`, the benchmark's bidirectional encoder (its
  `_rel_shift_inner` on `pos_seq = arange(L, -L, -1)`). In the decoder, `rel =
  i - j` as in Transformer-XL (their causal branch reads `s(i - j + 1)`,
  which a learnt `W_R` maps to the same functions: `s(t + 1)` is a fixed
  rotation of `s(t)`).
- `randomized_relative` (NOISY_RELATIVE, `randomize_both_sides=False`): the
  distance `d = j - i` (their convention) is replaced by `sign(d) r_|d|`, with
  `0 = r_0 < r_1 < ... < r_{L-1}` sorted draws without replacement from
  `[1, max_position)`, one set per batch (in a padded batch, each sequence
  gets the set of its own real length: `alibi.draw_distances`), at every
  call and in every layer (their attention module draws with
  `hk.next_rng_key()`; `position.draw_per_layer`). Their code refuses causal attention (NotImplementedError): encoder
  only. Their released code looks the encodings up in a table of positions
  `0 .. max_position-1` at index `sign(d) r_|d| + max_position`, past its end for `d >= 0` (JAX clamps
  the index), so every key at or right of the query gets `s(max_position - 1)`:
  issue #2 of that repository, whose maintainers posted the fix (the table
  covers `[-max_position, max_position)`, so the index lands on
  `s(sign(d) r_|d|)`). The fix is the default;
  `position.released_noisy_relative=True` reproduces the released lookup,
  which produced the paper's published numbers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from bifocal_jax.nn.positions import absolute
from bifocal_jax.nn.positions import base


def relative_shift(x_BxHxQxW: jax.Array, keys: int) -> jax.Array:
  """`y[.., i, j] = x[.., i, Q - 1 - i + j]` as `[.., Q, keys]` where that column
  exists (all of them when `W >= Q + keys - 1`); past a row's end (a causal
  diagonal block's `W = Q` or `Q + 1`, for entries `j > i`) it reads the next
  row's instead.

  Transformer-XL's skew: with column `w` of row `i` the distance
  `d_max - w`, row `i` of the result reads distances `d_max - (Q - 1) + i - j`.
  Row-major, element `(i, Q - 1 - i + j)` is element `Q - 1 + i (W - 1) + j`
  of the rows flattened, so a slice and reshapes do it (their
  `_rel_shift_inner` likewise), and the backward is a pad. The rows read
  are `W - 1` wide: when that is less than `keys` (a causal diagonal block's
  `W = keys`), `x` is padded first; a caller that encodes one spare distance
  (`W = Q + keys`, or `keys + 1` on the diagonal) spares that copy.
  """
  *lead, q, w = x_BxHxQxW.shape
  if w < keys + 1:
    x_BxHxQxW = jnp.pad(x_BxHxQxW, [(0, 0)] * len(lead) + [(0, 0), (0, keys + 1 - w)])
    w = keys + 1
  flat = x_BxHxQxW.reshape(*lead, q * w)
  return flat[..., q - 1:q - 1 + q * (w - 1)].reshape(*lead, q, w - 1)[..., :keys]


@jax.custom_vjp
def encoding_products(qv_NxK: jax.Array, r_WxK: jax.Array) -> jax.Array:
  """`qv r^T` as `[N, W]`: one head's `(q + v) . R` before the skew.

  The backward is written out for `dR = dX^T qv`, which contracts the major
  `N` (batch x queries) dimension: autodiff's dot makes XLA:CPU transpose
  `dX` to `[W, N]` first, a pass over the head's logits. As a broadcast
  multiply and a sum over `N` (`kernels._sum_over_queries`' form) it is one
  pass (the train step before and after: docs/performance.md, "Position kinds", its
  "Cost" paragraphs).
  """
  return qv_NxK @ r_WxK.T


def _encoding_products_fwd(qv_NxK, r_WxK):
  return qv_NxK @ r_WxK.T, (qv_NxK, r_WxK)


def _encoding_products_bwd(residuals, d_NxW):
  qv_NxK, r_WxK = residuals
  d_r = jnp.sum(d_NxW[:, :, None] * qv_NxK[:, None, :], axis=0)
  return d_NxW @ r_WxK, d_r.astype(r_WxK.dtype)


encoding_products.defvjp(_encoding_products_fwd, _encoding_products_bwd)


def relative_logits(q_BxHxQxK, k_BxHxSxK, r_WxHxK, u_HxK, v_HxK, *,
                    per_head: bool | None = None) -> jax.Array:
  """`(u . k_j + (q_i + v) . R[rel(i, j)]) / sqrt(K)`, `[B, H, Q, S]` float32, where
  row `w` of `r_WxHxK` encodes the distance `i - j = d_max - w` and
  `d_max = Q - 1 + (first query's position - first key's position)`
  (`W >= Q + S - 1`; a spare row past those saves `relative_shift` a copy).
  `r_WxHxK` may be `[B, W, H, K]`: each sequence's own encodings (randomized
  distances drawn per real length).

  With only the distances `Q - 1 .. 0` (and a spare: `W = Q + 1`, `Q = S`: a
  causal diagonal block) the entries above the diagonal, which the causal
  mask hides, are other entries' values (`relative_shift` reads past a row
  into the next). `per_head` (default: on CPU) computes `(q + v) . R` head
  by head (below).
  """
  scale = q_BxHxQxK.shape[-1]**-0.5
  keys = k_BxHxSxK.shape[2]
  # Scaled before the products, not after: no pass over [B, H, Q, S] for it.
  q_plus_v = (q_BxHxQxK.astype(jnp.float32) + v_HxK[:, None, :]) * scale
  content = jnp.einsum("hk,bhsk->bhs", u_HxK * scale, k_BxHxSxK.astype(jnp.float32))[:, :, None, :]
  if per_head is None:
    per_head = jax.default_backend() == "cpu"
  if r_WxHxK.ndim == 4:  # each sequence its own encodings: batched products
    if per_head:
      position = jnp.stack([
          relative_shift(jnp.einsum("bqk,bwk->bqw", q_plus_v[:, h], r_WxHxK[:, :, h]), keys)
          for h in range(q_BxHxQxK.shape[1])
      ], axis=1)
    else:
      position = relative_shift(jnp.einsum("bhqk,bwhk->bhqw", q_plus_v, r_WxHxK), keys)
  elif per_head:
    # One plain [B Q, K] x [K, W] matmul and skew per head: the batched einsum
    # below makes XLA:CPU transpose its [B, H, Q, W] output to heads-major and
    # back (forward and backward); per head there is no such transpose (the
    # logits timed alone: docs/performance.md; the train step: docs/performance.md,
    # "Position kinds").
    b, heads, queries, head_dim = q_BxHxQxK.shape

    def head(h):
      products = encoding_products(q_plus_v[:, h].reshape(b * queries, head_dim), r_WxHxK[:, h])
      return relative_shift(products.reshape(b, queries, -1), keys)

    position = jnp.stack([head(h) for h in range(heads)], axis=1)
  else:
    position = relative_shift(jnp.einsum("bhqk,whk->bhqw", q_plus_v, r_WxHxK), keys)
  return content + position


class RelativeBias(nnx.Module):
  """One layer's `u`, `v` and `W_R` (Transformer-XL, as the benchmark)."""

  def __init__(self, num_heads: int, head_dim: int, *, max_time: float, randomized: bool = False,
               released_lookup: bool = False, max_position: int = 0, rngs: nnx.Rngs):
    hidden = num_heads * head_dim
    normal = jax.nn.initializers.normal(0.02)
    self.u_HxK = nnx.Param(normal(rngs.params(), (num_heads, head_dim)))  # relpos_contentbias
    self.w_r = nnx.Param(  # hk.Linear(hidden, with_bias=False), default init
        jax.random.truncated_normal(rngs.params(), -2.0, 2.0,
                                    (hidden, hidden), jnp.float32) * hidden**-0.5)
    self.v_HxK = nnx.Param(normal(rngs.params(), (num_heads, head_dim)))  # relpos_relativebias
    self.num_heads, self.head_dim, self.max_time = num_heads, head_dim, float(max_time)
    self.randomized, self.released_lookup = randomized, released_lookup
    self.max_position = int(max_position)

  def encodings(self, values) -> jax.Array:
    """`R = W_R s(values)` as `[..., H, K]` (`values` `[...]`)."""
    hidden = self.num_heads * self.head_dim
    if self.released_lookup:  # their issue #2: a table of positions 0 .. max_position-1 only
      values = jnp.clip(values + self.max_position, 0, self.max_position - 1)
    s = absolute.sinusoid(values, hidden, self.max_time)
    return (s @ self.w_r[...]).reshape(*jnp.shape(values), self.num_heads, self.head_dim)

  def bias_fn(self, *, causal: bool, distances_BxL=None) -> base.BiasFn:
    del causal
    u, v = self.u_HxK[...], self.v_HxK[...]

    def encoded(offsets_W):
      """`[W, H, K]`, or `[B, W, H, K]` when each sequence has its own distances."""
      if not self.randomized:
        return self.encodings(offsets_W)
      d_W = -offsets_W  # their d = j - i
      if distances_BxL is None:
        return self.encodings(d_W)  # in order (no draws): r_|d| = |d|
      r_BxW = jnp.take(jnp.atleast_2d(distances_BxL), jnp.abs(d_W), axis=-1, mode="clip")
      if r_BxW.shape[0] == 1:
        r_BxW = r_BxW[0]
      return self.encodings(jnp.sign(d_W) * r_BxW)

    def fn(q, k, qp, kp):
      queries, keys = q.shape[2], k.shape[2]
      # The block's distances i - j, largest first: from (first query - first
      # key) + Q - 1 down to (first query - last key). In-order positions, so
      # the last key is the first plus S - 1 (a padded block's edge-repeated
      # positions are not).
      d_max = qp[0, 0] - kp[0, 0] + queries - 1
      # Q + S - 1 distances and a spare one (relative_shift never reads it
      # for a kept entry; it spares a padded copy).
      return relative_logits(q, k, encoded(d_max - jnp.arange(queries + keys)), u, v)

    def causal_diagonal(q, k, qp, kp):
      # Queries and keys start together and j > i is masked: only the
      # distances Q - 1 .. 0 are seen, half of the (q + v) . R products; a
      # spare distance (-1, read only above the diagonal) spares a padded copy.
      del qp, kp
      queries = q.shape[2]
      return relative_logits(q, k, encoded(queries - 1 - jnp.arange(queries + 1)), u, v)

    fn.causal_diagonal = causal_diagonal
    return fn


def _layer(randomized):

  def build(position, *, d_model, num_heads, head_dim, causal, rngs):
    del d_model, causal
    return RelativeBias(
        num_heads, head_dim, max_time=absolute.resolved_max_time(position), randomized=randomized,
        released_lookup=randomized and bool(position.get("released_noisy_relative")),
        max_position=int(position.max_position), rngs=rngs)

  return build


SOURCE = "models/positional_encodings.py: compute_attention_with_relative_encodings"
SCHEMES = (
    base.Scheme("relative", base.BIAS, f"Dai et al. 2019 (Transformer-XL); Chomsky benchmark, "
                f"{SOURCE}", layer=_layer(False)),
    base.Scheme("randomized_relative", base.BIAS,
                "Ruoss et al. 2023, compute_attention_with_noisy_relative_encodings",
                layer=_layer(True), randomize=base.DISTANCES, layer_draws=True, decoder=False,
                why_not="their code raises NotImplementedError for causal attention"),
)

CONFIG_KEYS = {
    # randomized_relative: the released code's table lookup (their issue #2) instead of the fix
    "released_noisy_relative": ml_collections.config_dict.placeholder(bool),
}
