"""kiln's optimizers against torch.optim on the same least-squares problem (float64).

Where Keras and PyTorch place epsilon differently the two rules are made to coincide by
setting epsilon to 0 on both sides (the gradients never vanish on this problem):

* Adam/AdamW: Keras folds the bias correction into the step size and adds epsilon to
  sqrt(v); torch adds epsilon to sqrt(v) / sqrt(1 - beta_2**t). Equal for epsilon = 0.
* RMSprop: Keras puts epsilon inside the square root, torch outside. Equal for epsilon = 0.
  torch's ``alpha`` is Keras's ``rho``.
* Adagrad: same (epsilon inside vs outside); torch's default initial accumulator is 0, so
  0.1 is passed explicitly.
* SGD momentum: Keras keeps ``v = m*v - lr*g`` and torch ``buf = m*buf + g``; with a
  constant learning rate the iterates are identical. Nesterov likewise.
* Adadelta (epsilon inside both square roots in both) and Adamax (with epsilon 0) need no
  adjustment beyond that.
"""

from __future__ import annotations

import numpy as np
import pytest
from optim_problem import C0, W0, A, B, f32, run_kiln

from kiln import optimizers as O

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def run_torch(make_opt, steps=20, clip=None):
    w = torch.tensor(W0, dtype=torch.float64, requires_grad=True)
    c = torch.tensor(C0, dtype=torch.float64, requires_grad=True)
    a = torch.tensor(A)
    b = torch.tensor(B)
    opt = make_opt([w, c])
    for _ in range(steps):
        opt.zero_grad()
        loss = 0.5 * ((a @ w + c - b) ** 2).sum()
        loss.backward()
        if clip is not None:
            clip([w, c])
        opt.step()
    return [w.detach().numpy(), c.detach().numpy()]


T = torch.optim
CASES = [
    ("sgd", lambda: O.SGD(0.01), lambda p: T.SGD(p, lr=f32(0.01))),
    ("sgd_momentum", lambda: O.SGD(0.01, momentum=0.9),
     lambda p: T.SGD(p, lr=f32(0.01), momentum=0.9)),
    ("sgd_nesterov", lambda: O.SGD(0.01, momentum=0.9, nesterov=True),
     lambda p: T.SGD(p, lr=f32(0.01), momentum=0.9, nesterov=True)),
    ("sgd_weight_decay", lambda: O.SGD(0.01, weight_decay=0.5),
     # decoupled decay w -= lr*wd*w on plain SGD equals torch's coupled L2 (g += wd*w)
     lambda p: T.SGD(p, lr=f32(0.01), weight_decay=0.5)),
    ("adam", lambda: O.Adam(0.05, epsilon=0.0), lambda p: T.Adam(p, lr=f32(0.05), eps=0.0)),
    ("adam_amsgrad", lambda: O.Adam(0.05, epsilon=0.0, amsgrad=True),
     lambda p: T.Adam(p, lr=f32(0.05), eps=0.0, amsgrad=True)),
    ("adamw", lambda: O.AdamW(0.05, weight_decay=0.2, epsilon=0.0),
     lambda p: T.AdamW(p, lr=f32(0.05), weight_decay=0.2, eps=0.0)),
    ("rmsprop", lambda: O.RMSprop(0.01, epsilon=0.0),
     lambda p: T.RMSprop(p, lr=f32(0.01), alpha=0.9, eps=0.0)),
    ("rmsprop_momentum", lambda: O.RMSprop(0.01, momentum=0.9, epsilon=0.0),
     lambda p: T.RMSprop(p, lr=f32(0.01), alpha=0.9, eps=0.0, momentum=0.9)),
    ("rmsprop_centered", lambda: O.RMSprop(0.01, centered=True, momentum=0.5, epsilon=0.0),
     lambda p: T.RMSprop(p, lr=f32(0.01), alpha=0.9, eps=0.0, centered=True, momentum=0.5)),
    ("adagrad", lambda: O.Adagrad(0.1, epsilon=0.0),
     lambda p: T.Adagrad(p, lr=f32(0.1), initial_accumulator_value=0.1, eps=0.0)),
    ("adadelta", lambda: O.Adadelta(1.0, rho=0.9, epsilon=1e-6),
     lambda p: T.Adadelta(p, lr=1.0, rho=0.9, eps=1e-6)),
    ("adamax", lambda: O.Adamax(0.05, epsilon=0.0), lambda p: T.Adamax(p, lr=f32(0.05), eps=0.0)),
]


@pytest.mark.parametrize("name,make_kiln,make_torch", CASES, ids=[c[0] for c in CASES])
def test_matches_torch(name, make_kiln, make_torch):
    got = run_kiln(make_kiln())
    want = run_torch(make_torch)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-12)


def test_clipvalue_matches_torch_clip_grad_value():
    got = run_kiln(O.SGD(0.01, momentum=0.9, clipvalue=0.5))
    want = run_torch(lambda p: T.SGD(p, lr=f32(0.01), momentum=0.9),
                     clip=lambda ps: torch.nn.utils.clip_grad_value_(ps, 0.5))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_global_clipnorm_matches_torch_clip_grad_norm():
    # torch scales by max_norm / (norm + 1e-6); the 1e-6 changes the result by ~1e-7
    # relative on this problem, inside the tolerance.
    got = run_kiln(O.Adam(0.05, epsilon=0.0, global_clipnorm=1.5))
    want = run_torch(lambda p: T.Adam(p, lr=f32(0.05), eps=0.0),
                     clip=lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1.5))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5)
