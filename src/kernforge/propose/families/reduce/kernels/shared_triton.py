# What every reduce kernel shares: the ops' NaN rules, the compensated running sum, the
# reduction of a tile, the division of a mean, and the value masked-off lanes load.


@triton.jit
def nan_max(a, b):
    return tl.where((a > b) | (a != a), a, b)  # a NaN wins, as in torch.amax


@triton.jit
def nan_min(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def combine(a, b, OP: tl.constexpr):
    if OP == "amax":
        return nan_max(a, b)
    elif OP == "amin":
        return nan_min(a, b)
    else:
        return a + b


@triton.jit
def accumulate(acc, lost, x, OP: tl.constexpr):
    # A sum keeps what each add rounds off in `lost` and feeds it back (Kahan): a long loop then
    # errs like a pairwise sum. A plain float32 running sum over R = 4096 rows failed eager's
    # bound on an H200 (bench/results/h200/issue19/README.md).
    if OP == "amax" or OP == "amin":
        return combine(acc, x, OP), lost
    else:
        y = x - lost
        t = acc + y
        lost = (t - acc) - y
        return t, tl.where(lost == lost, lost, 0.0)  # past an inf there is nothing to feed back


@triton.jit
def reduce_tile(acc, axis: tl.constexpr, OP: tl.constexpr):
    if OP == "amax":
        return tl.reduce(acc, axis, nan_max)
    elif OP == "amin":
        return tl.reduce(acc, axis, nan_min)
    else:
        return tl.sum(acc, axis)


@triton.jit
def finish(total, N_RED: tl.constexpr, OP: tl.constexpr):
    if OP == "mean":
        return total / N_RED  # divided once, at the end
    else:
        return total


def identity(op):
    # What a reduction starts from: masked-off lanes load it too, so they change nothing.
    if op == "amax":
        return -float("inf")
    if op == "amin":
        return float("inf")
    return 0.0
