"""Weights viewed in mapped files: immutability, zero-copy uploads, dropping resident pages."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from omnitensor.backend.host import HostArrayBackend
from omnitensor.backend.host_memory import (
    ALIGNMENT,
    IN_PLACE_BYTES,
    MAPPED_BYTES,
    aligned_empty,
    immutable,
    is_aligned,
    prefetch,
    release,
    seal,
)
from omnitensor.errors import FormatError
from omnitensor.io.mapped import map_file


def _rss_file_kb() -> int:
    return _status_kb("RssFile")


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(key))


def test_mapped_and_sealed_arrays_are_immutable(tmp_path: Path) -> None:
    path = tmp_path / "w.bin"
    path.write_bytes(np.arange(64, dtype=np.float32).tobytes())
    mapped = np.asarray(map_file(path))
    view = mapped[16:48].view(np.float32).reshape(2, 4)
    assert immutable(mapped) and immutable(view)
    np.testing.assert_array_equal(view, np.arange(4, 12, dtype=np.float32).reshape(2, 4))
    with pytest.raises(ValueError):
        view[0, 0] = 1

    fresh = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert not immutable(fresh)
    fresh.flags.writeable = False
    assert not immutable(fresh)  # its owner may make it writable again
    for dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
        sealed = seal(np.arange(6).astype(dtype).reshape(2, 3))
        assert immutable(sealed) and sealed.dtype == dtype and sealed.shape == (2, 3)
        np.testing.assert_array_equal(sealed.astype(np.float32),
                                      np.arange(6, dtype=np.float32).reshape(2, 3))
        with pytest.raises(ValueError):
            sealed.flags.writeable = True


def test_host_upload_keeps_immutable_arrays_and_copies_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "w.bin"
    path.write_bytes(bytes(range(256)))
    mapped = np.asarray(map_file(path))[32:64]
    upload = HostArrayBackend.upload
    assert upload(None, mapped) is mapped  # type: ignore[arg-type]
    own = np.arange(4.0)
    copied = upload(None, own)  # type: ignore[arg-type]
    assert copied is not own and not np.shares_memory(copied, own)
    assert not copied.flags.writeable


def test_kept_arrays_start_on_a_cache_line(tmp_path: Path) -> None:
    """Sealed arrays and uploaded floats are `ALIGNMENT`-aligned; an aligned mapped float
    weight and mapped bytes (quantized blocks, repacked by the backend) are kept as they are,
    a small mapped float weight is copied out of the file (`IN_PLACE_BYTES`)."""
    for shape, dtype in (((3, 5), np.float32), ((0,), np.float64), ((), np.int8),
                         ((7,), ml_dtypes.bfloat16)):
        fresh = aligned_empty(shape, dtype)
        assert fresh.shape == shape and fresh.dtype == dtype
        assert is_aligned(fresh) or fresh.size == 0  # (an empty array has no first element)
    misplaced = np.arange(40, dtype=np.float32)[4:36]  # 16 bytes past wherever numpy put it
    if is_aligned(misplaced):
        misplaced = np.arange(40, dtype=np.float32)[1:33]
    sealed = seal(misplaced)
    assert is_aligned(sealed) and immutable(sealed)
    np.testing.assert_array_equal(sealed, misplaced)

    path = tmp_path / "w.bin"
    path.write_bytes(np.arange(IN_PLACE_BYTES // 2 + 64, dtype=np.float32).tobytes())
    mapped = np.asarray(map_file(path))
    upload = HostArrayBackend.upload
    on_line = mapped[ALIGNMENT:ALIGNMENT + IN_PLACE_BYTES].view(np.float32)
    assert upload(None, on_line) is on_line  # type: ignore[arg-type]
    off_line = mapped[32:160].view(np.float32)  # as a GGUF tensor 32 bytes past a line
    kept = upload(None, off_line)  # type: ignore[arg-type]
    assert kept is not off_line and is_aligned(kept) and immutable(kept)
    np.testing.assert_array_equal(kept, np.arange(8, 40, dtype=np.float32))
    blocks = mapped[32:160]
    assert upload(None, blocks) is blocks  # type: ignore[arg-type]
    small = mapped[ALIGNMENT:3 * ALIGNMENT].view(np.float32)  # a norm's weight: copied out
    copied = upload(None, small)  # type: ignore[arg-type]
    assert not np.shares_memory(copied, mapped) and is_aligned(copied) and immutable(copied)
    np.testing.assert_array_equal(copied, small)
    big = np.arange(2056, dtype=np.float32)[4:]  # copies of a page or more are aligned
    if is_aligned(big):
        big = np.arange(2056, dtype=np.float32)[1:2053]
    assert is_aligned(upload(None, big))  # type: ignore[arg-type]


def test_release_drops_resident_pages_of_a_mapped_array(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    size = 32 << 20
    path.write_bytes(np.ones(size, np.uint8).tobytes())
    mapped = np.asarray(map_file(path))
    assert prefetch(mapped)
    before = _rss_file_kb()
    assert int(mapped[::4096].sum()) == size // 4096  # touch every page
    touched = _rss_file_kb()
    assert touched - before > 24 << 10
    assert release(mapped)
    assert _rss_file_kb() - before < 8 << 10
    assert int(mapped[::4096].sum()) == size // 4096  # still readable: pages come back
    assert not release(np.ones(4)) and not prefetch(np.ones(4))  # ordinary memory: untouched


def test_map_file_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    with pytest.raises(FormatError, match="cannot be memory-mapped") as info:
        map_file(empty)
    assert info.value.path == str(empty)
    with pytest.raises(FormatError, match="cannot be memory-mapped"):
        map_file(tmp_path / "missing.bin")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_large_aligned_arrays_are_mapped_apart_and_given_back_when_dropped() -> None:
    small = aligned_empty((MAPPED_BYTES // 8,), np.float32)  # half the size: numpy's memory
    big = aligned_empty((64, 1 << 16), np.float32)  # 16 MiB
    assert MAPPED_BYTES <= big.nbytes
    assert is_aligned(small) and is_aligned(big, 4096) and big.flags.writeable
    assert big.flags.c_contiguous and big.shape == (64, 1 << 16)
    big[...] = 3.0
    rows = big[10:20]  # a view keeps the mapping alive
    assert not release(big) and not release(rows)  # never a file's pages: values stay
    np.testing.assert_array_equal(rows, 3.0)
    held = _status_kb("RssAnon")
    del big
    np.testing.assert_array_equal(rows, 3.0)
    del rows
    assert held - _status_kb("RssAnon") >= 12 * 1024  # the 16 MiB went back at once
