import numpy as np
def upsample2x(x, y, *, N, C, H, W):
    return x.repeat(2, axis=2).repeat(2, axis=3)
