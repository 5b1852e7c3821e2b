"""Type checks shared by the step's options: a string is not a bool, and ``"0.1"`` is not a number.

Python converts too eagerly for option checking: ``bool("False")`` is True and
``float("-0.5")`` is -0.5, so an option checked by conversion accepts a quoted value and, for a
bool, turns it into the opposite of what was meant. These helpers accept only the types a
caller means (``bool``/``numpy.bool_``; ``int``/``float`` and their numpy scalars) and raise
``ValueError`` naming the option, what was expected and what was received.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["check_bool", "check_real"]


def check_bool(name: str, value) -> bool:
    """``value`` as a bool; ``ValueError`` unless it is a ``bool`` or ``numpy.bool_``."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False; received {value!r}.")
    return bool(value)


def check_real(name: str, value, *, expected: str) -> float:
    """``value`` as a float; ``ValueError`` unless it is a real number (bools excluded).

    ``expected`` describes the admissible values for the message (e.g. ``"a number in (0,
    1)"``); the range itself is the caller's to check.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be {expected}; received {value!r}.")
    return float(value)
