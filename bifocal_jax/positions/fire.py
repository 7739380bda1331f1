"""fire schemes (being written)."""

SCHEMES = ()
