"""The comparison model of `step_benchmark.py`: a plain Flax NNX transformer.

The same sizes as `bifocal_jax.nn.model.Transformer` (pre-LayerNorm blocks,
GELU MLP, untied output head, no biases in the attention projections), built
from stock parts: `nnx.MultiHeadAttention` whose `attention_fn` is
`nnx.dot_product_attention_with_rope` with an `nnx.RoPE`, as the Flax
documentation builds it; trained by a textbook jitted step (value_and_grad,
optax AdamW with global-norm clipping, donated state).
"""

from __future__ import annotations

import functools

import jax
import ml_collections
import optax
from flax import nnx

from bifocal_jax.training import metrics as metrics_lib
from bifocal_jax.nn import model as model_lib


class Block(nnx.Module):

  def __init__(self, d: int, heads: int, head_dim: int, mlp_dim: int, *, rngs: nnx.Rngs):
    self.ln_attn = nnx.LayerNorm(d, rngs=rngs)
    rope = nnx.RoPE()  # tables from the call's length and head_dim
    self.attn = nnx.MultiHeadAttention(
        num_heads=heads, in_features=d, qkv_features=heads * head_dim, out_features=d,
        use_bias=False, decode=False, rngs=rngs,
        attention_fn=functools.partial(nnx.dot_product_attention_with_rope, rope=rope))
    self.ln_mlp = nnx.LayerNorm(d, rngs=rngs)
    self.mlp_in = nnx.Linear(d, mlp_dim, rngs=rngs)
    self.mlp_out = nnx.Linear(mlp_dim, d, rngs=rngs)

  def __call__(self, x, mask):
    x = x + self.attn(self.ln_attn(x), mask=mask)
    return x + self.mlp_out(jax.nn.gelu(self.mlp_in(self.ln_mlp(x))))


class Transformer(nnx.Module):

  def __init__(self, cfg: ml_collections.ConfigDict, *, vocab_size: int, causal: bool,
               rngs: nnx.Rngs):
    d, heads, head_dim, mlp_dim = model_lib.resolved_dims(cfg)
    self.causal = causal
    self.embed = nnx.Embed(vocab_size, d, rngs=rngs)
    self.blocks = nnx.List([Block(d, heads, head_dim, mlp_dim, rngs=rngs)
                            for _ in range(cfg.num_layers)])
    self.ln_final = nnx.LayerNorm(d, rngs=rngs)
    self.unembed = nnx.Linear(d, vocab_size, use_bias=False, rngs=rngs)

  def __call__(self, tokens, valid):
    mask = nnx.make_attention_mask(valid, valid)
    if self.causal:
      mask = nnx.combine_masks(mask, nnx.make_causal_mask(tokens))
    x = self.embed(tokens)
    for block in self.blocks:
      x = block(x, mask)
    return self.unembed(self.ln_final(x))


def make_train_step(model: Transformer, *, learning_rate: float = 1e-3):
  """`(step, state)`: `state, loss = step(state, batch)`, jitted with donation."""
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(learning_rate))

  def loss_fn(params, batch):
    logits = nnx.merge(graphdef, params, rest)(batch["inputs"], batch["valid"])
    return metrics_lib.masked_cross_entropy(logits, batch["targets"], batch["mask"])[0]

  @functools.partial(jax.jit, donate_argnums=0)
  def step(state, batch):
    params, opt_state = state
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    updates, opt_state = tx.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), loss

  return step, (params, tx.init(params))
