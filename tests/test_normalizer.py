"""RunningNormalizer keeps exact running statistics and normalizes by them.

Proves that after updates with several uneven batches (of different sizes and
leading shapes, including a one-row batch and an empty batch) the count, mean and
population variance equal numpy's on the concatenated data; that ``normalize``
is (x - mean) / sqrt(var + eps) clipped to [-clip, clip] (no clip when 0); and
that the state (``state_dict`` and ``state_arrays``) round-trips into a fresh
normalizer that then behaves identically, including under further updates.
"""

from __future__ import annotations

import numpy as np
import torch

from alf_async.algorithms.normalizer import RunningNormalizer

D = 3


def _batches(seed: int = 0):
    rng = np.random.default_rng(seed)
    scale = np.array([1.0, 10.0, 0.01])
    offset = np.array([5.0, -300.0, 1e3])
    shapes = [(1, D), (7, D), (0, D), (2, 5, D), (50, D), (3, D)]
    return [rng.normal(size=s) * scale + offset for s in shapes]


def _filled(batches, **kwargs) -> RunningNormalizer:
    norm = RunningNormalizer(D, **kwargs)
    for b in batches:
        norm.update(b)
    return norm


def test_fresh_normalizer_state():
    norm = RunningNormalizer(D)
    assert norm.count == 0
    np.testing.assert_array_equal(norm.mean, np.zeros(D))
    np.testing.assert_array_equal(norm.var, np.ones(D))


def test_statistics_equal_numpy_over_uneven_batches():
    batches = _batches()
    everything = np.concatenate([b.reshape(-1, D) for b in batches])
    norm = _filled(batches)
    assert norm.count == everything.shape[0] == 1 + 7 + 10 + 50 + 3
    np.testing.assert_allclose(norm.mean, everything.mean(axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(norm.var, everything.var(axis=0), rtol=1e-10)


def test_statistics_after_each_batch_equal_numpy_prefix():
    batches = [b for b in _batches(1) if b.size]
    norm = RunningNormalizer(D)
    seen = []
    for b in batches:
        norm.update(b)
        seen.append(b.reshape(-1, D))
        prefix = np.concatenate(seen)
        np.testing.assert_allclose(norm.mean, prefix.mean(axis=0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(norm.var, prefix.var(axis=0), rtol=1e-10, atol=1e-300)


def test_batch_order_does_not_matter():
    batches = _batches(2)
    a = _filled(batches)
    b = _filled(batches[::-1])
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-12)
    np.testing.assert_allclose(a.var, b.var, rtol=1e-10)


def test_normalize_matches_formula_without_clip():
    batches = _batches(3)
    everything = np.concatenate([b.reshape(-1, D) for b in batches])
    norm = _filled(batches, clip=0.0, epsilon=1e-4)
    x = np.random.default_rng(4).normal(size=(6, D)) * [3.0, 50.0, 0.1] + [5, -300, 1e3]
    expected = (x - everything.mean(0)) / np.sqrt(everything.var(0) + 1e-4)
    out = norm.normalize(torch.tensor(x, dtype=torch.float64))
    assert out.dtype == torch.float64 and out.shape == (6, D)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-9)


def test_normalize_float32_inputs():
    """float32 inputs (as the networks use) give float32 outputs of the same values."""
    data = np.random.default_rng(8).normal(size=(40, D)) * [1.0, 4.0, 0.5] + [2.0, -1.0, 0.0]
    norm = _filled([data[:13], data[13:]], clip=0.0)
    x = np.random.default_rng(9).normal(size=(6, D))
    expected = (x - data.mean(0)) / np.sqrt(data.var(0) + 1e-8)
    out32 = norm.normalize(torch.tensor(x, dtype=torch.float32))
    assert out32.dtype == torch.float32
    np.testing.assert_allclose(out32.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_normalize_clips_and_accepts_leading_dims():
    norm = RunningNormalizer(2, clip=2.0, epsilon=0.0)
    norm.update(np.array([[0.0, 10.0], [2.0, 30.0]]))  # mean (1, 20), std (1, 10)
    x = torch.tensor([[[1.0, 20.0], [2.5, 5.0]], [[-9.0, 100.0], [0.0, 25.0]]])
    expected = torch.tensor([[[0.0, 0.0], [1.5, -1.5]], [[-2.0, 2.0], [-1.0, 0.5]]])
    torch.testing.assert_close(norm.normalize(x), expected)


def test_state_round_trip_through_state_dict_and_arrays():
    batches = _batches(5)
    norm = _filled(batches[:4])
    for save, load in ((lambda n: n.state_dict(), "load_state_dict"),
                       (lambda n: n.state_arrays(), "load_state_arrays")):
        fresh = RunningNormalizer(D)
        getattr(fresh, load)(save(norm))
        assert fresh.count == norm.count
        np.testing.assert_array_equal(fresh.mean, norm.mean)
        np.testing.assert_array_equal(fresh.var, norm.var)
        x = torch.randn(5, D, dtype=torch.float64)
        torch.testing.assert_close(fresh.normalize(x), norm.normalize(x), rtol=0, atol=0)
        # Continuing to update both keeps them identical.
        twin = RunningNormalizer(D)
        getattr(twin, load)(save(norm))
        twin.update(batches[4])
        reference = _filled(batches[:5])
        np.testing.assert_allclose(twin.mean, reference.mean, rtol=1e-12)
        np.testing.assert_allclose(twin.var, reference.var, rtol=1e-10)


def test_state_is_a_copy_not_a_view():
    norm = _filled(_batches(6)[:2])
    state = norm.state_arrays()
    saved_mean = state["mean"].copy()
    norm.update(np.full((4, D), 1e6))
    np.testing.assert_array_equal(state["mean"], saved_mean)


def test_normalize_follows_every_change_of_the_statistics():
    """normalize() caches its mean/std tensors; updates and loads must refresh them."""
    rng = np.random.default_rng(5)
    norm = RunningNormalizer(3, clip=0.0)
    x = torch.tensor(rng.normal(size=(4, 3)), dtype=torch.float64)
    data = []
    for scale in (1.0, 10.0):
        batch = rng.normal(2.0, scale, size=(50, 3))
        data.append(batch)
        norm.update(batch)
        seen = np.concatenate(data)
        expected = (x.numpy() - seen.mean(0)) / np.sqrt(seen.var(0) + norm.epsilon)
        np.testing.assert_allclose(norm.normalize(x).numpy(), expected, rtol=1e-12)
    other = RunningNormalizer(3, clip=0.0)
    other.update(rng.normal(-5.0, 0.1, size=(20, 3)))
    norm.load_state_arrays(other.state_arrays())
    torch.testing.assert_close(norm.normalize(x), other.normalize(x), rtol=0, atol=0)
