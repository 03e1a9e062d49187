"""vkgate.reference's single ops against numpy written here (double precision)."""
import numpy as np
import pytest

import vkgate
from conftest import random_x


def test_linear_and_rms_norm(rng):
    x, w, b = random_x(rng, 3, 5), random_x(rng, 4, 5), random_x(rng, 4)
    np.testing.assert_allclose(vkgate.reference.linear(x, w, b), x.astype(float) @ w.T.astype(float) + b, rtol=1e-12)
    assert vkgate.reference.linear(x, w).dtype == np.float64
    g = random_x(rng, 5)
    xd = x.astype(float)
    normed = xd / np.sqrt((xd ** 2).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(vkgate.reference.rms_norm(x, g, 1e-5), normed * g, rtol=1e-12)
    np.testing.assert_allclose(vkgate.reference.rms_norm(x, g, 1e-5, "zero_centered"), normed * (1 + g.astype(float)),
                               rtol=1e-12)


def test_softmax_causal_and_mask(rng):
    s = random_x(rng, 1, 2, 3, 5)
    mask = np.zeros((1, 1, 3, 5), np.float32)
    mask[..., 0] = -np.inf
    got = vkgate.reference.softmax(s, scale=0.5, causal=True, mask=mask)
    z = 0.5 * s.astype(float) + mask
    z = np.where(np.arange(5)[None, :] > np.arange(3)[:, None] + 2, -np.inf, z)  # query t sees keys <= 2 + t
    e = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-12, atol=1e-300)


def test_rope_and_attention(rng):
    x = random_x(rng, 1, 3, 2, 4)
    got = vkgate.reference.rope(x, rotary_dim=4, theta=100.0, pos0=2)
    pos = np.arange(2, 5, dtype=float)[:, None]
    ang = pos * 100.0 ** (-np.arange(0, 4, 2) / 4)  # [T, 2]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[0, ..., :2].astype(float), x[0, ..., 2:].astype(float)
    want = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)
    np.testing.assert_allclose(got[0], want, rtol=1e-12, atol=1e-15)
    q, k, v = random_x(rng, 1, 4, 2, 3), random_x(rng, 1, 2, 2, 3), random_x(rng, 1, 2, 2, 3)
    out = vkgate.reference.attention(q, k, v, scale=0.3, causal=False)
    kk, vv = np.repeat(k, 2, axis=1).astype(float), np.repeat(v, 2, axis=1).astype(float)
    sc = 0.3 * q.astype(float) @ kk.transpose(0, 1, 3, 2)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(out, (p @ vv).transpose(0, 2, 1, 3), rtol=1e-12)


@pytest.mark.parametrize("activation,combine", [("sigmoid", "multiply"), ("silu", "add")])
def test_gate_and_compare(rng, activation, combine):
    y, g = random_x(rng, 3, 8), random_x(rng, 3, 2)
    got = vkgate.reference.gate(y, g, heads=2, gate_width=1, activation=activation, combine=combine)
    gd = g.astype(float)
    sig = 1 / (1 + np.exp(-gd))
    act = sig if activation == "sigmoid" else gd * sig
    s = np.repeat(act, 4, axis=1)
    want = y * s if combine == "multiply" else y + s
    np.testing.assert_allclose(got, want, rtol=1e-12)
    d = vkgate.reference.compare(want.astype(np.float32), want)
    assert d["nmse"] < 1e-13 and d["first_bad"] == -1
    bad = want.astype(np.float32)
    bad.flat[5] = np.nan
    assert vkgate.reference.compare(bad, want)["first_bad"] == 5


def test_mlp(rng):
    x = rng.standard_normal((2, 6))
    gw, uw, dw = random_x(rng, 4, 6), random_x(rng, 4, 6), random_x(rng, 6, 4)
    got = vkgate.reference.mlp(x, "silu", gw, uw, dw)
    a = x @ gw.T.astype(float)
    want = ((a / (1 + np.exp(-a))) * (x @ uw.T.astype(float))) @ dw.T.astype(float)
    np.testing.assert_allclose(got, want, rtol=1e-12)
