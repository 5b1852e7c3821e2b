"""Expert options of :class:`~pymc_sgs.SplitGibbs`, as small frozen objects.

``SplitGibbs`` takes a dozen keyword arguments; the knobs of its two optional moves live in
these objects (``exact=ExactOptions(sweeps=5)``, ``shift=ShiftOptions(relaxation=0)``), and
the storage and solver of the kernel in the back end
(``backend=LocalBackend(theta_solver="cg", dtype="float32")``). ``True`` stands for the
default object and ``False`` for the move switched off.

The keywords these replaced (``exact_sweeps``, ``shift_moves``, ``shift_relaxation``,
``sweep_every``, ``theta_solver``, ``dtype``, ``split``/``n_shards``, ``split_gaussian``,
``blocked``) still work for one release, with a ``FutureWarning``
(:func:`resolve_legacy`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .shift import validate_shift_moves, validate_shift_relaxation
from .user_warnings import warn_user
from .validate import check_count

__all__ = ["ExactOptions", "ShiftOptions", "resolve_move", "resolve_legacy", "LEGACY_KEYWORDS"]


@dataclass(frozen=True)
class ExactOptions:
    """``exact=True``: every draw is a Metropolis–Hastings step that targets ``pi`` exactly.

    Parameters
    ----------
    sweeps : int
        Over-relaxed SGS sweeps per proposal (more keep more of the over-relaxation's
        speed-up, at a lower acceptance rate).
    """

    sweeps: int = 10

    def __post_init__(self):
        check_count("ExactOptions(sweeps=...)", self.sweeps)


@dataclass(frozen=True)
class ShiftOptions:
    """``shift=True``: the joint Metropolis–Hastings move of ``(theta, z)`` (:mod:`pymc_sgs.shift`).

    Parameters
    ----------
    moves : "auto" or int
        Shift moves per sweep (1 to 20). ``"auto"`` tunes it with the acceptance during
        tuning: enough moves that all of them are rejected in at most 8% of the sweeps, at
        most 3 (:func:`pymc_sgs.shift.moves_for_acceptance`). Sampler stat ``shift_moves``.
    relaxation : float
        In ``[0, 1)``. Where the proposal is accepted at least 90% of the time during tuning
        and one move per sweep is allowed (``moves`` ``"auto"`` or 1), the sweep makes one
        over-relaxed move instead: theta is proposed at ``centre - relaxation (theta -
        centre)`` plus Laplace noise of the matching smaller scale, still reversible for the
        Laplace approximation and accepted by Metropolis–Hastings, so the target is
        unchanged. Successive draws become anti-correlated, which helps posterior means more
        than quantiles (measured by ``benchmarks/shift_mixing.py``). Sampler stat
        ``shift_beta``. ``0`` turns it off.
    sweep_every : "auto" or int
        Draws per z/theta sweep; the draws in between are made by the shift move alone (each
        leaves the split model invariant, so the target is unchanged). A sweep's job is then
        to refresh the residuals ``z - A theta`` the move conditions on, whose effect on theta
        is of order ``rho^2 U''`` of its variance. ``"auto"``: 4 after a tuning of at least
        100 draws (1 during it), the same schedule in every chain; 1 where the move cannot
        make the draws in between (no split term; a prior scale, sigma or likelihood
        parameter updated between draws). The importance weights and z-move stats come from
        the swept draws (``log_weight`` and ``z_accept`` are nan on the others). Sampler stat
        ``swept``. Values above 1 need ``exact=False``.
    """

    moves: object = "auto"
    relaxation: float = 0.3
    sweep_every: object = "auto"

    def __post_init__(self):
        validate_shift_moves(self.moves)
        validate_shift_relaxation(self.relaxation)
        check_count("ShiftOptions(sweep_every=...)", self.sweep_every, auto=True)


def resolve_move(name: str, value, cls):
    """``True`` -> ``cls()``, ``False`` -> None, an instance of ``cls`` as is; else ValueError."""
    if isinstance(value, cls):
        return value
    if isinstance(value, (bool, np.bool_)):
        return cls() if value else None
    raise ValueError(
        f"{name} must be True, False or a pymc_sgs.{cls.__name__}(...); received {value!r}."
    )


#: keywords of the former 22-parameter signature, accepted for one release
LEGACY_KEYWORDS = (
    "exact_sweeps",
    "shift_moves",
    "shift_relaxation",
    "sweep_every",
    "theta_solver",
    "dtype",
    "split",
    "n_shards",
    "split_gaussian",
    "blocked",
)

_WHERE = {
    "exact_sweeps": "exact=pymc_sgs.ExactOptions(sweeps=...)",
    "shift_moves": "shift=pymc_sgs.ShiftOptions(moves=...)",
    "shift_relaxation": "shift=pymc_sgs.ShiftOptions(relaxation=...)",
    "sweep_every": "shift=pymc_sgs.ShiftOptions(sweep_every=...)",
    "theta_solver": "backend=pymc_sgs.LocalBackend(theta_solver=...)",
    "dtype": "backend=pymc_sgs.LocalBackend(dtype=...)",
    "split": "pymc_sgs.BlockSplitGibbs(n_blocks=...) for split='shards'",
    "n_shards": "pymc_sgs.BlockSplitGibbs(n_blocks=...)",
    "split_gaussian": "nothing (it was a testing switch)",
    "blocked": "nothing (SplitGibbs always updates its variables as one block)",
}


def resolve_legacy(cls_name: str, legacy: dict) -> dict:
    """Check the former keywords in ``legacy``; warn once per call with their replacements.

    Returns them as a dict (unknown names raise ``TypeError``, as Python would).
    """
    unknown = sorted(set(legacy) - set(LEGACY_KEYWORDS))
    if unknown:
        raise TypeError(f"{cls_name}() got an unexpected keyword argument {unknown[0]!r}")
    if legacy:
        moved = "; ".join(f"{k} -> {_WHERE[k]}" for k in legacy)
        warn_user(
            f"{cls_name}: these keywords are deprecated and will be removed in the next "
            f"release: {moved}.",
            FutureWarning,
        )
    return dict(legacy)
