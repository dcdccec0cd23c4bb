"""JaSMin math against independent truth: exact eigenvalues, a plain Python loop, gradcheck.

docs/science.md §1.1-1.2; paper Thm 4 / Cor 1 and eqs. 8-9.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lipsweep.regularizers import JASMIN_EPS, g_k, jasmin_penalty, jasmin_penalty_from_qk
from lipsweep.regularizers._ranked_softmax import ranked_softmax_probs
from lipsweep.regularizers.jasmin import _log_ratio, jasmin_ranks
from lipsweep.vit.attention import attention_probs
from lipsweep.vit.precision import bf16_autocast

TOL = 1e-12


def softmax_jacobian_singular_values(p: torch.Tensor) -> torch.Tensor:
    """sigma_1 >= ... >= sigma_N of M(p) = diag(p) - p p^T (PSD), exactly, in float64."""
    p = p.double()
    m = torch.diag(p) - torch.outer(p, p)
    return torch.linalg.eigvalsh(m).flip(0).clamp_min(0.0)


def assert_interlacing(p: torch.Tensor) -> None:
    """p_(k) >= g_k >= sigma_k >= p_(k+1) for k = 1..N-1, and sigma_N = 0 (Thm 4)."""
    p = p.double()
    n = p.numel()
    ps = p.sort(descending=True).values
    sig = softmax_jacobian_singular_values(p)
    g = g_k(p, list(range(1, n)))
    for kk in range(1, n):
        chain = [ps[kk - 1], g[kk - 1], sig[kk - 1], ps[kk]]
        for hi, lo in zip(chain, chain[1:]):
            assert hi >= lo - TOL, (kk, [float(c) for c in chain], p.tolist())
    assert abs(float(sig[-1])) < TOL
    assert float(sig[0]) <= float(g[0]) + TOL <= 0.5 + 2 * TOL


# ----------------------------------------------------------------------------- g_k, Thm 4


@pytest.mark.parametrize("n", [2, 3, 5, 17, 65])
@pytest.mark.parametrize("alpha", [0.02, 0.3, 1.0, 5.0, 100.0])
def test_interlacing_on_dirichlet_vectors(n, alpha):
    torch.manual_seed(n * 1000 + int(alpha * 100))
    dist = torch.distributions.Dirichlet(torch.full((n,), alpha, dtype=torch.float64))
    for p in dist.sample((20,)):
        assert_interlacing(p)


@pytest.mark.parametrize("n", [2, 4, 33])
@pytest.mark.parametrize("delta", [0.0, 1e-12, 1e-6, 1e-2])
def test_interlacing_near_one_hot_and_uniform(n, delta):
    p = torch.full((n,), delta / (n - 1), dtype=torch.float64)
    p[n // 2] = 1 - delta
    assert_interlacing(p)
    assert_interlacing(torch.full((n,), 1.0 / n, dtype=torch.float64))
    if delta == 0.0:  # exactly one-hot: g_1 = 0
        assert float(g_k(p, 1)) == 0.0


def test_uniform_and_two_point_values():
    n = 10
    uniform = torch.full((n,), 1.0 / n, dtype=torch.float64)
    assert float(g_k(uniform, 1)) == pytest.approx(1.0 / n, abs=1e-15)
    two = torch.zeros(n, dtype=torch.float64)
    two[[3, 7]] = 0.5
    assert float(g_k(two, 1)) == 0.5
    assert float(softmax_jacobian_singular_values(two)[0]) == pytest.approx(0.5, abs=1e-14)
    assert_interlacing(two)


def test_interlacing_with_ties():
    for p in ([0.3, 0.3, 0.2, 0.2], [0.25, 0.25, 0.25, 0.25, 0.0], [0.4, 0.2, 0.2, 0.2]):
        assert_interlacing(torch.tensor(p, dtype=torch.float64))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=2, max_size=12).filter(
        lambda w: sum(w) > 1e-6
    )
)
def test_interlacing_on_arbitrary_simplex_points(w):
    p = torch.tensor(w, dtype=torch.float64)
    assert_interlacing(p / p.sum())


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_adversarial_search_cannot_break_the_bound(n):
    """Gradient ascent on sigma_1(M) - g_1 and on g_1 - 1/2 over softmax logits."""
    torch.manual_seed(n)
    z = (torch.randn(32, n, dtype=torch.float64) * 3).requires_grad_()
    opt = torch.optim.Adam([z], lr=0.1)
    worst_gap, worst_half = -math.inf, -math.inf
    for _ in range(60):
        p = z.softmax(-1)
        m = torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
        sigma1 = torch.linalg.eigvalsh(m)[:, -1]
        g1 = g_k(p, 1)
        gap, half = sigma1 - g1, g1 - 0.5
        worst_gap = max(worst_gap, float(gap.detach().max()))
        worst_half = max(worst_half, float(half.detach().max()))
        opt.zero_grad()
        (-(gap.sum() + half.sum())).backward()
        opt.step()
    assert worst_gap <= TOL and worst_half <= TOL
    # random perturbation hunting around the tight two-point vector
    base = torch.zeros(n, dtype=torch.float64)
    base[:2] = 0.5
    for scale in (1e-1, 1e-3, 1e-6):
        p = (base + scale * torch.rand(2000, n, dtype=torch.float64)).abs()
        p = p / p.sum(-1, keepdim=True)
        m = torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
        sigma1 = torch.linalg.eigvalsh(m)[:, -1]
        g1 = g_k(p, 1)
        assert bool((sigma1 <= g1 + TOL).all()) and bool((g1 <= 0.5 + TOL).all())


def test_g_k_sequence_and_validation():
    p = torch.tensor([[0.1, 0.5, 0.4], [0.2, 0.3, 0.5]], dtype=torch.float64)
    both = g_k(p, [1, 2])
    assert both.shape == (2, 2)
    assert torch.allclose(both[:, 0], g_k(p, 1)) and torch.allclose(both[:, 1], g_k(p, 2))
    assert float(g_k(p, 1)[0]) == pytest.approx(0.5 * (1 - 0.5 + 0.4))
    assert float(g_k(p, 2)[0]) == pytest.approx(0.4 * (1 - 0.4 + 0.1))
    for bad in (0, 3, -1, True, 1.5):
        with pytest.raises(ValueError, match="k"):
            g_k(p, bad)


# ------------------------------------------------------------------ jasmin_penalty vs a loop


def loop_penalty(maps: list[torch.Tensor], k: int, aggregation: str) -> float:
    """Paper eqs. 8-9 written as plain loops over layers, samples, heads and rows."""
    eps = 1e-6
    total = 0.0
    for a in maps:
        b_n, h_n, n_q, _ = a.shape
        for h in range(h_n):
            per_sample = []
            for b in range(b_n):
                vals = []
                for i in range(n_q):
                    s = sorted(a[b, h, i].tolist(), reverse=True)
                    g1 = s[0] * (1 - s[0] + s[1])
                    v = math.log(g1 + eps)
                    if k >= 2:
                        gk = s[k - 1] * (1 - s[k - 1] + s[k])
                        v -= math.log(gk + eps)
                    vals.append(v)
                per_sample.append(max(vals) if aggregation == "max" else sum(vals) / len(vals))
            total += sum(per_sample) / b_n
    return total


def random_maps(n: int = 37, layers: int = 2, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(2, 3, n, n, generator=g, dtype=torch.float64) * s).softmax(-1)
        for s in (1.0, 4.0)[:layers]
    ]


def test_eps_is_the_documented_floor():
    assert JASMIN_EPS == 1e-6


@pytest.mark.parametrize("k", [0, 2, 10, 30])
@pytest.mark.parametrize("aggregation", ["mean", "max"])
def test_jasmin_penalty_matches_python_loop(k, aggregation):
    maps = random_maps()
    expected = loop_penalty(maps, k, aggregation)
    assert float(jasmin_penalty(maps, k, aggregation)) == pytest.approx(expected, rel=1e-12)
    single = float(jasmin_penalty(maps[0], k, aggregation))
    assert single == pytest.approx(loop_penalty(maps[:1], k, aggregation), rel=1e-12)


def test_jasmin_penalty_validation():
    maps = random_maps(n=5, layers=1)
    with pytest.raises(ValueError, match="k"):
        jasmin_penalty(maps, 1, "mean")
    with pytest.raises(ValueError, match="k"):
        jasmin_penalty(maps, 5, "mean")
    with pytest.raises(ValueError, match="aggregation"):
        jasmin_penalty(maps, 0, "median")
    with pytest.raises(ValueError, match="B, H, N, N"):
        jasmin_penalty(maps[0][0], 0, "mean")
    with pytest.raises(ValueError):
        jasmin_penalty([], 0, "mean")


# ------------------------------------------------------------- fast q/k path and gradients


def qk(b=2, h=3, n=33, d=8, seed=0, dtype=torch.float64, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(b, h, n, d, generator=g, dtype=dtype) * spread).requires_grad_()
    k = torch.randn(b, h, n, d, generator=g, dtype=dtype).requires_grad_()
    return q, k


@pytest.mark.parametrize("k", [0, 2, 10, 30])
@pytest.mark.parametrize("aggregation", ["mean", "max"])
def test_fast_path_equals_materialised_maps_float64(k, aggregation):
    q, kk = qk(spread=2.0)
    ref = jasmin_penalty([attention_probs(q, kk, 0.4)], k, aggregation)
    fast = jasmin_penalty_from_qk([(q, kk, 0.4)], k, aggregation)
    assert fast.item() == pytest.approx(ref.item(), rel=1e-12, abs=1e-12)
    g_ref = torch.autograd.grad(ref, (q, kk))
    g_fast = torch.autograd.grad(fast, (q, kk))
    for a, b in zip(g_ref, g_fast):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("k,aggregation", [(0, "mean"), (10, "mean"), (0, "max"), (30, "max")])
def test_fast_path_float32_cpu_selection_matches_float64(k, aggregation):
    """The float32 CPU path (int-key selection, workspace) against float64 topk."""
    q64, k64 = qk(b=4, h=4, n=65, d=16, seed=3, spread=2.0)
    q32 = q64.detach().float().requires_grad_()
    k32 = k64.detach().float().requires_grad_()
    ref = jasmin_penalty_from_qk([(q64, k64, 0.25)], k, aggregation)
    got = jasmin_penalty_from_qk([(q32, k32, 0.25)], k, aggregation)
    assert got.item() == pytest.approx(ref.item(), rel=1e-5)
    for a, b in zip(torch.autograd.grad(ref, (q64, k64)), torch.autograd.grad(got, (q32, k32))):
        torch.testing.assert_close(b.double(), a, rtol=1e-3, atol=1e-3 * float(a.abs().max()))


def test_fast_path_over_layers_of_different_shapes():
    """Several layers: stacked (same shapes) and summed (different shapes) paths."""
    a, b, c = qk(n=33, seed=1), qk(n=33, seed=2), qk(n=20, seed=3)
    for layers in ((a, b), (a, c)):
        recs = [(q, kk, 0.3) for q, kk in layers]
        ref = jasmin_penalty([attention_probs(q, kk, 0.3) for q, kk in layers], 2, "mean")
        fast = jasmin_penalty_from_qk(recs, 2, "mean")
        assert fast.item() == pytest.approx(ref.item(), rel=1e-12)


def test_ranked_probs_are_the_sorted_softmax_rows():
    q, kk = qk(n=20, dtype=torch.float32, spread=3.0)
    ranks = (0, 1, 2, 7, 19)
    got = ranked_softmax_probs(q, kk, 0.5, ranks)
    want = attention_probs(q, kk, 0.5).sort(-1, descending=True).values[..., list(ranks)]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="ranks"):
        ranked_softmax_probs(q, kk, 0.5, (20,))


def test_gradcheck_public_function():
    g = torch.Generator().manual_seed(1)
    for k, agg in ((0, "mean"), (2, "max"), (3, "mean")):
        logits = torch.randn(2, 2, 5, 5, generator=g, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda z: jasmin_penalty(z.softmax(-1), k, agg), (logits,))
    p = torch.rand(3, 6, generator=g, dtype=torch.float64)
    p = (p / p.sum(-1, keepdim=True)).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: g_k(x, [1, 2, 5]), (p,))


@pytest.mark.parametrize("ranks", [(0, 1), (0, 1, 3, 4), (0, 1, 1, 2)])
def test_gradcheck_fast_path(ranks):
    q, kk = qk(b=1, h=2, n=5, d=2, seed=2)
    assert torch.autograd.gradcheck(lambda a, b: ranked_softmax_probs(a, b, 0.7, ranks), (q, kk))
    assert torch.autograd.gradcheck(
        lambda a, b: jasmin_penalty_from_qk([(a, b, 0.7)], 2, "max"), (q, kk)
    )


@pytest.mark.parametrize("pattern", ["two rows", "one row per (b, h)", "one per (b, h) + 1"])
def test_sparse_and_dense_backward_agree(pattern):
    """Few rows with gradient take the row-sparse backward; compare with autograd on P."""
    q, kk = qk(n=17, seed=5)
    ranks = (0, 1, 3, 4)
    g = torch.Generator().manual_seed(7)
    upstream = torch.zeros(2, 3, 17, 4, dtype=torch.float64)
    if pattern == "two rows":
        upstream[0, 1, 5] = torch.tensor([1.0, -2.0, 0.5, 3.0])
        upstream[1, 2, 16] = torch.tensor([0.0, 1.0, 0.0, -1.0])
    else:  # what max aggregation produces (and a tie: two rows in one (b, h))
        rows = torch.randint(0, 17, (2, 3), generator=g)
        upstream.scatter_(
            2,
            rows[..., None, None].expand(2, 3, 1, 4),
            torch.randn(2, 3, 1, 4, generator=g, dtype=torch.float64),
        )
        if pattern.endswith("+ 1"):
            upstream[1, 0, (int(rows[1, 0]) + 1) % 17] = 0.5
    fast = ranked_softmax_probs(q, kk, 0.6, ranks)
    ref = attention_probs(q, kk, 0.6).topk(5, -1).values[..., list(ranks)]
    g_fast = torch.autograd.grad(fast, (q, kk), upstream)
    g_ref = torch.autograd.grad(ref, (q, kk), upstream)
    for a, b in zip(g_fast, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    assert float(g_ref[0].abs().sum()) > 0


# ------------------------------------------- float32 against float64: margins, ties, peaks
# In float32, rows whose p_(r) and p_(r+1) are closer than float32 resolution are
# ranked by whichever kernel ran, and either choice is a valid subgradient. So the float32
# comparisons run on scores built with a margin at every rank the term reads (asserted), and
# exact ties are tested on their own: the fast gradient is one valid selection's gradient.


def designed_qk(scores: torch.Tensor, d: int, dtype=torch.float32, seed: int = 0):
    """q, k (B, H, N, d) with scale q k^T = ``scores`` (B, H, N, N), d >= N, at scale d**-0.5.

    k has orthonormal rows (k k^T = I), so q = scores k / scale gives the scores exactly in
    exact arithmetic (float32 rounding: ~1e-6 of the scores).
    """
    b, h, n, _ = scores.shape
    g = torch.Generator().manual_seed(seed)
    basis = torch.linalg.qr(torch.randn(b, h, d, n, generator=g, dtype=torch.float64)).Q
    k = basis.transpose(-2, -1)  # (B, H, N, d), orthonormal rows
    scale = d**-0.5
    q = scores.double() @ k / scale
    return q.to(dtype).requires_grad_(), k.to(dtype).requires_grad_(), scale


def spaced_scores(b, h, n, step, top_gap=0.0, offset=0.0, seed=0) -> torch.Tensor:
    """Rows that are random permutations of offset, offset - top_gap - step * j (j >= 0)."""
    g = torch.Generator().manual_seed(seed)
    vals = offset - top_gap - step * torch.arange(n, dtype=torch.float64)
    vals[0] = offset
    perm = torch.rand(b, h, n, n, generator=g).argsort(-1)
    return vals[perm]


def rank_margin(scores: torch.Tensor, upto: int) -> float:
    """Smallest relative gap p_(r) / p_(r+1) - 1 over the ranks r < ``upto`` of every row."""
    top = scores.double().topk(upto + 1, dim=-1).values
    return float(torch.expm1(top[..., :-1] - top[..., 1:]).min())


def flat_rel_err(got, want) -> float:
    a = torch.cat([g.double().flatten() for g in got])
    b = torch.cat([w.double().flatten() for w in want])
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("k,aggregation", [(0, "mean"), (10, "max"), (30, "mean")])
def test_float32_fast_gradient_equals_materialised_on_rows_with_a_margin(k, aggregation):
    """The float32 fast path against autograd through materialised float32 maps (the tiny
    ViT's shapes: 4 heads, head dim 32 -> here N = 40 <= d = 48), on rows built with a margin
    between consecutive ranks up to p_(k+2), far above float32 resolution."""
    jitter = torch.rand(3, 4, 40, 40, generator=torch.Generator().manual_seed(1))
    scores = spaced_scores(3, 4, 40, step=0.15) + 0.05 * jitter.double()
    assert rank_margin(scores, max(k, 1) + 1) > 0.05
    q, kk, scale = designed_qk(scores, d=48)
    fast = jasmin_penalty_from_qk([(q, kk, scale)], k, aggregation)
    ref = jasmin_penalty([attention_probs(q, kk, scale)], k, aggregation)
    assert fast.item() == pytest.approx(ref.item(), rel=1e-5)
    g_fast = torch.autograd.grad(fast, (q, kk))
    g_ref = torch.autograd.grad(ref, (q, kk))
    for a, b in zip(g_fast, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4 * float(b.abs().max()))


def _valid_selections(row: list[float], ranks: tuple[int, ...]) -> set[tuple[int, ...]]:
    """Every assignment of positions to ``ranks`` that some descending sort of ``row`` gives."""
    groups: dict[float, list[int]] = {}
    for j, v in enumerate(row):
        groups.setdefault(v, []).append(j)
    ordered = [groups[v] for v in sorted(groups, reverse=True)]
    out = set()
    for perm in itertools.product(*(itertools.permutations(gr) for gr in ordered)):
        order = [j for gr in perm for j in gr]
        out.add(tuple(order[r] for r in ranks))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [0, 2, 3])
def test_fast_gradient_at_an_exact_tie_is_a_valid_selections_gradient(k, dtype):
    """Scores with exact ties at the ranks the term reads (k = I and quarter-integer q at
    scale 1/2: every score is exact in any summation order). Per row (mean aggregation, so
    rows are independent) the fast gradient must equal autograd's for one of the valid
    selections, and the selections must differ (else this test could not fail)."""
    rows = [
        [2.0, 2.0, 0.5, -1.0, 0.25, 0.0, -0.5, 1.0],  # tie at p_(1) = p_(2)
        [3.0, 1.0, 1.0, 0.0, -1.0, 0.5, -0.25, 2.0],  # tie at p_(3) = p_(4)
        [1.5, 1.5, 1.5, 0.0, -1.0, 0.5, 0.25, -2.0],  # three-way tie at the top
        [0.0, 2.5, -1.0, 1.0, 1.0, 1.0, 0.5, -0.75],  # three-way tie at p_(2..4)
        [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],  # uniform
        [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0],  # four-way tie at the top
        [4.0, -1.0, 2.0, 2.0, 1.0, 1.0, 0.0, -2.0],  # ties at p_(2..3) and p_(4..5)
        [0.25, 0.75, -0.5, 1.25, 0.0, -1.0, 0.5, 1.0],  # no tie
    ]
    n = len(rows[0])
    scores = torch.tensor(rows, dtype=torch.float64)  # (R, N)
    q = (scores * 2).to(dtype).view(1, 1, -1, n).requires_grad_()
    eye = torch.eye(n, dtype=dtype).view(1, 1, n, n)
    (g_fast,) = torch.autograd.grad(jasmin_penalty_from_qk([(q, eye, 0.5)], k, "mean"), q)
    ranks = jasmin_ranks(k)
    q64 = q.detach().double().requires_grad_()
    p64 = attention_probs(q64, eye.double(), 0.5)[0, 0]  # (R, N)
    distinct = 0
    for i, row in enumerate(rows):
        cands = []
        for sel in sorted(_valid_selections(row, ranks)):
            term = _log_ratio(p64[i, list(sel)], k, JASMIN_EPS) / len(rows)
            (g,) = torch.autograd.grad(term, q64, retain_graph=True)
            cands.append(g[0, 0, i])
        distinct += any(not torch.allclose(c, cands[0], rtol=0, atol=1e-9) for c in cands)
        got = g_fast[0, 0, i].double()
        tol = 1e-5 if dtype == torch.float32 else 1e-12
        errs = [float((got - c).abs().max()) for c in cands]
        assert min(errs) <= tol * float(max(c.abs().max() for c in cands)), (i, errs)
    assert distinct >= 2


@pytest.mark.parametrize("offset,k", [(30.0, 0), (30.0, 2), (100.0, 0)])
def test_fast_gradient_on_peaked_rows_is_as_accurate_as_float32_autograd(offset, k):
    """Peaked rows (top score 12 above the rest, all scores shifted by ``offset``),
    65 tokens, head dim 64 (N = 64 here: d >= N for the construction). Against float64
    autograd, the float32 fast gradient's relative error must be within 2x of that of plain
    float32 autograd through softmax (a backward rebuilding p = exp(s - lse) from a float32
    lse is 10-40 times worse; benchmarks/bench_jasmin_backward.py)."""
    scores = spaced_scores(2, 4, 64, step=0.3, top_gap=12.0, offset=offset, seed=2)
    assert rank_margin(scores, 3) > 0.3
    q, kk, scale = designed_qk(scores, d=64, seed=3)
    q64 = q.detach().double().requires_grad_()
    k64 = kk.detach().double().requires_grad_()
    want = torch.autograd.grad(
        jasmin_penalty([attention_probs(q64, k64, scale)], k, "mean"), (q64, k64)
    )
    plain = torch.autograd.grad(jasmin_penalty([attention_probs(q, kk, scale)], k, "mean"), (q, kk))
    fast = torch.autograd.grad(jasmin_penalty_from_qk([(q, kk, scale)], k, "mean"), (q, kk))
    err_fast, err_plain = flat_rel_err(fast, want), flat_rel_err(plain, want)
    assert err_plain > 1e-5  # the rows are peaked enough to cost float32 digits
    # 2x, not 1x: the two float32 paths sum in different orders, and one config measured
    # 1.24x on one CPU's kernels; the defect this guards against was 10-40x
    assert err_fast <= 2.0 * err_plain, (err_fast, err_plain)


# ------------------------------------------------------------------ finiteness at the edges


def _finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t).all())


@pytest.mark.parametrize("k,aggregation", [(0, "mean"), (0, "max"), (2, "mean"), (10, "max")])
def test_finite_on_one_hot_and_uniform_rows(k, aggregation):
    n = 16
    one_hot = torch.eye(n).expand(2, 2, n, n).clone().requires_grad_()
    uniform = torch.full((2, 2, n, n), 1.0 / n, requires_grad=True)
    for attn in (one_hot, uniform):
        val = jasmin_penalty(attn, k, aggregation)
        (grad,) = torch.autograd.grad(val, attn)
        assert _finite(val) and _finite(grad)
    expected = 2 * math.log(JASMIN_EPS) if k == 0 else 0.0  # 2 heads, g_1 = g_k = 0
    assert jasmin_penalty(one_hot, k, aggregation).item() == pytest.approx(expected, rel=1e-6)
    # the fast path: scores with huge gaps (rows exactly one-hot in float32) and q = 0
    q = torch.zeros(2, 2, n, 4, requires_grad=True)
    kk = torch.randn(2, 2, n, 4, requires_grad=True)
    qh = (torch.eye(n)[:, :4] * 1e4).expand(2, 2, n, 4).clone().requires_grad_()
    kh = (torch.eye(n)[:, :4] * 1e4).expand(2, 2, n, 4).clone().requires_grad_()
    for a, b in ((q, kk), (qh, kh)):
        val = jasmin_penalty_from_qk([(a, b, 0.5)], k, aggregation)
        grads = torch.autograd.grad(val, (a, b))
        assert _finite(val) and all(_finite(g) for g in grads)


def test_uniform_rows_value():
    n = 8
    val = jasmin_penalty(torch.full((1, 1, n, n), 1.0 / n), 0, "mean")
    assert float(val) == pytest.approx(math.log(1.0 / n + JASMIN_EPS), rel=1e-6)
    q = torch.zeros(1, 1, n, 4)
    fast = jasmin_penalty_from_qk([(q, torch.randn(1, 1, n, 4), 1.0)], 2, "max")
    assert float(fast) == pytest.approx(0.0, abs=1e-6)  # g_1 = g_2 on uniform rows


def test_finite_under_bf16_autocast():
    q, kk = qk(n=33, d=16, dtype=torch.float32, spread=3.0)
    with bf16_autocast("cpu"):
        qb, kb = q.to(torch.bfloat16), kk.to(torch.bfloat16)
        fast = jasmin_penalty_from_qk([(qb, kb, 0.25)], 10, "mean")
        ref = jasmin_penalty([attention_probs(qb, kb, 0.25)], 10, "mean")
    assert fast.dtype == torch.float32
    grads = torch.autograd.grad(fast, (q, kk))
    assert _finite(fast) and all(_finite(g) for g in grads)
    # the penalty is computed in float32 from the bf16 q and k the kernel saw
    exact = jasmin_penalty_from_qk([(qb.detach().float(), kb.detach().float(), 0.25)], 10, "mean")
    assert fast.item() == pytest.approx(exact.item(), rel=1e-5)
    assert fast.item() == pytest.approx(ref.item(), rel=1e-2)


@pytest.mark.parametrize("ranks", [(0, 1), (0, 1, 9, 10), (0, 3, 3, 5), (4, 0)])
def test_cpu_selection_positions_follow_the_tie_rule(ranks):
    """The int-key selection returns, at each asked rank, the position a full sort gives with
    the documented tie rule (larger value first, then larger column), on rows full of ties."""
    from lipsweep.regularizers._ranked_softmax import Workspace, _top_positions

    g = torch.Generator().manual_seed(5)
    e = (torch.randint(0, 6, (3, 2, 13, 13), generator=g) / 5.0).float()  # many equal values
    got = _top_positions(e, ranks, Workspace())
    # stable descending sort of the column-reversed rows: among equal values the larger column
    # comes first
    order = 12 - e.flip(-1).sort(dim=-1, descending=True, stable=True).indices
    assert torch.equal(got, order[..., list(ranks)])


def test_cpu_selection_knocks_out_only_what_a_later_rank_needs():
    """JaSMin_10 reads ranks (0, 1, 9, 10): the selection takes 11 maxima and knocks out 10
     winners (the last one is never ranked after), without gathering the 7 ranks it skips
    ."""
    q, kk = qk(b=2, h=2, n=20, d=8, dtype=torch.float32)
    with torch.no_grad(), torch.profiler.profile() as prof:
        ranked_softmax_probs(q, kk, 0.5, (0, 1, 9, 10))
    names = [e.name for e in prof.events()]
    assert names.count("aten::index_fill_") == 10
    assert names.count("aten::cat") == 0
