import functools

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from bifocal_jax import SpectralFrequency, surgery
from bifocal_jax.nn import optim

# Any NNX model with a fixed RoPE, here as the Flax documentation builds it.
rope = nnx.RoPE(embedding_size=16, max_seq_len=128)
model = nnx.MultiHeadAttention(
    num_heads=2, in_features=32, decode=False, rngs=nnx.Rngs(0),
    attention_fn=functools.partial(nnx.dot_product_attention_with_rope, rope=rope))
x = jax.random.normal(jax.random.key(0), (2, 16, 32))
before = model(x)

# Surgical Integration: same function, now with trainable (per-head) frequencies.
surgery.spectralize(model, per_head=True)
assert jnp.allclose(model(x), before, atol=1e-5)

# Spectral Evolution: the frequencies get their own optimizer group.
tx = optim.spectral_evolution(optax.adamw(1e-3), spectral_learning_rate=1e-2, freeze_steps=100)
optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)

@nnx.jit
def train_step(model, optimizer, x):
  loss, grads = nnx.value_and_grad(lambda m: jnp.mean(m(x) ** 2))(model)
  optimizer.update(model, grads)
  return loss

loss = train_step(model, optimizer, x)
spectral = nnx.state(model, SpectralFrequency)  # what to record, checkpoint or plot
frequencies = jnp.exp(spectral["attention_fn"]["rope"]["log_frequency"][...])  # [heads, pairs]
