"""Quickstart: Bayesian logistic regression sampled with SplitGibbs.

Run: python examples/quickstart.py
"""

import arviz as az
import numpy as np
import pymc as pm

import pymc_sgs

rng = np.random.default_rng(42)
n, d = 2000, 5
X = rng.normal(size=(n, d))
true_beta = np.array([1.0, -0.5, 0.25, 0.0, 0.8])
y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(0.3 + X @ true_beta))))

with pm.Model() as model:
    beta = pm.Normal("beta", 0.0, 2.5, shape=d)
    alpha = pm.Normal("alpha", 0.0, 5.0)
    pm.Bernoulli("y", logit_p=alpha + X @ beta, observed=y)
    step = pymc_sgs.SplitGibbs(rho=0.1)
    print(step)
    idata = pm.sample(step=step, chains=4, random_seed=1, progressbar=False)

print(az.summary(idata, var_names=["alpha", "beta"]))
print("mean z-proposals per draw:", float(idata.sample_stats["z_proposals"].mean()))
