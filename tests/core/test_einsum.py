"""kiln.ops.einsum against np.einsum (forward, gradients by central finite differences in
float64, unknown dimensions, errors) and kiln.ops.dot_product_attention against a NumPy
reference (masks, causal, bias, grouped-query heads, a fully masked row). Compiled on the
default (CPU) backend."""

from __future__ import annotations

import numpy as np
import pytest
from fd_oracle import numeric_grad

import kiln
import kiln.ops as K

EQUATIONS = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),                       # implicit output
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("abc,cde->abde", [(2, 3, 4), (4, 5, 6)]),         # a multi-head projection
    ("abcd,cde->abe", [(2, 3, 4, 5), (4, 5, 6)]),      # the output projection
    ("btnh,bsnh->bnts", [(2, 3, 4, 5), (2, 6, 4, 5)]),
    ("bnts,bsnh->btnh", [(2, 4, 3, 6), (2, 6, 4, 5)]),
    ("aecd,abcd->acbe", [(2, 6, 4, 5), (2, 3, 4, 5)]),  # Keras MHA's dot-product equation
    ("i,j->ij", [(3,), (4,)]),                         # outer product
    ("bi,bj->bij", [(2, 3), (2, 4)]),                  # batched outer product
    ("ij->ji", [(2, 3)]),                              # transpose
    ("ijk->kij", [(2, 3, 4)]),
    ("ij->", [(2, 3)]),                                # sums
    ("ijk->j", [(2, 3, 4)]),
    ("ii->i", [(3, 3)]),                               # diagonal
    ("ii", [(3, 3)]),                                  # trace
    ("iij->j", [(3, 3, 2)]),
    ("ij,ij->", [(3, 4), (3, 4)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),                   # elementwise
    ("i,i", [(4,), (4,)]),
    ("ij,j->i", [(3, 4), (4,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),        # three operands
    ("ij,jk->ik", [(2, 1), (3, 4)]),                   # size-1 broadcasting (NumPy's rule)
    ("aij,bjk->abik", [(2, 3, 4), (5, 4, 2)]),
    ("ijk,jil->kl", [(2, 3, 4), (3, 2, 5)]),           # two summed labels, transposed
    ("abcd,dcbe->ae", [(2, 3, 4, 5), (5, 4, 3, 2)]),
    ("...ij,...jk->...ik", [(5, 1, 2, 3), (4, 3, 2)]),  # ellipsis with broadcasting
    ("...i,i->...", [(2, 3, 4), (4,)]),
    ("...i->...", [(2, 3, 4)]),
    ("i...,i...->...", [(2, 3, 5), (2, 1, 5)]),
    ("ij...,jk...->ik...", [(2, 3, 5), (3, 4, 5)]),
    ("...x,xy->...y", [(2, 3, 4), (4, 5)]),
    ("Ab,bC->AC", [(2, 3), (3, 4)]),                   # upper-case labels
]


def _data(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s) for s in shapes]


@pytest.mark.parametrize("equation,shapes", EQUATIONS)
def test_einsum_matches_numpy(equation, shapes):
    arrays = _data(shapes)
    phs = [kiln.placeholder(s, "float64") for s in shapes]
    out = K.einsum(equation, *phs)
    expected = np.einsum(equation, *arrays)
    assert out.shape == expected.shape
    got = kiln.function(phs, out)(*arrays)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)




GRAD_EQUATIONS = [e for e in EQUATIONS if e[0] not in ("ij,jk", "i,i", "ii")] + [
    ("ij,jk->ik", [(2, 3), (3, 4)])]


@pytest.mark.parametrize("equation,shapes", GRAD_EQUATIONS)
def test_einsum_gradient_matches_finite_differences(equation, shapes):
    arrays = _data(shapes, seed=1)
    phs = [kiln.placeholder(s, "float64") for s in shapes]
    out = K.einsum(equation, *phs)
    weights = np.random.default_rng(2).normal(size=out.shape)
    grads = kiln.grad(K.sum(out * weights), phs)
    analytic = kiln.function(phs, grads)(*arrays)
    for k, x in enumerate(arrays):
        def f():
            return float(np.sum(np.einsum(equation, *arrays) * weights))
        np.testing.assert_allclose(analytic[k], numeric_grad(f, x), rtol=1e-6, atol=1e-8,
                                   err_msg=f"{equation}: d/d operand {k}")


