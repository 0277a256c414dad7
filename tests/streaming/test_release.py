"""The DPI release pipeline: data dependence, boosting, accounting, compression, ledger path."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from userids_support import make_known

from blockbudget import Accounting, Budget, RdpCurve
from blockbudget.errors import DataError, InvalidRequestError
from blockbudget.platform import Platform
from blockbudget.store import Blocking, LatePolicy, Unit
from blockbudget.streaming import (
    Compression,
    DPIConfig,
    DPIStream,
    Horizon,
    PoolDesign,
    QueryPool,
    SecureSelector,
    SeededSelector,
    StreamAccountant,
    SynopsisPool,
    charge_stream_total,
)
from blockbudget.streaming.applications import kl_divergence

K = 20
N_USERS = 100_000


def _skewed() -> np.ndarray:
    p = 1.0 / np.arange(1, K + 1) ** 2.0
    return np.asarray(p / p.sum(), dtype=np.float64)


def _stream(seed: int, *, epsilon: float = 2.0, slots: int = 100, **kw: object) -> DPIStream:
    cfg = DPIConfig(epsilon=epsilon, rate=2.0 * slots / epsilon, **kw)  # type: ignore[arg-type]
    pool = SynopsisPool.generate(
        domain_size=K, size=1000, precision=0.02, rng=np.random.default_rng(seed)
    )
    return DPIStream(
        config=cfg,
        compression=Compression(K, min_users=N_USERS),
        pool=pool,
        queries=QueryPool.standard(K),
        selector=SeededSelector(np.random.default_rng(seed + 1)),
        rng=np.random.default_rng(seed + 2),
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_skewed_stream_gives_a_skewed_release(seed: int) -> None:
    truth = _skewed()
    rng = np.random.default_rng(seed + 10)
    s = _stream(seed, horizon=Horizon.ACCUMULATIVE)
    for _ in range(100):
        r = s.step_counts(rng.multinomial(N_USERS, truth))
    uniform_kl = kl_divergence(truth, np.full(K, 1.0 / K))
    assert kl_divergence(truth, r.pdf) < 0.2 * uniform_kl
    assert int(np.argmax(r.pdf)) == 0  # the heavy item is found
    assert r.spent <= _dec(2.0)


def _dec(x: float) -> Decimal:
    return Decimal(repr(x))


def test_release_depends_on_the_data() -> None:
    """Two streams, same seeds, mirrored data: the releases mirror each other's heavy item."""
    truth = _skewed()
    a, b = _stream(5), _stream(5)
    rng = np.random.default_rng(7)
    for _ in range(60):
        counts = rng.multinomial(N_USERS, truth)
        ra = a.step_counts(counts)
        rb = b.step_counts(counts[::-1].copy())
    assert int(np.argmax(ra.pdf)) == 0
    assert int(np.argmax(rb.pdf)) == K - 1


def test_boosting_moves_weight_toward_accurate_synopses() -> None:
    truth = _skewed()
    s = _stream(3, horizon=Horizon.ACCUMULATIVE)
    dense = s.pool.dense()
    err = np.abs(dense - truth).sum(axis=1)  # ℓ1 error of every synopsis
    uniform_err = float(err.mean())
    rng = np.random.default_rng(4)
    for _ in range(80):
        s.step_counts(rng.multinomial(N_USERS, truth))
    boosted_err = float(s.synopsis_weights @ err)
    assert boosted_err < 0.85 * uniform_err
    # the most accurate tenth of the pool gained weight
    best = err <= np.quantile(err, 0.1)
    assert s.synopsis_weights[best].sum() > 0.1 * 1.5


def test_zero_signal_stream_spends_within_budget_and_reports_it() -> None:
    s = _stream(9, epsilon=0.5, slots=50)
    rng = np.random.default_rng(1)
    total = 0.0
    for t in range(1, 51):
        r = s.step_counts(rng.multinomial(1000, np.full(K, 1.0 / K)))
        assert r.t == t
        total += r.epsilon
        assert r.spent + r.remaining == _dec(0.5)
        assert abs(r.pdf.sum() - 1.0) < 1e-9
        assert not r.secure
    assert float(r.spent) == pytest.approx(total, rel=1e-12)
    assert float(r.spent) <= 0.5


