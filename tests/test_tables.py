"""Kaldi table I/O: real Kaldi-written arks, writers' round trips and atomicity, pipes, errors."""
import gzip
import logging
import os
import subprocess
import sys
from pathlib import Path

import kaldi_native_io
import numpy as np
import pytest

from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.data.tables import (IntVectorWriter, MatrixWriter, RandomAccessIntVectors,
                               RandomAccessMatrices, read_int_vectors, read_matrices, read_vectors)

ARKS = Path(__file__).resolve().parents[2] / "shared" / "testdata" / "kaldi-arks"
SET_A = ARKS / "kaldi-io-for-python"  # its scp files name tests/data/<file>: read from here
SET_B = ARKS / "kaldi-native-io-generated"  # its scp files name <file>: read from here
METHODS = ["speech_feature", "automatic", "two_byte_auto", "one_byte_auto", "two_byte_signed_int",
           "one_byte_unsigned_int", "one_byte_zero_one"]
TEXT_TOLERANCE = 7.6294e-6  # README: Kaldi's text arks hold the binary values within 7.6e-6
KALDI_NOISE = "kaldi_native_io/csrc"  # in every C++ log header; must never reach the terminal

needs_arks = pytest.mark.skipif(not ARKS.is_dir(), reason=f"shared test data not found at {ARKS}")


@pytest.fixture
def set_a(monkeypatch):
    monkeypatch.chdir(SET_A)
    return Path("tests/data")


@pytest.fixture
def set_b(monkeypatch):
    monkeypatch.chdir(SET_B)
    return Path(".")


def kaldi_direct(reader, rspecifier):
    """kaldi-native-io's own reading, copied since its arrays view memory it reuses."""
    with reader(rspecifier) as r:
        return {key: np.array(value, copy=True) for key, value in r}


def assert_same_tables(ours, expected, atol=0.0):
    assert list(ours) == list(expected)
    for key, value in expected.items():
        assert ours[key].dtype == value.dtype, key
        if atol:
            np.testing.assert_allclose(ours[key], value, rtol=0, atol=atol, err_msg=key)
        else:
            np.testing.assert_array_equal(ours[key], value, err_msg=key)


def one_line_error(excinfo, *parts):
    message = str(excinfo.value)
    assert "\n" not in message and KALDI_NOISE not in message, message
    for part in parts:
        assert part in message, (part, message)
    return message


# --- set A: files written by Kaldi tools -----------------------------------------------------

@needs_arks
def test_set_a_float_matrices(set_a):
    feats = dict(read_matrices(f"ark:{set_a}/feats.ark"))
    assert len(feats) == 10 and all(m.dtype == np.float32 and m.shape[1] == 13 for m in feats.values())
    assert feats["AMI_ES2011a_H00_FEE041_0003427_0003714"].shape == (285, 13)
    assert_same_tables(feats, kaldi_direct(kaldi_native_io.SequentialFloatMatrixReader,
                                           f"ark:{set_a}/feats.ark"))

    text = dict(read_matrices(f"ark:{set_a}/feats_ascii.ark"))
    assert_same_tables(text, {k: feats[k] for k in list(feats)[:2]}, atol=TEXT_TOLERANCE)
    assert_same_tables(text, kaldi_direct(kaldi_native_io.SequentialFloatMatrixReader,
                                          f"ark:{set_a}/feats_ascii.ark"))


@needs_arks
def test_set_a_compressed_matrices(set_a):
    compressed = dict(read_matrices(f"ark:{set_a}/feats_compressed.ark"))
    assert_same_tables(compressed, kaldi_direct(kaldi_native_io.SequentialFloatMatrixReader,
                                                f"ark:{set_a}/feats_compressed.ark"))
    feats = dict(read_matrices(f"ark:{set_a}/feats.ark"))
    assert_same_tables(compressed, feats, atol=1.1e-5)  # README: decodes within 1.1e-5


@needs_arks
def test_set_a_int_vectors(set_a):
    binary = dict(read_int_vectors(f"ark:{set_a}/ali.ark"))
    assert len(binary) == 10 and all(v.dtype == np.int32 and v.ndim == 1 for v in binary.values())
    direct = {k: np.asarray(v, dtype=np.int32) for k, v in
              kaldi_native_io.SequentialInt32VectorReader(f"ark:{set_a}/ali.ark")}
    assert_same_tables(binary, direct)
    assert_same_tables(dict(read_int_vectors(f"ark:{set_a}/ali_ascii.ark")), binary)


