import numpy as np


def stencil3d7(u, out, *, Z, Y, X, c0, c1):
    o = u.copy()  # boundary faces copy the input
    if Z > 2 and Y > 2 and X > 2:
        nb = (u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:] + u[1:-1, :-2, 1:-1] + u[1:-1, 2:, 1:-1]
              + u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1])
        o[1:-1, 1:-1, 1:-1] = c0 * u[1:-1, 1:-1, 1:-1] + c1 * nb
    return o
