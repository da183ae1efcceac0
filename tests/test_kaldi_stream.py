"""Kaldi's basic object I/O (nnet_tools/kaldi/stream.py): round trips in both modes, Kaldi-written
files from the shared test data, and one clear error for bad or truncated data."""
from pathlib import Path

import numpy as np
import pytest

from nnet_tools.errors import NnetError
from nnet_tools.kaldi.stream import KaldiReader, KaldiWriter, read_kaldi_file, write_kaldi_file

MODELS = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "kaldi-models"
TRACT = MODELS / "tract-nnet3-raw"


def _write_all(binary):
    w = KaldiWriter(binary)
    w.token("<Start>")
    w.int32(-7)
    w.float(0.1)
    w.float(1e-300, double=True)
    w.bool(True)
    w.bool(False)
    w.vector(np.array([1.5, -2.25, 3e-8], dtype=np.float32))
    w.vector(np.array([1 / 3, 2.0]))
    w.vector(np.zeros(0, np.float32))
    w.matrix(np.arange(6, dtype=np.float32).reshape(2, 3) / 7)
    w.matrix(np.arange(4, dtype=np.float64).reshape(2, 2) / 3)
    w.matrix(np.zeros((0, 0), np.float32))
    w.int_vector([3, -1, 2 ** 31 - 1])
    w.int_vector([])
    w.token("</Start>")
    return w


@pytest.mark.parametrize("binary", [True, False])
def test_round_trip(binary, tmp_path):
    path = tmp_path / "obj"
    write_kaldi_file(path, _write_all(binary))
    r = read_kaldi_file(path)
    assert r.binary == binary and path.read_bytes().startswith(b"\0B") == binary
    assert r.peek_token() == "<Start>"
    r.expect("<Start>")
    assert r.int32() == -7
    assert r.float() == pytest.approx(0.1, rel=1e-7)
    assert r.float() == 1e-300
    assert r.bool() is True and r.bool() is False
    v = r.vector()
    np.testing.assert_array_equal(v.astype(np.float32), np.array([1.5, -2.25, 3e-8], dtype=np.float32))
    if binary:
        assert v.dtype == np.float32
    d = r.vector()
    assert d.dtype == np.float64 and d[0] == 1 / 3
    assert len(r.vector()) == 0
    np.testing.assert_array_equal(r.matrix().astype(np.float32), np.arange(6, dtype=np.float32).reshape(2, 3) / 7)
    np.testing.assert_array_equal(r.matrix(), np.arange(4, dtype=np.float64).reshape(2, 2) / 3)
    assert r.matrix().size == 0
    assert r.int_vector() == [3, -1, 2 ** 31 - 1]
    assert r.int_vector() == []
    r.expect("</Start>")
    assert r.at_eof()


def test_text_forms_kaldi_writes():
    w = _write_all(False)
    text = w.getvalue().decode()
    assert text.startswith("<Start> -7 0.1 1e-300 T F  [ 1.5 -2.25 2.99999989e-08 ]\n [ 0.3333333333333333 2 ]\n [ ]\n")
    assert " [\n  0 0.142857149 0.285714298 \n  0.428571433 0.571428597 0.714285731 ]\n" in text
    assert "[ 3 -1 2147483647 ]\n" in text


def test_errors_name_the_file_the_place_and_what_was_found():
    data = _write_all(True).getvalue()
    r = KaldiReader(data[:40], "cut.bin")
    r.expect("<Start>")
    with pytest.raises(NnetError, match=r"cut\.bin: at byte 10: expected token <Other>, found '\\x04"):
        r.expect("<Other>")
    r.int32(), r.float(), r.float(), r.bool(), r.bool()
    with pytest.raises(NnetError, match=r"cut\.bin: at byte \d+: expected a vector \(FV or DV\) of 3 values, found the end of the data \(truncated\)"):
        r.vector()
    t = KaldiReader(b"<A> 12\n <B> x1 [ 1 2\n 3 ]\n", "t.txt")
    t.expect("<A>")
    assert t.int32() == 12
    with pytest.raises(NnetError, match=r"t\.txt: at line 2, column 2: expected token <C>, found '<B>'"):
        t.expect("<C>")
    t.expect("<B>")
    with pytest.raises(NnetError, match=r"t\.txt: at line 2, column 6: expected an integer, found 'x1'"):
        t.int32()
    t.pos = t.data.index(b"[")
    with pytest.raises(NnetError, match="a newline inside the brackets"):
        t.vector()
    with pytest.raises(NnetError, match="expected a bool"):
        KaldiReader(b"\0BX", "b").bool()
    with pytest.raises(NnetError, match="compressed matrix"):
        KaldiReader(b"\0BCM ", "c").matrix()


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(NnetError, match="nope: no such file"):
        read_kaldi_file(tmp_path / "nope")
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(NnetError, match="empty: empty file"):
        read_kaldi_file(tmp_path / "empty")


def test_reads_a_kaldi_written_binary_nnet_and_its_text_twin():
    """tract's model.raw was written by Kaldi; model.raw.txt holds the same values in text."""
    case = TRACT / "ngaffine_40x10_T15_S1"
    seen = {}
    for name in ("model.raw", "model.raw.txt"):
        r = read_kaldi_file(case / name)
        assert r.binary == (name == "model.raw")
        r.expect("<Nnet3>")
        assert r.line() == ""  # the rest of the <Nnet3> line; then the config lines, to a blank one
        while r.line():
            pass
        assert r.peek_token() == "<NumComponents>"
        r.pos = r.data.index(b"<LinearParams>")
        r.expect("<LinearParams>")
        linear = r.matrix()
        r.expect("<BiasParams>")
        seen[name] = (linear, r.vector())
    (wb, bb), (wt, bt) = seen["model.raw"], seen["model.raw.txt"]
    assert wb.dtype == np.float32 and wb.shape == (10, 40) and bb.shape == (10,)
    np.testing.assert_array_equal(wb, wt.astype(np.float32))
    np.testing.assert_array_equal(bb, bt.astype(np.float32))