@needs_arks
def test_set_a_float_vectors(set_a):
    binary = dict(read_vectors(f"ark:{set_a}/conf.ark"))
    assert len(binary) == 10
    assert_same_tables(binary, kaldi_direct(kaldi_native_io.SequentialFloatVectorReader,
                                            f"ark:{set_a}/conf.ark"))
    # The text file starts "1 1 1 ...": a reader that guesses int32 from it fails.
    assert_same_tables(dict(read_vectors(f"ark:{set_a}/conf_ascii.ark")), binary)
    assert_same_tables(dict(read_vectors(f"scp:{set_a}/conf.scp")), binary)


@needs_arks
@pytest.mark.parametrize("name", ["feats.scp", "feats_compressed.scp", "feats_ascii.scp"])
def test_set_a_scp_ranges_follow_kaldi(set_a, tmp_path, name):
    """Lines 1-4 are valid Kaldi (full rows '[:]', inclusive '[0:5]'); line 5's '[:,7:13]' is not."""
    lines = (set_a / name).read_text().splitlines()
    with pytest.raises(NnetError) as excinfo:
        list(read_matrices(f"scp:{set_a}/{name}"))
    one_line_error(excinfo, name, "AMI_ES2011a_H00_FEE041_0003714_0003915_slice", "Invalid range specifier")

    valid = tmp_path / name
    valid.write_text("\n".join(lines[:4]) + "\n")
    entries = list(read_matrices(f"scp:{valid}"))
    ark = lines[0].split()[1].split(":")[0]
    whole = dict(read_matrices(f"ark:{ark}"))
    utt = "AMI_ES2011a_H00_FEE041_0003714_0003915"
    assert [k for k, _ in entries[:2]] == list(whole)[:2]
    np.testing.assert_array_equal(entries[1][1], whole[utt])
    np.testing.assert_array_equal(entries[2][1], whole[utt])  # [:]
    np.testing.assert_array_equal(entries[3][1], whole[utt][0:6])  # Kaldi's [0:5] is inclusive


@needs_arks
def test_set_a_random_access_refuses_duplicate_keys(set_a):
    with pytest.raises(NnetError) as excinfo:
        RandomAccessMatrices(f"scp:{set_a}/feats_ascii.scp")
    one_line_error(excinfo, "feats_ascii.scp", "duplicate key", "_slice2")


def test_a_duplicate_key_is_refused_in_order_too(tmp_path):
    """A key twice in an scp (or ark) read in order: one line naming the file and the key, as
    Kaldi's random-access readers say it (read in order, it was taken as another utterance)."""
    with MatrixWriter(f"ark,scp:{tmp_path}/f.ark,{tmp_path}/f.scp") as w:
        for key in ("a", "b"):
            w.write(key, np.zeros((2, 3), np.float32))
    lines = (tmp_path / "f.scp").read_text().splitlines()
    (tmp_path / "dup.scp").write_text("\n".join(lines + lines[:1]) + "\n")
    assert [k for k, _ in read_matrices(f"scp:{tmp_path}/f.scp")] == ["a", "b"]
    with pytest.raises(NnetError) as excinfo:
        list(read_matrices(f"scp:{tmp_path}/dup.scp"))
    one_line_error(excinfo, "dup.scp", "duplicate key 'a'")
    with IntVectorWriter(f"ark:{tmp_path}/t.ark") as w:
        for key in ("a", "b", "a"):
            w.write(key, np.zeros(2, np.int32))
    with pytest.raises(NnetError) as excinfo:
        list(read_int_vectors(f"ark:{tmp_path}/t.ark"))
    one_line_error(excinfo, "t.ark", "duplicate key 'a'")


@needs_arks
def test_set_a_random_access(set_a):
    feats = dict(read_matrices(f"ark:{set_a}/feats.ark"))
    with RandomAccessMatrices(f"scp:{set_a}/feats.scp") as table:
        for utt in list(feats)[:2]:
            assert utt in table
            np.testing.assert_array_equal(table[utt], feats[utt])
        assert "AMI_nope" not in table
    ali = dict(read_int_vectors(f"ark:{set_a}/ali_ascii.ark"))
    with RandomAccessIntVectors(f"ark:{set_a}/ali.ark") as table:
        for utt in reversed(list(ali)):
            np.testing.assert_array_equal(table[utt], ali[utt])


