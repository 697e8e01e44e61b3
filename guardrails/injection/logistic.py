"""Training-time only: a sample-weighted, L2-regularised logistic regression over the hashed features, fitted with
L-BFGS (the design matrix is a scipy sparse matrix: scipy is a dev/training dependency; inference needs numpy alone).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guardrails.injection.features import NUM_BUCKETS, Features


@dataclass(frozen=True, slots=True)
class FitConfig:
    l2: float = 3e-3
    """Penalty per unit of total sample weight: with weights that average 1, the same value suits any data size."""
    max_iterations: int = 80


def design_matrix(rows: list[Features]):
    """CSR [len(rows), NUM_BUCKETS]; repeated buckets in a row add up (scipy sums duplicates)."""
    from scipy import sparse

    lengths = [r.char_buckets.size + r.word_buckets.size for r in rows]
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = np.concatenate([np.concatenate([r.char_buckets, r.word_buckets]) for r in rows]).astype(np.int64)
    data = np.concatenate(
        [
            np.concatenate([np.full(r.char_buckets.size, r.char_value), np.full(r.word_buckets.size, r.word_value)])
            for r in rows
        ]
    )
    matrix = sparse.csr_matrix((data, indices, indptr), shape=(len(rows), NUM_BUCKETS))
    matrix.sum_duplicates()
    return matrix


def fit(matrix, labels: np.ndarray, weights: np.ndarray, config: FitConfig = FitConfig()) -> tuple[np.ndarray, float]:
    """(weights [NUM_BUCKETS] float32, bias) minimising the weighted log loss plus the L2 penalty.

    Deterministic: L-BFGS from zeros with a fixed number of steps. Our own L-BFGS rather than scipy's L-BFGS-B: with
    2^18 parameters the bound-handling Fortran step of L-BFGS-B costs more than the loss itself.
    """
    # Only the buckets some training row uses: the others would stay at 0 anyway (their gradient is the L2 term
    # alone), and a small training set then optimises over a few thousand parameters instead of 2^18.
    used = np.unique(matrix.indices)
    matrix = matrix[:, used]
    transposed = matrix.T.tocsr()  # a CSR matvec for the gradient: faster than the CSC one matrix.T would use
    signs = np.where(labels == 1, 1.0, -1.0)
    penalty = config.l2 * weights.sum()

    def loss_and_grad(params: np.ndarray) -> tuple[float, np.ndarray]:
        coef, bias = params[:-1], params[-1]
        margins = signs * (matrix @ coef + bias)
        d_margin = -weights * signs * _sigmoid(-margins)  # derivative of log(1 + exp(-m)), stable for large |m|
        grad = np.empty_like(params)
        grad[:-1] = transposed @ d_margin + penalty * coef
        grad[-1] = d_margin.sum()
        return float(_dot(weights, np.logaddexp(0.0, -margins)) + 0.5 * penalty * _dot(coef, coef)), grad

    params = lbfgs(loss_and_grad, np.zeros(used.size + 1), config.max_iterations)
    coef = np.zeros(NUM_BUCKETS, np.float32)
    coef[used] = params[:-1]
    return coef, float(params[-1])


def lbfgs(
    loss_and_grad, start: np.ndarray, max_iterations: int, history: int = 10, grad_tolerance: float = 1e-6
) -> np.ndarray:
    """Minimise a smooth convex function: L-BFGS two-loop recursion with a backtracking (Armijo) line search."""
    params = start.copy()
    loss, grad = loss_and_grad(params)
    steps: list[tuple[np.ndarray, np.ndarray, float]] = []  # (s, y, 1 / y.s), newest last
    for _ in range(max_iterations):
        if _dot(grad, grad) <= grad_tolerance**2 * max(1.0, _dot(params, params)):
            break
        direction = -grad
        alphas = []
        for s, y, rho in reversed(steps):
            alpha = rho * (_dot(s, direction))
            direction -= alpha * y
            alphas.append(alpha)
        if steps:
            s, y, _ = steps[-1]
            direction *= _dot(s, y) / _dot(y, y)
        else:
            direction /= max(1.0, np.sqrt(_dot(direction, direction)))
        for (s, y, rho), alpha in zip(steps, reversed(alphas)):
            direction += (alpha - rho * _dot(y, direction)) * s
        slope = _dot(grad, direction)
        step = 1.0
        while True:
            candidate = params + step * direction
            new_loss, new_grad = loss_and_grad(candidate)
            if new_loss <= loss + 1e-4 * step * slope or step < 1e-8:
                break
            step *= 0.5
        s_new, y_new = candidate - params, new_grad - grad
        if _dot(s_new, y_new) > 1e-12:  # keep the curvature pairs that keep the Hessian estimate positive definite
            steps = [*steps[-(history - 1) :], (s_new, y_new, 1.0 / _dot(y_new, s_new))]
        params, loss, grad = candidate, new_loss, new_grad
    return params


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """A vector dot product without BLAS: a multi-threaded BLAS spins its threads on a loaded machine and makes one
    2^18-long dot ~50x slower than this single-threaded loop."""
    return float(np.einsum("i,i->", a, b))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))
