"""The Python reference of sgd_momentum.cu (spec: check.reference = "python:ref.py:sgd_momentum").

Called in a child process with the kernel's buffers in the spec's argument order as float64 NumPy
arrays (param and mom hold the values before the step: they are inout; grad: [N]) and the size
symbol and scalars as keywords (see harness/reference.py; lr, momentum and weight_decay arrive as
the float32 values the kernel gets). Returns the inout buffers after the step, (param, mom).
"""
import numpy as np


def sgd_momentum(param, grad, mom, *, N, lr, momentum, weight_decay):
    """torch.optim.SGD's step (dampening 0, not Nesterov), in float64."""
    assert param.shape == grad.shape == mom.shape == (N,)
    g = grad + weight_decay * param
    m = momentum * mom + g
    return param - lr * m, m
