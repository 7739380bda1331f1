"""absolute schemes (being written)."""

SCHEMES = ()
