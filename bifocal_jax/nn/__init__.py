"""The model's mathematics: rotary embeddings (`rope`), attention and its
kernels, the position schemes (`positions`), the transformer (`model`), Linen
modules (`linen`) and the spectral optimizer groups (`optim`).

The bottom layer of the library: it imports no other part of it.
"""
