"""bcast of numpy arrays (dtypes, shapes, orders) and other buffers."""

from __future__ import annotations

import numpy as np
import pytest

import rmcast
from conftest import LISTEN, WAIT

ARRAYS = {
    "f64-2d": lambda: np.arange(12.0).reshape(3, 4),
    "f32-3d": lambda: np.random.default_rng(1).random((4, 5, 6), dtype=np.float32),
    "i8-0d": lambda: np.array(-7, dtype=np.int8),
    "u16-1d": lambda: np.arange(1000, dtype=np.uint16),
    "c128-fortran": lambda: np.asfortranarray((np.arange(6) + 1j).reshape(2, 3)),
    "bool": lambda: np.array([True, False, True]),
    "big-endian-i32": lambda: np.arange(10, dtype=">i4"),
    "datetime": lambda: np.array(["2026-11-25", "1970-01-01"], dtype="datetime64[D]"),
    "structured": lambda: np.array([(1, 2.5, b"ab"), (3, 4.5, b"cd")],
                                   dtype=[("a", "<i4"), ("b", "<f8"), ("c", "S2")]),
    "empty": lambda: np.zeros((0, 3), dtype=np.float64),
    "large": lambda: np.random.default_rng(2).integers(0, 1 << 30, size=(512, 1024), dtype=np.int64),
}


@pytest.mark.parametrize("which", sorted(ARRAYS))
def test_bcast_array(key, group, threads, which):
    a = ARRAYS[which]()
    for _ in range(2):
        threads.start(lambda: rmcast.bcast(key=key, group=group, listen_timeout=LISTEN))
    report = rmcast.bcast(a, receivers=2, key=key, group=group, wait=WAIT)
    got = threads.join()
    assert report.ok and report.bytes == a.nbytes
    for b in got:
        assert isinstance(b, np.ndarray)
        assert b.dtype == a.dtype and b.shape == a.shape
        assert b.flags.c_contiguous == a.flags.c_contiguous
        assert b.flags.writeable
        np.testing.assert_array_equal(b, a)


def test_bcast_into_given_array(key, group, threads):
    a = np.linspace(0, 1, 777).reshape(7, 111)
    out = np.empty_like(a)
    threads.start(lambda: rmcast.bcast(into=out, key=key, group=group, listen_timeout=LISTEN))
    rmcast.bcast(a, receivers=1, key=key, group=group, wait=WAIT)
    (b,) = threads.join()
    assert b is out
    np.testing.assert_array_equal(out, a)


def test_bcast_into_wrong_shape_is_refused(key, group, threads):
    out = np.empty((2, 2))
    threads.start(lambda: rmcast.bcast(into=out, key=key, group=group, listen_timeout=LISTEN))
    rmcast.bcast(np.zeros((3, 3)), receivers=1, key=key, group=group, wait=WAIT)
    (e,) = threads.outcomes()
    assert isinstance(e, rmcast.InvalidArgument) and "shape" in str(e)


def test_non_contiguous_is_refused_without_copy(key, group):
    a = np.arange(20.0).reshape(4, 5)[:, ::2]
    with pytest.raises(rmcast.InvalidArgument, match="non-contiguous.*copy=True"):
        rmcast.bcast(a, receivers=1, key=key, group=group, wait=1)


def test_non_contiguous_with_copy(key, group, threads):
    a = np.arange(20.0).reshape(4, 5)[:, ::2]
    threads.start(lambda: rmcast.bcast(key=key, group=group, listen_timeout=LISTEN))
    rmcast.bcast(a, receivers=1, key=key, group=group, wait=WAIT, copy=True)
    (b,) = threads.join()
    np.testing.assert_array_equal(b, a)


def test_object_arrays_are_refused(key, group):
    with pytest.raises(rmcast.InvalidArgument, match="object"):
        rmcast.bcast(np.array([{}, None]), receivers=1, key=key, group=group)


@pytest.mark.parametrize("obj", [b"bytes!", bytearray(b"bytearray"), memoryview(b"abcdefgh").cast("I")])
def test_bcast_buffers(key, group, threads, obj):
    threads.start(lambda: rmcast.bcast(key=key, group=group, listen_timeout=LISTEN))
    rmcast.bcast(obj, receivers=1, key=key, group=group, wait=WAIT)
    (b,) = threads.join()
    assert type(b) is (memoryview if isinstance(obj, memoryview) else type(obj))
    assert bytes(b) == bytes(obj)
    if isinstance(obj, memoryview):
        assert b.format == "I" and b.shape == obj.shape


def test_plain_send_is_not_a_bcast(key, group, threads):
    threads.start(lambda: rmcast.bcast(key=key, group=group, listen_timeout=LISTEN))
    rmcast.send(b"x", receivers=1, key=key, group=group, wait=WAIT, name="x.bin")
    (e,) = threads.outcomes()
    assert isinstance(e, rmcast.InvalidArgument) and "not sent by rmcast.bcast" in str(e)
