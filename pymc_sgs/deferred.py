"""``SplitGibbs(...)`` made with no model on the context stack: built later, inside one.

Bambi builds its PyMC model inside ``fit`` and samples it with ``with model:
pm.sample(**kwargs)``, so in ``bmb.Model(...).fit(step=pymc_sgs.SplitGibbs())`` the step
is constructed before any model exists. ``SplitGibbs.__new__`` then returns a
:class:`DeferredStep` holding the arguments. PyMC's ``pm.sample(step=...)`` accepts a
sequence of steps and expands it with ``list(step)``
(``pymc.sampling.mcmc.assign_step_methods``) while the model is on the context stack,
and this object is a sequence of one step, ``SplitGibbs(*args, **kwargs)`` constructed
right there: the same object, with the same draws, as one constructed inside ``with
model:``. Used any other way before that, it raises ``ValueError`` saying how to
build it.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import pymc as pm

from .options import LEGACY_KEYWORDS

__all__ = ["DeferredStep"]

_HOW = (
    "build it inside `with model:` (step = pymc_sgs.SplitGibbs(...)), or pass it to "
    "pm.sample(step=...) called inside `with model:`, or to Bambi's "
    "bmb.Model(...).fit(step=...)"
)


class DeferredStep(Sequence):
    """A ``SplitGibbs`` step to construct once a model is on the context stack.

    A sequence of one step: iterating it (as ``pm.sample`` does) constructs
    ``cls(*args, **kwargs)`` in the model then on the context stack, a new step
    each time. Any other use raises ``ValueError``.
    """

    __slots__ = ("_cls", "_args", "_kwargs")

    def __init__(self, cls, args, kwargs):
        # a misspelt argument fails now, as it would in a model; values are checked when built
        signature = inspect.signature(cls.__init__)
        try:
            signature.bind(None, *args, **kwargs)
        except TypeError as err:
            raise TypeError(f"{cls.__name__}(): {err}") from None
        # the deprecated keywords (pymc_sgs.options) are the only names **legacy takes
        named = set(signature.parameters)
        unknown = sorted(set(kwargs) - named - set(LEGACY_KEYWORDS))
        if unknown:
            raise TypeError(f"{cls.__name__}(): got an unexpected keyword argument {unknown[0]!r}")
        object.__setattr__(self, "_cls", cls)
        object.__setattr__(self, "_args", tuple(args))
        object.__setattr__(self, "_kwargs", dict(kwargs))

    def build(self):
        """The step, constructed in the model on the context stack."""
        if pm.Model.get_context(error_if_none=False) is None:
            raise ValueError(
                f"{self._cls.__name__}() was created with no model on the context stack, and "
                f"none is active where it is used either (pm.sample(model=...) does not enter "
                f"the model). {_HOW[0].upper()}{_HOW[1:]}."
            )
        return self._cls(*self._args, **self._kwargs)

    # ------------------------------------------------------- the sequence pm.sample expands
    def __len__(self) -> int:
        return 1

    def __iter__(self):
        yield self.build()

    def __getitem__(self, index):
        if isinstance(index, slice):
            return list(self)[index]
        if index not in (0, -1):
            raise IndexError(f"{self!r} holds one step; received index {index!r}.")
        return self.build()

    # ----------------------------------------------------------------- any other use
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # protocol look-ups (copy, pickle) work as usual
        raise ValueError(
            f"{self._cls.__name__}() was created with no model on the context stack, so it is "
            f"not a step yet and has no attribute {name!r}: {_HOW}, which builds it in the "
            "model."
        )

    def __setattr__(self, name, value):
        self.__getattr__(name)

    def __reduce__(self):
        return DeferredStep, (self._cls, self._args, self._kwargs)

    def __repr__(self) -> str:
        args = [repr(a) for a in self._args] + [f"{k}={v!r}" for k, v in self._kwargs.items()]
        return (
            f"{self._cls.__name__}({', '.join(args)}) "
            "[deferred: built by pm.sample in the model on the context stack]"
        )