# --- set B: every compression method and double precision, written by Kaldi's I/O code ---------

@needs_arks
@pytest.mark.parametrize("method", METHODS)
def test_set_b_compressed_matrices_decode_exactly_as_kaldi(set_b, method):
    expected = np.load(f"expected_compressed_{method}.npz")
    ours = dict(read_matrices(f"ark:compressed_{method}.ark"))
    assert len(ours) == 4
    assert_same_tables(ours, {k: expected[f"decoded_float32/{k}"] for k in ours})
    assert_same_tables(dict(read_matrices(f"scp:compressed_{method}.scp")), ours)
    assert_same_tables(ours, kaldi_direct(kaldi_native_io.SequentialFloatMatrixReader,
                                          f"ark:compressed_{method}.ark"))


@needs_arks
def test_set_b_double_matrices_and_vectors_read_as_float32(set_b):
    expected = np.load("expected_double.npz")
    for kind, read in [("matrix", read_matrices), ("vector", read_vectors)]:
        want = {k.split("/", 1)[1]: v.astype(np.float32) for k, v in expected.items()
                if k.startswith(kind + "/")}
        assert len(want) == 4
        assert_same_tables(dict(read(f"ark:double_{kind}.ark")), want)
        assert_same_tables(dict(read(f"scp:double_{kind}.scp")), want)
        assert_same_tables(dict(read(f"ark:double_{kind}.text.ark")), want, atol=TEXT_TOLERANCE)


@needs_arks
def test_every_shared_ark_is_covered():
    """A file added to the shared data must get a test here (or a stated reason to skip)."""
    covered = {f"kaldi-io-for-python/tests/data/{n}" for n in [
        "feats.ark", "feats_ascii.ark", "feats_compressed.ark", "ali.ark", "ali_ascii.ark",
        "conf.ark", "conf_ascii.ark", "conf.scp", "feats.scp", "feats_compressed.scp",
        "feats_ascii.scp"]}
    covered |= {f"kaldi-native-io-generated/{kind}{suffix}" for kind in ["double_matrix", "double_vector"]
                for suffix in [".ark", ".scp", ".text.ark"]}
    covered |= {f"kaldi-native-io-generated/{prefix}{m}{suffix}" for m in METHODS
                for prefix, suffix in [("compressed_", ".ark"), ("compressed_", ".scp"),
                                       ("expected_compressed_", ".npz")]}
    covered |= {"kaldi-native-io-generated/expected_double.npz", "README.md", "MD5SUMS"}
    # No Posterior or pair-vector readers in nnet-tools: these only serve as wrong-type input below.
    not_read = {"kaldi-io-for-python/tests/data/1.cnet", "kaldi-io-for-python/tests/data/1.cntime"}
    present = {str(p.relative_to(ARKS)) for p in ARKS.rglob("*") if p.is_file()}
    assert present == covered | not_read


# --- writers -----------------------------------------------------------------------------------

def some_matrices():
    rng = np.random.default_rng(0)
    return {f"utt{i}": rng.standard_normal((3 + i, 5)).astype(np.float32) for i in range(4)}


def test_matrix_writer_binary_round_trip(tmp_path):
    mats = some_matrices()
    with MatrixWriter(f"ark:{tmp_path}/m.ark") as w:
        for key, value in mats.items():
            w.write(key, value)
    assert_same_tables(dict(read_matrices(f"ark:{tmp_path}/m.ark")), mats)
    w.close()  # closing again is harmless


def test_matrix_writer_text_round_trip(tmp_path):
    mats = some_matrices()
    with MatrixWriter(f"ark,t:{tmp_path}/m.txt") as w:
        for key, value in mats.items():
            w.write(key, value.astype(np.float64))  # converted to float32
    assert (tmp_path / "m.txt").read_text().startswith("utt0  [\n")
    back = dict(read_matrices(f"ark:{tmp_path}/m.txt"))
    assert list(back) == list(mats)
    for key in mats:
        np.testing.assert_allclose(back[key], mats[key], rtol=1e-5, atol=1e-6)


