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
    step = pymc_sgs.SplitGibbs()  # rho="auto": certified bias, the same rho for every chain
    print(step)
    idata = pm.sample(step=step, chains=4, random_seed=1, progressbar=False)

print(az.summary(idata, var_names=["alpha", "beta"]))
stats = idata.sample_stats
print(f"rho (every chain): {np.unique(stats['rho'].values.round(4))}")
print(f"mean z-move acceptance: {float(stats['z_accept'].mean()):.3f}")

# bias certificate and correction: pi / pi_rho importance weights, PSIS (ArviZ)
corrected = pymc_sgs.psis_summary(idata, var_names=["alpha", "beta"])
print(corrected.round(3))
print(f"Pareto k-hat {corrected.attrs['khat']:.2f}, weight ESS {corrected.attrs['weight_ess']:.2f}")
