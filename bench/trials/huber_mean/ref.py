import numpy as np
def huber_mean(pred, target, loss, *, batch, dim, beta):
    d = np.abs(pred - target)
    l = np.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)
    return np.array([l.mean()])
