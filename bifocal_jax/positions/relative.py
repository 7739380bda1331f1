"""relative schemes (being written)."""

SCHEMES = ()