def test_a_slot_the_accountant_cannot_pay_is_refused_and_samples_nothing() -> None:
    acc = StreamAccountant(epsilon=2.0)
    acc.charge(2.0)  # nothing left
    cfg = DPIConfig(epsilon=2.0, rate=10.0)
    pool = SynopsisPool.generate(
        domain_size=K, size=50, precision=0.1, rng=np.random.default_rng(0)
    )

    class Boom(SeededSelector):
        def _select(self, *args: object, **kw: object) -> int:
            raise AssertionError("nothing may be sampled on a refused slot")

    s = DPIStream(
        config=cfg,
        compression=Compression(K),
        pool=pool,
        queries=QueryPool.standard(K),
        selector=Boom(np.random.default_rng(0)),
        accountant=acc,
        rng=np.random.default_rng(1),
    )
    before = s.release
    r = s.step(np.arange(5), np.arange(5))
    assert r.refused and r.epsilon == 0.0 and r.queries == ()
    assert np.array_equal(r.pdf, before)
    assert acc.refused == 1


def test_secure_selector_is_the_default_and_runs() -> None:
    cfg = DPIConfig(epsilon=1.0, rate=10.0)
    pool = SynopsisPool.generate(
        domain_size=K, size=100, precision=0.1, rng=np.random.default_rng(0)
    )
    s = DPIStream(
        config=cfg,
        compression=Compression(K, min_users=10),
        pool=pool,
        queries=QueryPool.standard(K),
    )
    assert isinstance(s.selector, SecureSelector)
    r = s.step(np.arange(40) % 13, np.arange(40) % K)
    assert r.secure and not r.refused and float(r.spent) > 0


def test_compression_bounds_one_users_influence() -> None:
    comp = Compression(10, min_users=4)
    assert comp.sensitivity == 0.5
    rng = np.random.default_rng(0)
    for n_users in (1, 3, 4, 9):
        users = rng.integers(0, n_users, size=60)
        items = rng.integers(0, 10, size=60)
        base = comp.pdf(users, items)
        # remove user 0 entirely; or give them 1000 records on one item
        without = comp.pdf(users[users != 0], items[users != 0])
        heavy_u = np.concatenate([users, np.zeros(1000, dtype=np.int64)])
        heavy_i = np.concatenate([items, np.full(1000, 9)])
        for other in (without, comp.pdf(heavy_u, heavy_i)):
            assert np.abs(base - other).sum() <= comp.sensitivity + 1e-12
    with pytest.raises(DataError, match="declared domain"):
        comp.pdf(np.array([1]), np.array([10]))


def test_uniform_pool_is_near_uniform_and_dirichlet_spans() -> None:
    uni = SynopsisPool.generate(
        domain_size=50,
        size=200,
        precision=0.01,
        design=PoolDesign.UNIFORM,
        rng=np.random.default_rng(0),
    )
    dirich = SynopsisPool.generate(
        domain_size=50, size=200, precision=0.01, rng=np.random.default_rng(0)
    )
    assert uni.dense().max() < 0.1
    assert dirich.dense().max(axis=1).mean() > 0.3
    assert np.allclose(dirich.dense().sum(axis=1), 1.0)


def test_config_validation() -> None:
    with pytest.raises(InvalidRequestError, match="mu"):
        DPIConfig(epsilon=1.0, mu=0.0)
    with pytest.raises(InvalidRequestError, match="queries_per_slot"):
        DPIConfig(epsilon=1.0, queries_per_slot=0)
    with pytest.raises(InvalidRequestError, match="smaller N or a larger p"):
        SynopsisPool.generate(domain_size=5, size=10, precision=1e-9)  # no MemoryError
    with pytest.raises(InvalidRequestError, match="PoolDesign"):
        SynopsisPool.generate(domain_size=5, size=10, precision=0.1, design="uniform")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="medium_from < small_from"):
        DPIConfig(epsilon=1.0, medium_from=100, small_from=10)


