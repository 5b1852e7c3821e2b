"""Quickstart: Bayesian logistic regression sampled with SplitGibbs.

Run: python examples/quickstart.py
"""

import warnings

import arviz as az
import numpy as np
import pymc as pm

import pymc_sgs

warnings.filterwarnings("ignore", message=".*BLAS.*")  # PyTensor without a BLAS link

rng = np.random.default_rng(42)
n, d = 2000, 5
X = rng.normal(size=(n, d))
true_beta = np.array([1.0, -0.5, 0.25, 0.0, 0.8])
y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(0.3 + X @ true_beta))))

with pm.Model() as model:
    beta = pm.Normal("beta", 0.0, 2.5, shape=d)
    alpha = pm.Normal("alpha", 0.0, 5.0)
    pm.Bernoulli("y", logit_p=alpha + X @ beta, observed=y)
    # rho="auto" (the default): on this GLM no split (rho=0), the shift move samples the
    # posterior itself, exactly; the same choice in every chain
    step = pymc_sgs.SplitGibbs()
    print(step)
    idata = pm.sample(step=step, chains=4, random_seed=1, progressbar=False)

print(az.summary(idata, var_names=["alpha", "beta"]))
stats = idata.sample_stats
print(f"rho (every chain): {np.unique(stats['rho'].values.round(4))}")
print(f"mean shift-move acceptance: {float(stats['shift_accept'].mean()):.3f}")

# the split model with rho certified for bias_tol=0.1, and its correction: pi / pi_rho
# importance weights, PSIS (ArviZ)
with model:
    tuned = pm.sample(
        step=pymc_sgs.SplitGibbs(rho="tuned"), chains=4, random_seed=1, progressbar=False
    )
print(f"rho='tuned' (every chain): {np.unique(tuned.sample_stats['rho'].values.round(4))}")
corrected = pymc_sgs.psis_summary(tuned, var_names=["alpha", "beta"])
print(corrected.round(3))
print(f"Pareto k-hat {corrected.attrs['khat']:.2f}, weight ESS {corrected.attrs['weight_ess']:.2f}")