def test_ark_scp_writer_names_the_final_ark_with_offsets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mats = some_matrices()
    with MatrixWriter("ark,scp:egs/a.ark,egs/a.scp") as w:
        for key, value in mats.items():
            w.write(key, value)
        assert sorted(os.listdir("egs"))[0].startswith(".tmp.")  # only temp names so far
    assert sorted(os.listdir("egs")) == ["a.ark", "a.scp"]
    lines = Path("egs/a.scp").read_text().splitlines()
    assert [line.split()[0] for line in lines] == list(mats)
    assert all(line.split()[1].startswith("egs/a.ark:") for line in lines)
    data = Path("egs/a.ark").read_bytes()
    for line in lines:  # each offset points just past "<key> "
        key, location = line.split()
        offset = int(location.rsplit(":", 1)[1])
        assert data[offset - len(key) - 1:offset] == f"{key} ".encode()
    assert_same_tables(dict(read_matrices("scp:egs/a.scp")), mats)
    with RandomAccessMatrices("scp:egs/a.scp") as table:
        np.testing.assert_array_equal(table["utt2"], mats["utt2"])


def test_int_vector_writer_round_trips(tmp_path):
    vectors = {"a": np.array([3, 1, 4, 1, 5], np.int64), "b": np.array([], np.int32), "c": [9, 2]}
    for spec in [f"ark:{tmp_path}/v.ark", f"ark,t:{tmp_path}/v.txt", f"ark,scp:{tmp_path}/w.ark,{tmp_path}/w.scp"]:
        with IntVectorWriter(spec) as w:
            for key, value in vectors.items():
                w.write(key, value)
    assert (tmp_path / "v.txt").read_text() == "a 3 1 4 1 5 \nb \nc 9 2 \n"
    want = {k: np.asarray(v, dtype=np.int32) for k, v in vectors.items()}
    for spec in [f"ark:{tmp_path}/v.ark", f"ark:{tmp_path}/v.txt", f"scp:{tmp_path}/w.scp"]:
        assert_same_tables(dict(read_int_vectors(spec)), want)


@pytest.mark.parametrize("spec", ["ark:out.ark", "ark,t:out.ark", "ark,scp:out.ark,out.scp"])
def test_writer_leaves_nothing_when_the_block_fails(tmp_path, monkeypatch, spec):
    monkeypatch.chdir(tmp_path)
    Path("out.ark").write_bytes(b"precious")
    with pytest.raises(ZeroDivisionError):
        with MatrixWriter(spec) as w:
            w.write("utt", np.ones((2, 2)))
            1 / 0
    assert sorted(os.listdir(".")) == ["out.ark"]
    assert Path("out.ark").read_bytes() == b"precious"


def test_writer_dropped_unclosed_leaves_nothing(tmp_path):
    w = MatrixWriter(f"ark,scp:{tmp_path}/m.ark,{tmp_path}/m.scp")
    w.write("utt", np.ones((2, 2)))
    del w
    assert os.listdir(tmp_path) == []


def test_failing_output_pipe_is_an_error():
    with pytest.raises(NnetError) as excinfo:
        with MatrixWriter("ark:| cat > /dev/null; exit 3") as w:
            w.write("utt", np.ones((2, 2)))
    one_line_error(excinfo, "ark:| cat > /dev/null; exit 3", "nonzero return status")


def test_writer_rejects_bad_input(tmp_path):
    with MatrixWriter(f"ark:{tmp_path}/m.ark") as w:
        with pytest.raises(NnetError) as excinfo:
            w.write("utt", np.ones(3))
        one_line_error(excinfo, "m.ark", "'utt'", "2-D")
        with pytest.raises(NnetError) as excinfo:
            w.write("two words", np.ones((1, 1)))
        one_line_error(excinfo, "m.ark", "'two words'", "invalid key")
    with IntVectorWriter(f"ark:{tmp_path}/v.ark") as w:
        with pytest.raises(NnetError) as excinfo:
            w.write("utt", np.ones(3))
        one_line_error(excinfo, "v.ark", "'utt'", "integer")
    for spec in ["scp:x.scp", "scp,ark:x.ark,x.scp", "ark,scp:x.ark", "ark,scp:-,x.scp", "x.ark", "ark:"]:
        with pytest.raises(NnetError) as excinfo:
            MatrixWriter(spec)
        one_line_error(excinfo, spec)


# --- pipes and standard streams ------------------------------------------------------------

