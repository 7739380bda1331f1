import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from bifocal_jax import linen
from bifocal_jax.nn import optim


class Attention(nn.Module):
  num_heads: int = 2
  head_dim: int = 16

  @nn.compact
  def __call__(self, x):
    q, k, v = jnp.split(nn.DenseGeneral((3 * self.num_heads, self.head_dim))(x), 3, axis=-2)
    # Per-head spectral eyes; the frequencies are the Linen param `log_frequency`.
    rope = linen.SpectralRoPE(embedding_size=self.head_dim, num_heads=self.num_heads)
    out = jax.nn.dot_product_attention(rope(q), rope(k), v, is_causal=True)
    return nn.DenseGeneral(x.shape[-1], axis=(-2, -1))(out)


model = Attention()
x = jax.random.normal(jax.random.key(0), (2, 16, 32))
params = model.init(jax.random.key(1), x)

# Spectral Evolution: `log_frequency` params get their own optimizer group.
tx = optim.spectral_evolution(optax.adamw(1e-3), spectral_learning_rate=1e-2, freeze_steps=100)
opt_state = tx.init(params)

@jax.jit
def train_step(params, opt_state, x):
  loss, grads = jax.value_and_grad(lambda p: jnp.mean(model.apply(p, x) ** 2))(params)
  updates, opt_state = tx.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state, loss

params, opt_state, loss = train_step(params, opt_state, x)
frequencies = jnp.exp(params["params"]["SpectralRoPE_0"]["log_frequency"])  # [heads, pairs]
