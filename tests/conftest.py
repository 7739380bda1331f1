"""Shared fixtures: small position configs for the attention and model tests."""

import pytest

from bifocal_jax import attention


@pytest.fixture
def position_config():
  """`position_config(kind, **overrides)`: the attention layer's defaults with overrides."""
  def make(kind, **overrides):
    position = attention.default_position_config()
    position.kind = kind
    position.update(overrides)
    return position
  return make
