"""The hurt test the harm study's scripts share (as the frontier and a node count it, metrics::rmse_change_se):
a party-run is hurt when its test RMSE after is above alone by at least 1% and by more than two paired SE."""
import math


def rmse(e):
    """RMSE from per-point squared errors."""
    return math.sqrt(sum(e) / len(e))


def change_se(a, b):
    """SE of RMSE(b) - RMSE(a) from per-point squared errors, paired over the points (the delta method)."""
    t = len(a); ra, rb = rmse(a), rmse(b)
    g = [y / (2 * rb) - x / (2 * ra) for x, y in zip(a, b)]
    m = sum(g) / t
    return math.sqrt(sum((v - m) ** 2 for v in g) / (t - 1) / t)


def hurt(alone, after, se):
    """From the two RMSEs and the SE of their change (None: no SE, not hurt)."""
    return se is not None and after > alone * 1.01 and after - alone > 2 * se


def hurt_points(a, b):
    """From per-point squared errors alone (a) and after (b)."""
    return hurt(rmse(a), rmse(b), change_se(a, b))
