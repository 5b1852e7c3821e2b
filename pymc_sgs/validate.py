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

__all__ = ["check_bool", "check_real", "check_count"]


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


def check_count(name: str, value, *, auto: bool = False):
    """``value`` as a positive int (or ``"auto"`` where ``auto``); else ``ValueError`` naming it.

    Bools are refused (``True`` is an int to Python, never a count to a user).
    """
    if auto and isinstance(value, str) and value == "auto":
        return "auto"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        expected = "'auto' or a positive integer" if auto else "a positive integer"
        raise ValueError(f"{name} must be {expected}; received {value!r}.")
    return int(value)