@pytest.mark.parametrize("equation,shapes", [
    ("abc,cde->abde", [(None, None, 4), (4, 5, 6)]),   # two unknown dims: no-reshape path
    ("abcd,cde->abe", [(None, None, 4, 5), (4, 5, 6)]),
    ("abcd,cde->abe", [(None, 3, 4, 5), (4, 5, 6)]),   # one unknown dim: one merged matmul
    ("btnh,bsnh->bnts", [(None, 3, 4, 5), (None, 6, 4, 5)]),
    ("bi,bj->bij", [(None, 3), (None, 4)]),
    ("bij,jk->bik", [(None, None, 3), (3, 4)]),
])
def test_einsum_with_unknown_dimensions(equation, shapes):
    concrete = [tuple(2 + k if d is None else d for k, d in enumerate(s)) for s in shapes]
    arrays = _data(concrete, seed=3)
    phs = [kiln.placeholder(s, "float64") for s in shapes]
    out = K.einsum(equation, *phs)
    expected = np.einsum(equation, *arrays)
    assert len(out.shape) == expected.ndim
    assert all(d is None or d == e for d, e in zip(out.shape, expected.shape))
    weights = np.random.default_rng(4).normal(size=expected.shape)
    grads = kiln.grad(K.sum(out * K.constant(weights)), phs)
    fn = kiln.function(phs, [out] + grads)
    got, *analytic = fn(*arrays)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    for k, x in enumerate(arrays):
        def f():
            return float(np.sum(np.einsum(equation, *arrays) * weights))
        np.testing.assert_allclose(analytic[k], numeric_grad(f, x), rtol=1e-6, atol=1e-8)