def test_pipes(tmp_path, capfd):
    mats = some_matrices()
    with MatrixWriter(f"ark:| gzip -c > {tmp_path}/m.ark.gz") as w:
        for key, value in mats.items():
            w.write(key, value)
    assert_same_tables(dict(read_matrices(f"ark:gunzip -c {tmp_path}/m.ark.gz |")), mats)
    (tmp_path / "m.ark").write_bytes(gzip.decompress((tmp_path / "m.ark.gz").read_bytes()))
    assert_same_tables(dict(read_matrices(f"ark:cat {tmp_path}/m.ark |")), mats)
    capfd.readouterr()
    # Stopping early kills the command with SIGPIPE: not an error, and nothing to say about it.
    with MatrixWriter(f"ark:{tmp_path}/big.ark") as w:  # more than a pipe buffer holds
        for i in range(20):
            w.write(f"big{i}", np.zeros((100, 100)))
    key, _ = next(iter(read_matrices(f"ark:cat {tmp_path}/big.ark |")))
    assert key == "big0"
    assert capfd.readouterr().err == ""


def test_failing_pipe_is_an_error(tmp_path, capfd):
    with pytest.raises(NnetError) as excinfo:
        list(read_matrices(f"ark:gunzip -c {tmp_path}/missing.gz |"))
    one_line_error(excinfo, "missing.gz", "nonzero return status")
    err = capfd.readouterr().err
    assert "missing.gz" in err and KALDI_NOISE not in err  # gunzip's own complaint still shows


# A program that copies table argv[1] to argv[2], scaling the values by argv[3].
COPY = ("import sys; from nnet_tools.data.tables import MatrixWriter, read_matrices\n"
        "with MatrixWriter(sys.argv[2]) as w:\n"
        "    for key, value in read_matrices(sys.argv[1]):\n"
        "        w.write(key, value * float(sys.argv[3]))\n")


def test_stdin_to_stdout_copy(tmp_path):
    mats = some_matrices()
    with MatrixWriter(f"ark:{tmp_path}/in.ark") as w:
        for key, value in mats.items():
            w.write(key, value)
    with open(tmp_path / "in.ark", "rb") as stdin, open(tmp_path / "out.ark", "wb") as stdout:
        subprocess.run([sys.executable, "-c", COPY, "ark:-", "ark:-", "2"], stdin=stdin, stdout=stdout, check=True)
    assert_same_tables(dict(read_matrices(f"ark:{tmp_path}/out.ark")), {k: v * 2 for k, v in mats.items()})


def test_fifos_and_the_standard_streams_by_name(tmp_path):
    """/dev/stdin, <(cmd), a named pipe: Kaldi opens them as any file. /dev/stdout into a pipe
    (and >(cmd)) is written in place: it was once resolved to a /proc path that is no file."""
    with MatrixWriter(f"ark:{tmp_path}/in.ark") as w:
        for key, value in some_matrices().items():
            w.write(key, value)
    os.mkfifo(tmp_path / "fifo")
    copy = f'{sys.executable} -c "$COPY"'
    # The writer into the FIFO is killed at the end: if the reader never opened it, it would wait forever.
    for shell, out in [(f"cat in.ark > fifo & {copy} ark:fifo ark:/dev/stdout 1 | {copy} ark:/dev/stdin ark:out.ark 1; "
                        f"rc=$?; kill $! 2>/dev/null; exit $rc", "out.ark"),
                       (f"{copy} ark:<(cat in.ark) ark:>(cat > sub.ark) 1; wait $!", "sub.ark")]:
        subprocess.run(["bash", "-c", shell], cwd=tmp_path, env=dict(os.environ, COPY=COPY), check=True)
        assert (tmp_path / out).read_bytes() == (tmp_path / "in.ark").read_bytes()


def test_a_pipe_whose_first_entry_is_bad_is_one_line(tmp_path, capfd):
    """Opening reads the first entry. For a pipe that once ran with Kaldi's multi-line
    messages going to the terminal; the command's own stderr still does."""
    with MatrixWriter(f"ark:| gzip -c > {tmp_path}/m.ark.gz") as w:
        w.write("utt", np.ones((2, 2)))
    with pytest.raises(NnetError) as excinfo:   # gunzip forgotten
        list(read_matrices(f"ark:cat {tmp_path}/m.ark.gz; echo said >&2 |"))
    one_line_error(excinfo, "Invalid archive file format")
    err = capfd.readouterr().err
    assert KALDI_NOISE not in err and "said" in err


