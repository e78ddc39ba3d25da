"""A damaged feature-cache entry is a miss (logged once), never a crash or a wrong feature."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from training.model.cache import FeatureCache, RunFeatures


def _entry(tmp_path):
    cache = FeatureCache(tmp_path, "m", "f")
    feats = RunFeatures(np.arange(24, dtype=np.float32).reshape(6, 4) / 7, 321)
    cache.put("ab" + "0" * 30, feats)
    return cache, "ab" + "0" * 30, feats


def test_intact_entry_round_trips_and_no_temp_file_is_left(tmp_path):
    cache, key, feats = _entry(tmp_path)
    got = cache.get(key)
    assert got is not None
    assert np.array_equal(got.hidden, feats.hidden)
    assert got.hidden.dtype == np.float32
    assert got.encoded_tokens == 321
    assert [p.name for p in cache._path(key).parent.iterdir()] == [f"{key}.npz"]


def _half(b: bytes) -> bytes:
    return b[: len(b) // 2]


def _flip(at: float):
    def f(b: bytes) -> bytes:
        i = int(len(b) * at)
        return b[:i] + bytes([b[i] ^ 0x01]) + b[i + 1 :]

    return f


@pytest.mark.parametrize(
    "damage",
    [_half, lambda b: b"", _flip(0.0), _flip(0.01), _flip(0.05)]
    + [_flip(x / 10) for x in range(1, 10)]
    + [_flip(0.999)],
    ids=["half-written", "empty", "flip-magic", "flip-digest", "flip-5%"]
    + [f"flip-{x}0%" for x in range(1, 10)]
    + ["flip-last"],
)
def test_damaged_bytes_are_a_miss(tmp_path, damage, caplog):
    cache, key, feats = _entry(tmp_path)
    p = cache._path(key)
    p.write_bytes(damage(p.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="training.model.cache"):
        assert cache.get(key) is None
    assert cache.damaged == 1
    assert "damaged feature cache entry" in caplog.text
    cache.put(key, feats)  # the next pass overwrites it
    assert cache.get(key) is not None


def _write(cache, key, **fields):
    p = cache._path(key)
    p.parent.mkdir(parents=True, exist_ok=True)
    np.savez(p, **fields)


@pytest.mark.parametrize(
    "fields",
    [
        {"hidden": np.zeros(5, np.float32), "encoded_tokens": np.int64(3)},  # 1-D
        {"hidden": np.zeros((2, 3, 4), np.float32), "encoded_tokens": np.int64(3)},
        {"hidden": np.zeros((2, 3), np.float64), "encoded_tokens": np.int64(3)},  # dtype
        {"hidden": np.zeros((2, 3), np.float32), "encoded_tokens": np.arange(3)},
        {"hidden": np.full((2, 3), np.nan, np.float32), "encoded_tokens": np.int64(3)},
        {"hidden": np.full((2, 3), np.inf, np.float32), "encoded_tokens": np.int64(3)},
        {"encoded_tokens": np.int64(3)},  # no hidden
        {"hidden": np.zeros((2, 3), np.float32)},  # no token count
    ],
    ids=["1d", "3d", "float64", "tokens-array", "nan", "inf", "no-hidden", "no-tokens"],
)
def test_malformed_entries_are_a_miss(tmp_path, fields):
    cache = FeatureCache(tmp_path, "m", "f")
    key = "cd" + "1" * 30
    _write(cache, key, **fields)
    assert cache.get(key) is None
    assert cache.damaged == 1


def test_nan_features_are_a_miss_even_with_a_valid_checksum(tmp_path):
    cache = FeatureCache(tmp_path, "m", "f")
    key = "ef" + "2" * 30
    cache.put(key, RunFeatures(np.full((3, 4), np.nan, np.float32), 10))
    assert cache.get(key) is None


def test_damaged_entries_warn_once_per_cache(tmp_path, caplog):
    cache = FeatureCache(tmp_path, "m", "f")
    for i in range(5):
        _write(cache, f"{i:02d}" + "3" * 30, hidden=np.zeros(3, np.float32))
    with caplog.at_level(logging.WARNING, logger="training.model.cache"):
        assert all(cache.get(f"{i:02d}" + "3" * 30) is None for i in range(5))
    assert cache.damaged == 5
    assert caplog.text.count("damaged feature cache entry") == 1


def test_flipped_byte_of_an_old_entry_is_a_miss_or_the_intact_arrays(tmp_path):
    """Bare .npz entries from before the checksum: a flip is a miss unless it hit zip metadata
    numpy never reads; then the arrays read are exactly the ones written."""
    cache = FeatureCache(tmp_path, "m", "f")
    key = "bb" + "5" * 30
    hidden = np.arange(40, dtype=np.float32).reshape(10, 4)
    _write(cache, key, hidden=hidden, encoded_tokens=np.int64(9))
    good = cache._path(key).read_bytes()
    for i in range(0, len(good), 7):
        cache._path(key).write_bytes(good[:i] + bytes([good[i] ^ 0x10]) + good[i + 1 :])
        got = cache.get(key)
        assert got is None or (np.array_equal(got.hidden, hidden) and got.encoded_tokens == 9)


def test_entry_without_checksum_from_before_is_still_read(tmp_path):
    cache = FeatureCache(tmp_path, "m", "f")
    key = "aa" + "4" * 30
    _write(cache, key, hidden=np.ones((2, 3), np.float32), encoded_tokens=np.int64(7))
    got = cache.get(key)
    assert got is not None
    assert got.encoded_tokens == 7
