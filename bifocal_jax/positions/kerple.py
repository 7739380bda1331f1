"""kerple schemes (being written)."""

SCHEMES = ()
