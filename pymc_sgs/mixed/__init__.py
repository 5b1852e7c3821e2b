"""Mixed models: group-specific terms whose scales move together with the coefficients.

:mod:`~pymc_sgs.mixed.read` reads a PyMC/Bambi model into a
:class:`~pymc_sgs.mixed.problem.MixedProblem` (index and value columns per term);
:mod:`~pymc_sgs.mixed.precision` factors the coefficients' precision with that structure;
:mod:`~pymc_sgs.mixed.kernel` (linear mixed models, and the split model for a fixed rho) and
:mod:`~pymc_sgs.mixed.joint` (GLMMs) and :mod:`~pymc_sgs.mixed.polya_gamma` (logistic GLMMs
whose Laplace proposal fails) are the kernels; :mod:`~pymc_sgs.mixed.laplace` finds
the hyperparameters' mode; :mod:`~pymc_sgs.mixed.step` is the PyMC step that
``SplitGibbs(...)`` builds for such models. See ``docs/mixed_models.rst``.
"""
