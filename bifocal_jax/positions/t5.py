"""t5 schemes (being written)."""

SCHEMES = ()