def test_writers_refuse_names_kaldi_refuses(tmp_path):
    for spec, part in [(f"ark: {tmp_path}/m.ark", "begins or ends with a space"),
                       (f"ark,scp:{tmp_path}/m.ark, {tmp_path}/m.scp", "begins or ends with a space"),
                       (f"ark:{tmp_path}/m.ark:12", "byte offset")]:
        with pytest.raises(NnetError) as excinfo:
            MatrixWriter(spec)
        one_line_error(excinfo, spec, part)
    assert os.listdir(tmp_path) == []


# --- read errors: one line naming the table, the key and the problem, and no C++ noise ------

def test_missing_files_and_bad_rspecifiers(tmp_path, capfd):
    for spec, part in [(f"ark:{tmp_path}/none.ark", "no such file"),
                       (f"scp:{tmp_path}/none.scp", "no such file"),
                       (f"ark:{tmp_path}", "is a directory"),
                       ("foo:bar", "expected ark:FILE or scp:FILE"),
                       ("feats.ark", "expected ark:FILE or scp:FILE"),
                       ("scp:", "no file name"),
                       (f"ark,zz:{tmp_path}/none.ark", "no such file")]:
        for open_table in [read_matrices, read_int_vectors, RandomAccessMatrices, RandomAccessIntVectors]:
            with pytest.raises(NnetError) as excinfo:
                open_table(spec)  # fails on opening, before any iteration
            one_line_error(excinfo, spec, part)
    assert capfd.readouterr().err == ""


