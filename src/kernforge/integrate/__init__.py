"""integrate: a run's winning kernels installed into the unmodified model, checked end to end,
timed four ways, exported as a package, and removed again."""

from kernforge.integrate.install import Patch, Winner, patch, unpatch, winners

__all__ = ["Patch", "Winner", "patch", "unpatch", "winners"]
