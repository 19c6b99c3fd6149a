"""Bucket layout: a pure function of the parameter list, so every rank computes the same one."""

from __future__ import annotations

import numpy as np

import distvlog as dv
from distvlog.distributed.buckets import make_buckets


def params(*specs: tuple[tuple[int, ...], str]) -> list[dv.Tensor]:
    out = []
    for i, (shape, dtype) in enumerate(specs):
        t = dv.to_tensor(np.zeros(shape, dtype))
        t.stop_gradient, t.name = False, f"p{i}"
        out.append(t)
    return out


def layout(buckets) -> list[list[str]]:
    return [[p.name for p in b.params] for b in buckets]


def test_reverse_order_and_size_limit():
    ps = params(((4, 4), "float32"), ((4,), "float32"), ((4, 4), "float32"), ((4,), "float32"))
    assert layout(make_buckets(ps, 80)) == [["p3", "p2"], ["p1", "p0"]]  # 16 + 64 bytes fit, 64 + 16 too
    assert layout(make_buckets(ps, 1 << 20)) == [["p3", "p2", "p1", "p0"]]


def test_a_parameter_larger_than_the_limit_gets_its_own_bucket():
    ps = params(((2,), "float32"), ((100,), "float32"), ((2,), "float32"))
    assert layout(make_buckets(ps, 16)) == [["p2"], ["p1"], ["p0"]]


def test_a_dtype_change_starts_a_bucket():
    ps = params(((2,), "float32"), ((2,), "float64"), ((2,), "float64"))
    buckets = make_buckets(ps, 1 << 20)
    assert layout(buckets) == [["p2", "p1"], ["p0"]]
    assert [b.dtype for b in buckets] == [np.float64, np.float32]


def test_pack_and_unpack_round_trip_with_zeros_for_missing_gradients():
    ps = params(((2, 2), "float32"), ((3,), "float32"))
    ps[0].grad = dv.to_tensor(np.arange(4, dtype="float32").reshape(2, 2))
    (bucket,) = make_buckets(ps, 1 << 20)
    flat = bucket.pack()
    assert flat.tolist() == [0, 0, 0, 0, 1, 2, 3]  # p1 (no gradient) first: reverse order
    bucket.unpack(flat * 2)
    assert ps[0].grad.numpy().tolist() == [[0, 2], [4, 6]] and ps[1].grad.numpy().tolist() == [0, 0, 0]