@pytest.mark.parametrize("accounting", [Accounting.BASIC, Accounting.RDP])
def test_stream_total_is_charged_to_the_ledger_before_any_slot(
    tmp_path: Path, accounting: Accounting
) -> None:
    platform = Platform(tmp_path / "p")
    platform.add_context("dashboard")
    platform.create_stream(
        "visits",
        accounting=accounting,
        policy=Budget(epsilon=3.0, delta=1e-6 if accounting is Accounting.RDP else 0.0),
        blocking=Blocking(unit=Unit.USER, column="user", ids_per_block=25),
        late_policy=LatePolicy.DROP,
    )
    frame = pd.DataFrame({"user": np.arange(200) % 50, "item": np.arange(200) % K})
    platform.ingest("visits", frame)
    make_known(platform, "visits")  # a user stream is gated until its maximum id is released
    expected: Budget | RdpCurve = (
        RdpCurve.from_pure_dp(2.0) if accounting is Accounting.RDP else Budget(epsilon=2.0)
    )
    views = platform.blocks("visits")
    blocks = [v.block_id for v in views]
    keys = [v.key for v in views]
    with platform.request("visits", blocks=keys, budget=expected, context="dashboard") as grant:
        acc = charge_stream_total(grant, epsilon=2.0, stream="visits")
        assert grant.spent == expected
        pool = SynopsisPool.generate(
            domain_size=K, size=100, precision=0.1, rng=np.random.default_rng(0)
        )
        s = DPIStream(
            config=DPIConfig(epsilon=2.0, rate=5.0),
            compression=Compression(K),
            pool=pool,
            queries=QueryPool.standard(K),
            accountant=acc,
            selector=SeededSelector(np.random.default_rng(1)),
            rng=np.random.default_rng(2),
        )
        data = grant.frame()
        for _ in range(20):
            r = s.step(data["user"].to_numpy(), data["item"].to_numpy())
        assert float(r.spent) <= 2.0
    f = platform.filter("visits")
    for block in blocks:
        assert platform.ledger.state(block, "dashboard").charged == f.features(expected)
    assert platform.verify().ok
    platform.close()


def _counts() -> list[np.ndarray]:
    rng = np.random.default_rng(42)  # the data, not the stream's randomness
    return [rng.multinomial(2000, _skewed()) for _ in range(5)]


def test_seeded_streams_reproduce_and_say_secure_noise_false() -> None:
    runs = []
    for _ in range(2):
        s = _stream(3, slots=10)
        runs.append([s.step_counts(c) for c in _counts()])
    for a, b in zip(runs[0], runs[1], strict=True):
        assert a.queries == b.queries and a.epsilon == b.epsilon
        assert np.array_equal(a.pdf, b.pdf)
        assert a.secure_noise is False and b.secure_noise is False


def test_unseeded_streams_differ_and_are_secure() -> None:
    """No rng, no selector: the pool, the budget allocation and the private draws all come from
    OS entropy / OpenDP, so two runs on the same data differ."""
    releases = []
    for _ in range(2):
        pool = SynopsisPool.generate(domain_size=K, size=200, precision=0.05)
        s = DPIStream(
            config=DPIConfig(epsilon=2.0, rate=5.0),
            compression=Compression(K, min_users=1000),
            pool=pool,
            queries=QueryPool.standard(K),
        )
        releases.append([s.step_counts(c) for c in _counts()[:2]])
    assert all(r.secure_noise for run in releases for r in run)
    first, second = releases
    assert [r.epsilon for r in first] != [r.epsilon for r in second] or not np.array_equal(
        first[-1].pdf, second[-1].pdf
    )
