import numpy as np
def min_dim2_tmpl(x, out, *, B, D1, D2):
    return x.min(axis=2)
