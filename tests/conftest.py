import arviz as az

# arviz 0.23.4's numba path of mcse(method="sd") fails on numpy >= 2.4 (float() of a
# 1-element array); its pure-numpy path computes the same quantity.
az.Numba.disable_numba()