def test_unreadable_files_say_why(tmp_path, capfd, monkeypatch):
    """Kaldi's "Failed to open file X" said neither whether X exists nor why it could not be read."""
    from nnet_tools.data.tables import specifiers as tables   # where input files are opened to check them
    with MatrixWriter(f"ark,scp:{tmp_path}/m.ark,{tmp_path}/m.scp") as w:
        w.write("utt1", np.ones((1, 1)))
    scp = tmp_path / "m.scp"
    scp.write_text(scp.read_text().replace(str(tmp_path / "m.ark"), str(tmp_path / "gone.ark")))
    with pytest.raises(NnetError) as excinfo:
        list(read_matrices(f"scp:{scp}"))
    one_line_error(excinfo, f"scp:{scp}: key 'utt1'", "gone.ark:", ": No such file or directory")
    real_open = open

    def denied(path, *args, **kwargs):   # root reads a mode-000 file: deny as for another user
        if str(path) == str(tmp_path / "m.ark"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(tables, "open", denied, raising=False)
    with pytest.raises(NnetError) as excinfo:
        read_matrices(f"ark:{tmp_path}/m.ark")
    one_line_error(excinfo, f"ark:{tmp_path}/m.ark", "cannot read", "Permission denied")
    assert capfd.readouterr().err == ""


def test_missing_key(tmp_path, capfd):
    with MatrixWriter(f"ark,scp:{tmp_path}/m.ark,{tmp_path}/m.scp") as w:
        w.write("utt1", np.ones((1, 1)))
    for spec in [f"ark:{tmp_path}/m.ark", f"scp:{tmp_path}/m.scp"]:
        with RandomAccessMatrices(spec) as table:
            with pytest.raises(NnetError) as excinfo:
                table["utt2"]
            one_line_error(excinfo, spec, "'utt2'", "not found")
    assert capfd.readouterr().err == ""


def test_permissive_random_access_skips_what_does_not_load(tmp_path, capfd):
    """'p': an scp entry that does not load, or an archive cut short, is a missing key, as in
    Kaldi; without it, an error. A warning about a value read all the same is no failure."""
    with MatrixWriter(f"ark,scp:{tmp_path}/m.ark,{tmp_path}/m.scp") as w:
        w.write("utt1", np.ones((2, 2)))
        w.write("utt2", np.ones((300, 300)))
    scp = tmp_path / "m.scp"
    scp.write_text(scp.read_text() + f"utt3 {tmp_path}/gone.ark:5\n")
    (tmp_path / "cut.ark").write_bytes((tmp_path / "m.ark").read_bytes()[:-10])
    for spec, missing in [(f"scp,p:{scp}", "utt3"), (f"ark,p:{tmp_path}/cut.ark", "utt2")]:
        with RandomAccessMatrices(spec) as table:
            assert "utt1" in table and missing not in table
    with RandomAccessMatrices(f"scp:{scp}") as table:
        with pytest.raises(NnetError) as excinfo:
            table["utt3"]
        one_line_error(excinfo, "gone.ark")
    with RandomAccessMatrices(f"ark:{tmp_path}/cut.ark") as table:
        with pytest.raises(NnetError) as excinfo:
            "utt2" in table
        one_line_error(excinfo, "cut.ark", "Failed to read matrix")
    (tmp_path / "inf.ark").write_text("u1 [ 1 2 ]\nu2 [ 3 inf ]\n")
    with RandomAccessMatrices(f"ark:{tmp_path}/inf.ark") as table:
        assert "u9" not in table
    assert KALDI_NOISE not in capfd.readouterr().err


def test_corrupt_and_mistyped_data(tmp_path, capfd):
    mats = some_matrices()
    with MatrixWriter(f"ark:{tmp_path}/m.ark") as w:
        for key, value in mats.items():
            w.write(key, value)
    data = (tmp_path / "m.ark").read_bytes()
    (tmp_path / "cut.ark").write_bytes(data[:-10])
    with pytest.raises(NnetError) as excinfo:  # Kaldi itself just stops early here
        list(read_matrices(f"ark:{tmp_path}/cut.ark"))
    one_line_error(excinfo, "cut.ark", "after key 'utt2'", "Failed to read matrix")

    (tmp_path / "m.scp").write_text(f"utt0 {tmp_path}/gone.ark:5\n")
    with pytest.raises(NnetError) as excinfo:
        list(read_matrices(f"scp:{tmp_path}/m.scp"))
    one_line_error(excinfo, "m.scp", "key 'utt0'", "gone.ark")

    with pytest.raises(NnetError) as excinfo:
        list(read_int_vectors(f"ark:{tmp_path}/m.ark"))
    one_line_error(excinfo, "m.ark", "read error")
    # A binary header with -3 rows: Kaldi's assertion and its expression (a stray line before).
    (tmp_path / "neg.ark").write_bytes(b"utt1 \0BFM \4" + (-3).to_bytes(4, "little", signed=True) + b"\4\2\0\0\0")
    with pytest.raises(NnetError) as excinfo:
        list(read_matrices(f"ark:{tmp_path}/neg.ark"))
    one_line_error(excinfo, "neg.ark", "Check failed: rows > 0 && cols > 0")
    assert "x: rows" not in capfd.readouterr().err
    if ARKS.is_dir():
        for name in ["1.cnet", "1.cntime"]:
            with pytest.raises(NnetError) as excinfo:
                list(read_matrices(f"ark:{SET_A}/tests/data/{name}"))
            one_line_error(excinfo, name, "Failed to read matrix")
    assert KALDI_NOISE not in capfd.readouterr().err


def test_values_do_not_alias_kaldi_memory(tmp_path):
    """kaldi-native-io's arrays view a buffer it reuses; ours must survive the next read."""
    mats = some_matrices()
    with MatrixWriter(f"ark:{tmp_path}/m.ark") as w:
        for key, value in mats.items():
            w.write(key, value)
    kept = list(read_matrices(f"ark:{tmp_path}/m.ark"))
    for key, value in kept:
        np.testing.assert_array_equal(value, mats[key])


def test_kaldi_warnings_become_one_log_line(tmp_path, capfd):
    with MatrixWriter(f"ark,scp:{tmp_path}/m.ark,{tmp_path}/m.scp") as w:
        w.write("utt", np.arange(10).reshape(5, 2))
    scp = tmp_path / "m.scp"
    scp.write_text(scp.read_text().strip() + "[0:6]\n")  # Kaldi allows 3 rows too many, with a warning
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    try:
        [(key, value)] = read_matrices(f"scp:{scp}")
    finally:
        logger.removeHandler(handler)
    np.testing.assert_array_equal(value, np.arange(10).reshape(5, 2))
    assert [(r.levelname, r.getMessage()) for r in records] == [
        ("WARNING", f"scp:{scp}: Row range 0:6 goes beyond the number of rows of the matrix 5")]
    assert KALDI_NOISE not in capfd.readouterr().err
