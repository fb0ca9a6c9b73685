import numpy as np

def affine(x, scale, shift, y, *, N, C, H, W):
    return x * scale[None, :, None, None] + shift[None, :, None, None]
