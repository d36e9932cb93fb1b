"""The string hashes of Keras' ``Hashing`` and the lookups' extra OOV buckets, in pure Python:
FarmHash ``Fingerprint64`` (TF's ``to_hash_bucket_fast``) and SipHash-2-4 with a 128-bit key
(TF's ``to_hash_bucket_strong``). They run on the host, on the distinct values of an array
(data preparation), never in a compiled graph.
"""

from __future__ import annotations

import struct

import numpy as np

_M = (1 << 64) - 1
K0 = 0xC3A5C85C97CB3127
K1 = 0xB492B66FBE98F273
K2 = 0x9AE16A3B2F90404F
_KMUL = 0x9DDFEA08EB382D69


def _rot(v: int, s: int) -> int:
    return v if s == 0 else ((v >> s) | (v << (64 - s))) & _M


def _f64(b: bytes, i: int) -> int:
    return struct.unpack_from("<Q", b, i)[0]


def _f32(b: bytes, i: int) -> int:
    return struct.unpack_from("<I", b, i)[0]


def _smix(v: int) -> int:
    return v ^ (v >> 47)


def _h16(u: int, v: int, mul: int = _KMUL) -> int:
    a = ((u ^ v) * mul) & _M
    a ^= a >> 47
    b = ((v ^ a) * mul) & _M
    b ^= b >> 47
    return (b * mul) & _M


def _len0to16(s: bytes) -> int:
    n = len(s)
    if n >= 8:
        mul = (K2 + n * 2) & _M
        a = (_f64(s, 0) + K2) & _M
        b = _f64(s, n - 8)
        c = (_rot(b, 37) * mul + a) & _M
        d = ((_rot(a, 25) + b) * mul) & _M
        return _h16(c, d, mul)
    if n >= 4:
        mul = (K2 + n * 2) & _M
        return _h16((n + (_f32(s, 0) << 3)) & _M, _f32(s, n - 4), mul)
    if n > 0:
        y = (s[0] + (s[n >> 1] << 8)) & 0xFFFFFFFF
        z = (n + (s[n - 1] << 2)) & 0xFFFFFFFF
        return (_smix(((y * K2) ^ (z * K0)) & _M) * K2) & _M
    return K2


def _len17to32(s: bytes) -> int:
    n = len(s)
    mul = (K2 + n * 2) & _M
    a = (_f64(s, 0) * K1) & _M
    b = _f64(s, 8)
    c = (_f64(s, n - 8) * mul) & _M
    d = (_f64(s, n - 16) * K2) & _M
    return _h16((_rot((a + b) & _M, 43) + _rot(c, 30) + d) & _M,
                (a + _rot((b + K2) & _M, 18) + c) & _M, mul)


def _weak32(s: bytes, i: int, a: int, b: int) -> tuple[int, int]:
    w, x, y, z = _f64(s, i), _f64(s, i + 8), _f64(s, i + 16), _f64(s, i + 24)
    a = (a + w) & _M
    b = _rot((b + a + z) & _M, 21)
    c = a
    a = (a + x + y) & _M
    b = (b + _rot(a, 44)) & _M
    return (a + z) & _M, (b + c) & _M


def _len33to64(s: bytes) -> int:
    n = len(s)
    mul = (K2 + n * 2) & _M
    a = (_f64(s, 0) * K2) & _M
    b = _f64(s, 8)
    c = (_f64(s, n - 8) * mul) & _M
    d = (_f64(s, n - 16) * K2) & _M
    y = (_rot((a + b) & _M, 43) + _rot(c, 30) + d) & _M
    z = _h16(y, (a + _rot((b + K2) & _M, 18) + c) & _M, mul)
    e = (_f64(s, 16) * mul) & _M
    f = _f64(s, 24)
    g = ((y + _f64(s, n - 32)) * mul) & _M
    h = ((z + _f64(s, n - 24)) * mul) & _M
    return _h16((_rot((e + f) & _M, 43) + _rot(g, 30) + h) & _M,
                (e + _rot((f + a) & _M, 18) + g) & _M, mul)


