import numpy as np
def prod_dim1(input, output, *, B, D1, D2):
    return input.prod(axis=1)