def test_einsum_float32_and_constants():
    rng = np.random.default_rng(5)
    x = kiln.placeholder((None, 4))
    w = rng.normal(size=(4, 3))           # a NumPy operand takes the tensor's dtype
    out = K.einsum("bi,io->bo", x, w)
    assert out.dtype == "float32"
    xv = rng.normal(size=(6, 4)).astype(np.float32)
    np.testing.assert_allclose(kiln.function([x], out)(xv), xv @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("equation,shapes,match", [
    ("ij,jk->ik", [(2, 3), (4, 5)], "label 'j' has size 3 in operand 0 and size 4"),
    ("ij,jk->il", [(2, 3), (3, 5)], "'l' appear in no input"),
    ("ijk,jk->ik", [(2, 3), (3, 5)], "operand 0 has rank 2"),
    ("ij->jj", [(2, 3)], "repeats a label"),
    ("i#,j->ij", [(2, 3), (3,)], "invalid character"),
    ("ij,jk->ik", [(2, 3)], "2 input term"),
    ("...ij->ij", [(4, 2, 3)], "no '...'"),
    ("ii->i", [(2, 3)], "label 'i' has size 2 in operand 0 and size 3"),
    ("ij->i->j", [(2, 3)], "more than one '->'"),
])
def test_einsum_errors_name_the_equation_and_shapes(equation, shapes, match):
    phs = [kiln.placeholder(s) for s in shapes]
    with pytest.raises(ValueError, match="einsum") as info:
        K.einsum(equation, *phs)
    assert match in str(info.value)
    assert repr(equation) in str(info.value)
    assert str(shapes[0]) in str(info.value)


# ---- dot_product_attention ---------------------------------------------------------------------
def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def ref_attention(q, k, v, bias=None, mask=None, scale=None, is_causal=False):
    n, kh = q.shape[2], k.shape[2]
    k = np.repeat(k, n // kh, axis=2)
    v = np.repeat(v, n // kh, axis=2)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    logits = np.einsum("btnh,bsnh->bnts", q, k) * scale
    if bias is not None:
        logits = logits + bias
    keep = np.ones(logits.shape, bool)
    if mask is not None:
        keep = keep & mask
    if is_causal:
        t, s = logits.shape[-2:]
        keep = keep & np.tril(np.ones((t, s), bool))
    logits = np.where(keep, logits, -0.7 * np.finfo(logits.dtype).max)
    return np.einsum("bnts,bsnh->btnh", _softmax(logits), v)


@pytest.mark.parametrize("case", ["plain", "scale", "bias", "mask", "causal", "mask+causal",
                                  "gqa"])
def test_dot_product_attention_matches_numpy(case):
    rng = np.random.default_rng(6)
    b, t, s, n, h = 2, 4, 5, 4, 3
    kh = 2 if case == "gqa" else n
    q = rng.normal(size=(b, t, n, h))
    k = rng.normal(size=(b, s, kh, h))
    v = rng.normal(size=(b, s, kh, h))
    kwargs: dict = {}
    if case == "scale":
        kwargs["scale"] = 0.3
    if case == "bias":
        kwargs["bias"] = rng.normal(size=(1, n, t, s))
    if "mask" in case:
        kwargs["mask"] = rng.uniform(size=(b, 1, t, s)) > 0.3
    if "causal" in case:
        kwargs["is_causal"] = True
        s = t
        k, v = k[:, :t], v[:, :t]
        if "mask" in kwargs:
            kwargs["mask"] = kwargs["mask"][..., :t]
    phs = [kiln.placeholder((None,) + x.shape[1:], "float64") for x in (q, k, v)]
    out = K.dot_product_attention(*phs, **kwargs)
    assert out.shape[1:] == (t, n, h)
    got = kiln.function(phs, out)(q, k, v)
    np.testing.assert_allclose(got, ref_attention(q, k, v, **kwargs), rtol=1e-10, atol=1e-12)


def test_dot_product_attention_fully_masked_row_is_finite_and_differentiable():
    rng = np.random.default_rng(7)
    q, k, v = (rng.normal(size=(1, 3, 2, 4)) for _ in range(3))
    mask = np.ones((1, 1, 3, 3), bool)
    mask[..., 1, :] = False                      # query 1 may attend nothing
    phs = [kiln.placeholder(x.shape, "float64") for x in (q, k, v)]
    out = K.dot_product_attention(*phs, mask=mask)
    grads = kiln.grad(K.sum(out * out), phs)
    got, *gs = kiln.function(phs, [out] + grads)(q, k, v)
    assert np.all(np.isfinite(got)) and all(np.all(np.isfinite(g)) for g in gs)
    np.testing.assert_allclose(got, ref_attention(q, k, v, mask=mask), rtol=1e-10)
    # a fully masked row is the uniform average of the values (as keras.ops / JAX)
    np.testing.assert_allclose(got[0, 1], v[0].mean(axis=0), rtol=1e-10)


def test_dot_product_attention_gradient_matches_finite_differences():
    rng = np.random.default_rng(8)
    arrays = [rng.normal(size=(1, 3, 2, 2)) for _ in range(3)]
    mask = rng.uniform(size=(1, 2, 3, 3)) > 0.3
    mask[..., 0] = True
    phs = [kiln.placeholder(x.shape, "float64") for x in arrays]
    out = K.dot_product_attention(*phs, mask=mask, is_causal=True)
    w = rng.normal(size=out.shape)
    grads = kiln.function(phs, kiln.grad(K.sum(out * w), phs))(*arrays)
    for g, x in zip(grads, arrays):
        def f():
            return float(np.sum(ref_attention(*arrays, mask=mask, is_causal=True) * w))
        np.testing.assert_allclose(g, numeric_grad(f, x), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shapes,kwargs,match", [
    ([(2, 3, 4), (2, 3, 4), (2, 3, 4)], {}, "must be 4-D"),
    ([(2, 3, 4, 5), (2, 3, 4, 6), (2, 3, 4, 6)], {}, "head sizes differ"),
    ([(2, 3, 4, 5), (2, 3, 3, 5), (2, 3, 3, 5)], {}, "multiple of the key/value heads"),
    ([(2, 3, 4, 5), (2, 6, 4, 5), (2, 7, 4, 5)], {}, "key and value lengths differ"),
    ([(2, 3, 4, 5), (2, 6, 4, 5), (2, 6, 4, 5)], {"mask": np.ones((2, 1, 3, 5), bool)},
     "mask of shape (2, 1, 3, 5)"),
    ([(2, 3, 4, 5), (2, 6, 4, 5), (2, 6, 4, 5)], {"bias": np.ones((4, 6))}, "bias of shape (4, 6)"),
])
def test_dot_product_attention_errors(shapes, kwargs, match):
    phs = [kiln.placeholder(s) for s in shapes]
    with pytest.raises(ValueError, match="dot_product_attention") as info:
        K.dot_product_attention(*phs, **kwargs)
    assert match in str(info.value)


def test_dot_product_attention_causal_needs_static_lengths():
    q = kiln.placeholder((None, None, 2, 3))
    with pytest.raises(ValueError, match="causal mask needs known"):
        K.dot_product_attention(q, q, q, is_causal=True)


def test_einsum_and_attention_run_on_the_cuda_backend():
    """Compositions of existing ops: the CUDA backend (the simulator unless told otherwise)
    runs them, gradients included, as the CPU backend does."""
    import importlib.util

    if importlib.util.find_spec("numba_cuda") is None:
        pytest.skip("numba-cuda is not installed")
    from kiln.core.backends.cuda import is_available

    if not is_available():
        pytest.skip("no CUDA device or simulator (set NUMBA_ENABLE_CUDASIM=1)")
    rng = np.random.default_rng(9)
    q = kiln.placeholder((None, 3, 2, 4))
    w = kiln.placeholder((4, 2, 3))
    outs = [K.einsum("btnh,hnk->btk", q, w), K.dot_product_attention(q, q, q, is_causal=True)]
    loss = K.sum(outs[0] * outs[0]) + K.sum(outs[1] * outs[1])
    outs += kiln.grad(loss, [q, w])
    feeds = [rng.normal(size=(2, 3, 2, 4)).astype(np.float32),
             rng.normal(size=(4, 2, 3)).astype(np.float32)]
    got = kiln.function([q, w], outs, backend="cuda")(*feeds)
    want = kiln.function([q, w], outs, backend="cpu")(*feeds)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
