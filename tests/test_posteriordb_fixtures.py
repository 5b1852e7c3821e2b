"""Fast sanity checks of the posteriordb fixtures (no sampling)."""

import numpy as np
import pytest

from .posteriordb_cases import CASES, _dogs_design, build_model, load_data, load_reference

# (n observations, d regression coefficients incl. intercept), from the
# posteriordb extraction README.
SIZES = {
    "dogs-dogs": (775, 3),
    "nes1992-nes": (1350, 9),
    "kidiq-kidscore_interaction": (434, 4),
    "kilpisjarvi_mod-kilpisjarvi": (62, 2),
    "sblrc-blr": (100, 5),
}


def test_cases_are_the_sized_ones():
    assert set(CASES) == set(SIZES)


@pytest.mark.parametrize("case", CASES)
def test_reference_loads(case):
    ref = load_reference(case)
    assert ref
    for name, (mean, sd) in ref.items():
        assert np.isfinite(mean), name
        assert np.isfinite(sd) and sd > 0, name


def test_unknown_case_raises():
    with pytest.raises(ValueError, match="unknown posteriordb case"):
        load_reference("eight_schools-eight_schools_noncentered")


@pytest.mark.parametrize("case", CASES)
def test_mapping_covers_reference_and_free_rvs(case):
    model, mapping = build_model(case)
    assert set(mapping) == set(load_reference(case))
    free = {rv.name: rv for rv in model.free_RVs}
    covered = {name: set() for name in free}
    for var, idx in mapping.values():
        assert var in free, var
        shape = free[var].type.shape
        if idx is None:
            assert shape == ()
        else:
            assert len(shape) == 1 and 0 <= idx < shape[0]
        covered[var].add(idx)
    # every free RV element is a reference parameter, and nothing else is free
    for name, rv in free.items():
        shape = rv.type.shape
        expected = {None} if shape == () else set(range(shape[0]))
        assert covered[name] == expected, name


@pytest.mark.parametrize("case", CASES)
def test_sizes_match_readme(case):
    n, d = SIZES[case]
    model, _ = build_model(case)
    assert [rv.name for rv in model.observed_RVs] == ["y"]
    y = model.rvs_to_values[model["y"]].eval()
    assert y.shape == (n,)
    if case == "kilpisjarvi_mod-kilpisjarvi":
        n_coef = sum(model[name].type.shape == () for name in ("alpha", "beta"))
    else:
        n_coef = model["beta"].type.shape[0]
    assert n_coef == d


def _reference_point(model, mapping, ref):
    """Point (in value-variable space) with every parameter at its reference mean."""
    values = {rv.name: np.zeros(rv.type.shape) for rv in model.free_RVs}
    for name, (var, idx) in mapping.items():
        if idx is None:
            values[var] = np.asarray(ref[name][0])
        else:
            values[var][idx] = ref[name][0]
    point = {}
    for rv in model.free_RVs:
        value_var = model.rvs_to_values[rv]
        transform = model.rvs_to_transforms[rv]
        val = values[rv.name]
        if transform is not None:
            val = transform.forward(val, *rv.owner.inputs).eval()
        point[value_var.name] = np.asarray(val, dtype=value_var.dtype)
    return point


@pytest.mark.parametrize("case", CASES)
def test_logp_finite_at_reference_means(case):
    model, mapping = build_model(case)
    point = _reference_point(model, mapping, load_reference(case))
    logp = model.compile_logp()(point)
    assert np.isfinite(logp)


def test_dogs_design_matches_stan_loop():
    y = np.asarray(load_data("dogs-dogs")["y"])
    assert y.shape == (31, 25)
    n_avoid = np.zeros(y.shape)
    n_shock = np.zeros(y.shape)
    for j in range(y.shape[0]):
        for t in range(1, y.shape[1]):
            n_avoid[j, t] = n_avoid[j, t - 1] + 1 - y[j, t - 1]
            n_shock[j, t] = n_shock[j, t - 1] + y[j, t - 1]
    X = _dogs_design(y)
    np.testing.assert_array_equal(X[:, 0], 1.0)
    np.testing.assert_array_equal(X[:, 1], n_avoid.ravel())
    np.testing.assert_array_equal(X[:, 2], n_shock.ravel())
