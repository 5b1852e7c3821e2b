"""A joint move of (theta, z) along the coupling's invariant direction.

SGS mixes slowly at the small rho a certified bias needs: each sweep moves theta by about
``rho`` times its posterior spread, because ``z`` pins ``A theta`` to within ``rho``. The
coupling term ``|z - A theta - o|^2 / (2 rho^2)`` of the split model is unchanged by the joint
shift ``(theta, z) -> (theta + delta, z + A delta)`` (Jacobian 1), so given the residual
``r = z - A theta``, the split model's conditional of the shifted coefficients
``theta~ = theta + delta`` is

    p(theta~ | r)  ∝  exp(-V(theta~) - sum_i U_i(a_i^T theta~ + r_i)),

the posterior itself with every linear predictor offset by its residual ``r_i`` (a few rho at
most). This module updates ``theta~`` by a Metropolis–Hastings move that is reversible for
the Laplace approximation ``N(theta*, H^-1)`` of the posterior (preconditioned Crank–Nicolson,
``theta~' = theta* + beta (theta~ - theta*) + sqrt(1 - beta^2) L^-T eps``), accepted with the
ratio of the exact conditional to that Gaussian, and moves ``z`` with it. For large-n GLMs the
posterior is close to Gaussian, so with ``beta = 0`` (an independence proposal) nearly every
move is accepted and theta decorrelates in one step, whatever rho is. The reference Gaussian is
centred one Newton step from ``theta*`` towards the mode given the residuals
(:meth:`ShiftMove.centre`, from quantities the kernel keeps), moved on from that mode to the
first-order mean (:func:`laplace_mean_offset`: a skewed posterior's mean is not its mode),
and where the proposal is accepted
at least 90% of the time one over-relaxed move (``beta < 0``) per sweep makes successive draws
anti-correlated (:meth:`ShiftMove.tune`). The move leaves the
split model ``Pi_rho`` invariant, so the sweeps, the importance weights and the bias
certificate are unchanged; it is an extra block of the same Gibbs scan, in the spirit of the
interweaving and "marginal augmentation" moves for data-augmentation samplers.

Cost: one compiled pass over the data per move (``A delta`` and the change of the potentials,
two exponentials per row for the logit link).

References
----------
.. [1] Y. Yu, X.-L. Meng (2011). To center or not to center: that is not the question — an
   ancillarity-sufficiency interweaving strategy (ASIS) for boosting MCMC efficiency. JCGS
   20(3), 531–570.
.. [2] J. S. Liu, Y. N. Wu (1999). Parameter expansion for data augmentation. JASA 94,
   1264–1274.
.. [3] S. L. Cotter, G. O. Roberts, A. M. Stuart, D. White (2013). MCMC methods for
   functions: modifying old algorithms to make them faster. Statistical Science 28(3),
   424–446 (the preconditioned Crank–Nicolson proposal).
.. [5] T. Hesterberg (1995). Weighted average importance sampling and defensive mixture
   distributions. Technometrics 37(2), 185–194.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from .conditionals import triangular_solve
from .defensive import heavy_scale, log_mixture_density
from .rows import MoveDropped
from .validate import check_bool

__all__ = [
    "ShiftMove",
    "validate_shift",
    "validate_shift_moves",
    "validate_shift_relaxation",
    "moves_for_acceptance",
    "laplace_mean_offset",
]


def validate_shift(shift) -> bool:
    """``shift`` must be a bool."""
    return check_bool("shift", shift)


#: most moves per sweep that ``shift_moves="auto"`` chooses
MAX_AUTO_MOVES = 3
#: ``"auto"`` makes enough moves that all of them are rejected with at most this probability
ALL_REJECTED = 0.08


#: the Laplace proposal is accepted at least this often (mean since the last change of regime)
#: before a single over-relaxed move replaces several independent ones ...
RELAX_ENTER = 0.9
#: ... and the over-relaxed regime is left below this (hysteresis: over-relaxation itself lowers
#: the acceptance a little, which must not switch it off again; benchmarks/shift_mixing.py
#: measures the acceptance with and without it)
RELAX_LEAVE = 0.85


def validate_shift_relaxation(shift_relaxation) -> float:
    """``shift_relaxation`` must be a real number in ``[0, 1)``; returns it as a float."""
    if (
        isinstance(shift_relaxation, (bool, np.bool_))
        or not isinstance(shift_relaxation, (int, float, np.integer, np.floating))
        or not 0.0 <= float(shift_relaxation) < 1.0
    ):
        raise ValueError(
            "shift_relaxation must be a number in [0, 1) (the reflection of the shift "
            f"proposal through the posterior mode; 0 turns it off); received {shift_relaxation!r}."
        )
    return float(shift_relaxation)


def validate_shift_moves(shift_moves):
    """``shift_moves`` must be ``"auto"`` or an integer from 1 to 20; returns it."""
    if isinstance(shift_moves, str) and shift_moves == "auto":
        return shift_moves
    if (
        isinstance(shift_moves, (bool, np.bool_))
        or not isinstance(shift_moves, (int, np.integer))
        or not 1 <= shift_moves <= 20
    ):
        raise ValueError(
            f"shift_moves must be 'auto' or an integer from 1 to 20 (shift moves per sweep); "
            f"received {shift_moves!r}."
        )
    return int(shift_moves)


def laplace_mean_offset(kernel, mode, chol) -> np.ndarray:
    """First-order distance from the posterior's mode to its mean, ``E[theta] - theta*``.

    For a density ``exp(-Phi)`` with mode ``theta*``, Hessian ``H = L L^T`` and third
    derivatives ``T`` there, the mean is ``theta* - H^-1 (T : H^-1) / 2`` up to terms a factor
    ``1/n`` smaller (expand ``Phi`` to third order about the mode and take the mean under
    ``N(theta*, H^-1)``; [4]_). For a GLM, ``Phi = V + sum_i U_i(a_i^T theta + o_i)`` with a
    quadratic ``V``, ``T_klm = sum_i U_i^(3) a_ik a_il a_im``, so

        E[theta] - theta*  ~  -H^-1 sum_i U_i^(3)(eta_i) a_i (a_i^T H^-1 a_i) / 2,

    where ``a_i^T H^-1 a_i = |L^-1 a_i|^2``: one triangular solve per block of rows, the cost of
    forming ``A^T W A`` once. ``U^(3)`` is the family's own (``taylor_derivatives``) or a
    central difference of its ``U''``.

    Parameters
    ----------
    kernel : SplitGibbsKernel
    mode : ndarray (d,)
    chol : ndarray (d, d)
        Lower Cholesky factor of the Hessian at ``mode``.

    Returns
    -------
    ndarray (d,)

    References
    ----------
    .. [4] L. Tierney, R. E. Kass, J. B. Kadane (1989). Fully exponential Laplace
       approximations to expectations and variances of nonpositive functions. JASA 84,
       710-716.
    """
    return mean_offset_from_rhs(kernel.rows.mean_offset_rhs(mode, chol), chol)


def mean_offset_from_rhs(v, chol) -> np.ndarray:
    """``-H^-1 v / 2``; zero when not finite."""
    offset = -0.5 * scipy.linalg.cho_solve((chol, True), v, check_finite=False)
    # a non-finite third derivative (overflow at an extreme linear predictor) must not reach
    # the proposal: the centre is then the mode, as without the correction
    return offset if np.all(np.isfinite(offset)) else np.zeros(np.shape(v))


def moves_for_acceptance(accept: float) -> int:
    """Moves per sweep that leave every move rejected with probability <= ALL_REJECTED.

    ``ceil(log(ALL_REJECTED) / log(1 - accept))``, from 1 to :data:`MAX_AUTO_MOVES`: one move
    when the Laplace proposal is accepted more than 92% of the time, two at 72-92%, three
    below. A further move costs one pass over the data (less than a sweep:
    ``benchmarks/sweep_cost.py``), so it pays when the previous ones were often rejected
    (``docs/how_it_works.rst`` quotes the measured gain in ESS per draw and time).
    """
    if not accept < 1.0:
        return 1
    if accept <= 0.0:
        return MAX_AUTO_MOVES
    k = int(np.ceil(np.log(ALL_REJECTED) / np.log1p(-accept) - 1e-9))
    return int(min(max(k, 1), MAX_AUTO_MOVES))


@dataclass
class ShiftMove:
    """Preconditioned Crank–Nicolson move of ``(theta, z)`` along ``(delta, A delta)``.

    Parameters
    ----------
    kernel : SplitGibbsKernel
        Supplies the split terms and their current families, and the current prior and
        Gaussian-term scales (``kernel.theta_conditional``).
    mean : ndarray (d,)
        Centre of the reference Gaussian (the posterior mode).
    chol : ndarray (d, d)
        Lower Cholesky factor of its precision (the Hessian at the mode).
    beta : float
        Persistence in ``(-1, 1)``: 0 is an independence proposal, negative values reflect
        the chain through the mode (over-relaxation); tuned by :meth:`tune`.
    moves : int or "auto"
        Moves per call of :meth:`run`; ``"auto"`` starts at one and is tuned by
        :meth:`tune` (:func:`moves_for_acceptance`).
    relaxation : float
        In ``[0, 1)``: the ``-beta`` that :meth:`tune` uses when one move per sweep is
        made and the proposal is accepted often (see :meth:`tune`); 0 never over-relaxes.
    recenter : bool
        Centre each move's reference Gaussian at one Newton step from ``mean`` towards
        the mode of the conditional given the residuals (:meth:`centre`), instead of at
        ``mean``.
    mean_correction : bool
        Shift that centre from the mode to the first-order mean
        (:func:`laplace_mean_offset`, computed once): the posterior of a GLM is skewed, and
        in d dimensions the mode-to-mean distances add up, most on ill-conditioned designs
        (the acceptance with and without it on ``benchmarks/compare.py``'s data:
        ``docs/how_it_works.rst``).
    tail_weight : float
        In ``[0, 1)``: in the independence regime (``beta = 0``) the proposal is the
        defensive mixture ``(1 - w) N(centre, H^-1) + w t_nu(centre, H^-1)`` (Hesterberg 1995), whose
        Student-t component covers the heavier tail of a skewed posterior (few events,
        collinear designs), where a chain with the Gaussian alone sticks for long runs (its
        importance weight ``pi / q`` is unbounded there). 0 (default): the Gaussian alone.
        The regime's acceptance that decides over-relaxation (:meth:`tune`) counts only the
        Gaussian component's proposals, so a posterior close to its Laplace approximation is
        sampled as without the mixture once over-relaxed.
    tail_df : float
        Degrees of freedom ``nu`` of that Student-t component.
    """

    kernel: object
    mean: np.ndarray
    chol: np.ndarray
    beta: float = 0.0
    moves: object = "auto"
    relaxation: float = 0.0
    recenter: bool = True
    mean_correction: bool = True
    tail_weight: float = 0.0
    tail_df: float = 5.0
    #: acceptance probabilities of the current tuning window
    _window: list = None

    def __post_init__(self):
        if not 0.0 <= self.tail_weight < 1.0 or not self.tail_df > 0.0:
            raise ValueError(
                "tail_weight must be in [0, 1) and tail_df positive; received "
                f"tail_weight={self.tail_weight!r}, tail_df={self.tail_df!r}."
            )
        self._window = []
        self._gauss_window = []
        #: whether moves are recorded for :meth:`tune` (off after tuning: see :meth:`freeze`)
        self.tuning = True
        #: mean acceptance of the last completed tuning window (None before the first)
        self.window_accept = None
        # acceptance since the last change between the independent and over-relaxed regimes
        self._regime_accept = []
        self._adapt_moves = self.moves == "auto"
        self.moves = 1 if self._adapt_moves else int(self.moves)
        self.recentre(self.mean, self.chol)

    def __deepcopy__(self, memo):
        # PyMC deep-copies the step's per-chain state (sampling_state); the kernel and its
        # data belong to the step, not to the chain, so the copy shares them (a copy would
        # duplicate the design, and a Dask back end's handles cannot be copied at all)
        new = copy.copy(self)
        memo[id(self)] = new
        for name, value in vars(self).items():
            if name != "kernel":
                setattr(new, name, copy.deepcopy(value, memo))
        return new

    def recentre(self, mean, chol) -> None:
        """Set the reference Gaussian ``N(mean, (chol chol^T)^-1)``; its constants are
        recomputed when next needed. After construction, during tuning only: the proposal
        must stay fixed while draws are kept."""
        self.mean, self.chol = mean, chol
        self._chol_f = np.asfortranarray(chol, dtype=float)
        self._mean_curvature = self._offset_rhs = self._mean_offset = None

    def _setup(self) -> None:
        # the constants of the move, sums over the rows at the reference mean: one pass (one
        # round trip for rows held elsewhere), made once
        if self._mean_curvature is None:
            total, count, self._offset_rhs = self.kernel.rows.shift_constants(
                np.asarray(self.mean, dtype=float), self.chol, offset=self.mean_correction
            )
            self._mean_curvature = total / max(count, 1)

    def mean_curvature(self) -> float:
        """Mean of ``U_i''`` over the split rows at the reference mean (computed once)."""
        self._setup()
        return self._mean_curvature

    def _compute_mean_offset(self) -> np.ndarray:
        """The first-order mean offset (:func:`laplace_mean_offset`) at the reference mean."""
        self._setup()
        if self._offset_rhs is None:
            self._offset_rhs = self.kernel.rows.mean_offset_rhs(
                np.asarray(self.mean, dtype=float), self.chol
            )
        return mean_offset_from_rhs(self._offset_rhs, self.chol)

    def centre(self, state) -> np.ndarray:
        """Centre of the reference Gaussian for a move from ``state``.

        The move's target is the posterior with every linear predictor offset by its
        residual ``r_i = z_i - a_i^T theta - o_i``, whose mode is about
        ``mean - H^-1 A^T (h * r)``, ``h_i = U_i''`` at the mode (one Newton step; the
        residuals are a few rho, so the step is small but, summed over many rows and
        coefficients, it raises the acceptance where n/d is small; ``docs/how_it_works.rst``
        quotes measurements). With ``h_i``
        replaced by its mean ``h`` and a scalar rho, ``A^T r = rho^2 A^T (z - o) / rho^2 -
        A^T A theta`` costs two d x d products from quantities the kernel keeps (``A^T (z -
        o) / rho^2`` and ``A^T A``), no pass over the data. The residuals are unchanged by
        the move (``z + A delta - A (theta + delta) = z - A theta``), so the centre is the
        same for the move and its reverse and the proposal stays reversible for this
        Gaussian. Falls back to ``mean`` without a scalar rho or a kept ``A^T z``. With
        ``mean_correction`` the centre moves on from that mode to the first-order mean
        (:func:`laplace_mean_offset`), the same for every state.
        """
        if self._mean_offset is None:
            # a fixed function of the data (computed once), so the proposal stays reversible
            # for its Gaussian
            self._mean_offset = (
                self._compute_mean_offset()
                if self.mean_correction
                else np.zeros(np.shape(self.mean))
            )
        return self._residual_mode(state) + self._mean_offset

    def _residual_mode(self, state) -> np.ndarray:
        if not self.recenter or state.atz is None:
            return self.mean
        atr = self.kernel.theta_conditional.residual_projection(state.theta, state.atz)
        if atr is None:
            return self.mean
        g = self.mean_curvature() * atr
        return self.mean - triangular_solve(
            self._chol_f, triangular_solve(self._chol_f, g), trans=True
        )

    def _log_unsplit(self, theta):
        """``-V(theta)``: prior and Normal terms at their current values."""
        return -self.kernel.neg_log_posterior(include_split=False)(theta, need_derivatives=False)[0]

    def _log_reference(self, theta, centre):
        """Log density of the reference Gaussian ``N(centre, (L L^T)^-1)`` up to a constant."""
        u = self.chol.T @ (theta - centre)
        return -0.5 * float(u @ u)

    def _log_mixture(self, theta, centre):
        """Log density of the defensive mixture (``tail_weight``) up to ``log |L|``, which the
        two components share."""
        return log_mixture_density(
            self._log_reference(theta, centre), len(theta), self.tail_weight, self.tail_df
        )

    def _split_change(self, z, delta):
        """``sum_i [U_i(z_i + a_i^T delta) - U_i(z_i)]``, ``z + A delta`` and ``A delta``
        (the last two None where the rows keep them)."""
        return self.kernel.rows.shift_propose(z, delta)

    def _accepted(self, state, prop, delta, z_prop, a_delta):
        """The state after an accepted move."""
        atz = None
        if state.atz is not None:
            # before the commit, which may reuse A delta's buffer
            atz = state.atz + self.kernel.theta_conditional.split_rhs_change(delta, a_delta)
        z, z_mode = self.kernel.rows.shift_commit(prop, state.z_mode, z_prop, a_delta)
        return state._replace(theta=prop, z=z, z_mode=z_mode, log_weight=float("nan"), atz=atz)

    def step(self, state, rng: np.random.Generator):
        """One move from ``state`` (an :class:`~pymc_sgs.kernel.SGSState`).

        Returns ``(state, accept_prob)``. Uses ``d + 1`` random numbers (with ``tail_weight``
        in the independence regime one more, and a chi-square for a t draw). On acceptance the
        state's log weight is dropped (it depends on theta), ``A^T z`` is updated by
        ``A^T A delta / rho^2`` and the cached modes are shifted with z, as warm starts.

        Rows lost during the move (rows held elsewhere) drop it: acceptance 0, not recorded
        for tuning. The proposal's centre was computed from the ``A^T z`` that included the
        lost z, so finishing the move with a redrawn z would break its reversibility; the
        chain stays at its theta with the lost rows' z drawn there
        (:meth:`pymc_sgs.kernel.SplitGibbsKernel.dropped`).
        """
        rows = self.kernel.rows
        rows.track(state)
        try:
            with rows.dropping_moves():
                return self._move(state, rng)
        except MoveDropped:
            return self.kernel.dropped(state, state.log_weight), 0.0

    def _move(self, state, rng: np.random.Generator):
        theta = state.theta
        centre = self.centre(state)
        eps = rng.standard_normal(theta.shape[0])
        mix = self.tail_weight > 0.0 and self.beta == 0.0
        heavy = mix and rng.random() < self.tail_weight
        if heavy:
            eps = eps * heavy_scale(rng, self.tail_df)
        noise = triangular_solve(self._chol_f, eps, trans=True)
        prop = centre + self.beta * (theta - centre) + np.sqrt(1.0 - self.beta**2) * noise
        delta = prop - theta
        change, z_prop, a_delta = self._split_change(state.z, delta)
        if mix:
            ref = self._log_mixture(prop, centre) - self._log_mixture(theta, centre)
        else:
            ref = self._log_reference(prop, centre) - self._log_reference(theta, centre)
        log_ratio = self._log_unsplit(prop) - self._log_unsplit(theta) - change - ref
        accept_prob = float(np.exp(min(0.0, log_ratio))) if not np.isnan(log_ratio) else 0.0
        if rng.random() < accept_prob:
            state = self._accepted(state, prop, delta, z_prop, a_delta)
        if self.tuning:
            self._window.append(accept_prob)
            if not heavy:
                self._gauss_window.append(accept_prob)
        return state, accept_prob

    def run(self, state, rng: np.random.Generator):
        """:attr:`moves` moves from ``state``; returns ``(state, mean acceptance probability)``."""
        self.kernel.rows.begin_draw("move")
        total = 0.0
        for _ in range(self.moves):
            state, accept_prob = self.step(state, rng)
            total += accept_prob
        return state, total / self.moves

    #: moves per adaptation of beta (and, with ``moves="auto"``, of the number of moves)
    WINDOW = 50

    def freeze(self) -> None:
        """End of tuning: keep ``beta`` and the number of moves, record no more acceptances."""
        self.tuning = False
        self._window = []
        self._gauss_window = []
        self._regime_accept = []

    def tune(self) -> None:
        """Adapt ``beta`` (and an ``"auto"`` number of moves) from the acceptance of the last window.

        Called after every tuning draw; acts once :data:`WINDOW` moves have been made.

        An independence proposal (``beta = 0``) is best when it is accepted often; when the
        acceptance falls below 0.25 (a posterior far from its Laplace approximation) the
        proposal is made more local, and relaxed again above 0.6.

        When the proposal is accepted at least :data:`RELAX_ENTER` of the time (mean since
        the regime last changed) and one move per sweep is allowed (``"auto"`` or 1), one
        over-relaxed move ``beta = -relaxation`` replaces the independent ones: on a nearly
        Gaussian posterior successive draws are then anti-correlated, as in Adler's
        over-relaxation, so posterior means converge faster (bulk ESS per draw
        ``(1 - beta) / (1 + beta)`` times that of an independent draw for a Gaussian; the tail
        ESS gains less or nothing: ``benchmarks/results/shift_mixing.md``). Below
        :data:`RELAX_LEAVE` the independent regime returns. Two over-relaxed moves per sweep
        would undo each other, so the regime makes exactly one.
        """
        if len(self._window) < self.WINDOW:
            return
        acc = float(np.mean(self._window))
        self.window_accept = acc
        self._regime_accept.extend(self._gauss_window)
        self._window = []
        self._gauss_window = []
        regime_acc = float(np.mean(self._regime_accept))
        relaxed = self.beta < 0.0
        may_relax = self.relaxation > 0.0 and (self._adapt_moves or self.moves == 1)
        if may_relax and (regime_acc >= RELAX_ENTER or (relaxed and regime_acc >= RELAX_LEAVE)):
            if not relaxed:
                self._regime_accept = []
            self.beta = -self.relaxation
            self.moves = 1
            return
        if relaxed:
            # leave the over-relaxed regime: independent proposals again
            self._regime_accept = []
            self.beta = 0.0
        if self._adapt_moves:
            self.moves = moves_for_acceptance(acc)
        if acc < 0.25:
            self.beta = 1.0 - 0.5 * (1.0 - self.beta)
        elif acc > 0.6 and self.beta > 0.0:
            self.beta = max(0.0, 1.0 - 2.0 * (1.0 - self.beta))
        if self.beta > 0.0:
            # the regime's acceptance is that of independent proposals only
            self._regime_accept = []
        self.beta = min(self.beta, 0.999)