def fingerprint64(s: bytes) -> int:
    """FarmHash ``Fingerprint64`` of a byte string (an unsigned 64-bit int)."""
    n = len(s)
    if n <= 16:
        return _len0to16(s)
    if n <= 32:
        return _len17to32(s)
    if n <= 64:
        return _len33to64(s)
    seed = 81
    x = seed
    y = (seed * K1 + 113) & _M
    z = (_smix((y * K2 + 113) & _M) * K2) & _M
    v = (0, 0)
    w = (0, 0)
    x = (x * K2 + _f64(s, 0)) & _M
    end = ((n - 1) // 64) * 64
    last64 = n - 64
    i = 0
    while True:
        x = (_rot((x + y + v[0] + _f64(s, i + 8)) & _M, 37) * K1) & _M
        y = (_rot((y + v[1] + _f64(s, i + 48)) & _M, 42) * K1) & _M
        x ^= w[1]
        y = (y + v[0] + _f64(s, i + 40)) & _M
        z = (_rot((z + w[0]) & _M, 33) * K1) & _M
        v = _weak32(s, i, (v[1] * K1) & _M, (x + w[0]) & _M)
        w = _weak32(s, i + 32, (z + w[1]) & _M, (y + _f64(s, i + 16)) & _M)
        z, x = x, z
        i += 64
        if i == end:
            break
    mul = (K1 + ((z & 0xFF) << 1)) & _M
    i = last64
    w = ((w[0] + ((n - 1) & 63)) & _M, w[1])
    v = ((v[0] + w[0]) & _M, v[1])
    w = ((w[0] + v[0]) & _M, w[1])
    x = (_rot((x + y + v[0] + _f64(s, i + 8)) & _M, 37) * mul) & _M
    y = (_rot((y + v[1] + _f64(s, i + 48)) & _M, 42) * mul) & _M
    x ^= (w[1] * 9) & _M
    y = (y + v[0] * 9 + _f64(s, i + 40)) & _M
    z = (_rot((z + w[0]) & _M, 33) * mul) & _M
    v = _weak32(s, i, (v[1] * mul) & _M, (x + w[0]) & _M)
    w = _weak32(s, i + 32, (z + w[1]) & _M, (y + _f64(s, i + 16)) & _M)
    z, x = x, z
    return _h16((_h16(v[0], w[0], mul) + _smix(y) * K0 + z) & _M,
                (_h16(v[1], w[1], mul) + x) & _M, mul)


def siphash24(k0: int, k1: int, s: bytes) -> int:
    """SipHash-2-4 of ``s`` with the 128-bit key ``(k0, k1)`` (two unsigned 64-bit ints)."""
    v0 = k0 ^ 0x736F6D6570736575
    v1 = k1 ^ 0x646F72616E646F6D
    v2 = k0 ^ 0x6C7967656E657261
    v3 = k1 ^ 0x7465646279746573

    def rounds(v0: int, v1: int, v2: int, v3: int, n: int) -> tuple[int, int, int, int]:
        for _ in range(n):
            v0 = (v0 + v1) & _M
            v1 = _rot(v1, 64 - 13) ^ v0
            v0 = _rot(v0, 64 - 32)
            v2 = (v2 + v3) & _M
            v3 = _rot(v3, 64 - 16) ^ v2
            v0 = (v0 + v3) & _M
            v3 = _rot(v3, 64 - 21) ^ v0
            v2 = (v2 + v1) & _M
            v1 = _rot(v1, 64 - 17) ^ v2
            v2 = _rot(v2, 64 - 32)
        return v0, v1, v2, v3

    n = len(s)
    full = n - n % 8
    for i in range(0, full, 8):
        m = _f64(s, i)
        v3 ^= m
        v0, v1, v2, v3 = rounds(v0, v1, v2, v3, 2)
        v0 ^= m
    last = (n & 0xFF) << 56
    for j, byte in enumerate(s[full:]):
        last |= byte << (8 * j)
    v3 ^= last
    v0, v1, v2, v3 = rounds(v0, v1, v2, v3, 2)
    v0 ^= last
    v2 ^= 0xFF
    v0, v1, v2, v3 = rounds(v0, v1, v2, v3, 4)
    return v0 ^ v1 ^ v2 ^ v3


def as_strings(values: np.ndarray) -> np.ndarray:
    """Values as TF's ``as_string`` writes them: strings stay, bytes are decoded (UTF-8),
    integers in decimal (floats are first truncated to int64, as Keras' Hashing does)."""
    values = np.asarray(values)
    if values.dtype.kind == "f":
        values = values.astype(np.int64)
    if values.dtype.kind == "S":
        return np.char.decode(values, "utf-8")
    if values.dtype.kind == "O":
        return np.array([v.decode("utf-8") if isinstance(v, bytes) else str(v)
                         for v in values.reshape(-1)], dtype=str).reshape(values.shape)
    return values.astype(str)


def hash_buckets(values: np.ndarray, num_buckets: int, salt: tuple[int, int] | None = None
                 ) -> np.ndarray:
    """Bucket of each value in ``[0, num_buckets)`` (int64, same shape): FarmHash64 mod n, or
    SipHash-2-4 with ``salt`` mod n. Each distinct value is hashed once."""
    strings = as_strings(values)
    uniq, inverse = np.unique(strings.reshape(-1), return_inverse=True)
    if salt is None:
        hashed = [fingerprint64(u.encode("utf-8")) % num_buckets for u in uniq]
    else:
        k0, k1 = (int(salt[0]) & _M, int(salt[1]) & _M)
        hashed = [siphash24(k0, k1, u.encode("utf-8")) % num_buckets for u in uniq]
    return np.asarray(hashed, np.int64)[inverse].reshape(strings.shape)
