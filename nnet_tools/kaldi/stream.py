"""Kaldi's basic object I/O (src/base/io-funcs.cc, kaldi-vector.cc, kaldi-matrix.cc), binary and text.

A binary object file starts with ``\\0B``; the rest is a sequence of tokens (a word and one space),
basic types (binary: a size byte, then the little-endian value; text: the value and a space),
vectors (binary: ``FV``/``DV``, an int32 size, the raw values; text: `` [ 1 2 3 ]``), matrices
(binary: ``FM``/``DM``, rows, cols, the raw values; text: `` [`` then one line per row, ``]``) and
integer vectors (binary: a size byte, an int32 count, the raw values; text: ``[ 1 2 3 ]``).

``KaldiReader`` reads such a file; every error is one NnetError naming the file, the byte offset
(binary) or line and column (text), what was expected and what was found, "truncated" when the
data ends first. ``KaldiWriter`` writes the same forms: floats in text with 9 significant digits
(float32 read back exactly), 17 for float64.
"""
import os
import struct

import numpy as np

from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path

BINARY_HEADER = b"\0B"
_SPACE = b" \t\n\r\v\f"
_INT = {4: "<i4", 8: "<i8", 1: "<i1", 2: "<i2"}


def _shown(found):
    if not found:
        return "the end of the data (truncated)"
    text = found.decode("latin-1")
    return repr(text[:20] + ("..." if len(text) > 20 else ""))


class KaldiReader:
    """Reads Kaldi objects from ``data`` (a whole file); ``path`` names it in errors."""

    def __init__(self, data, path):
        self.data, self.path = bytes(data), str(path)
        self.binary = self.data.startswith(BINARY_HEADER)
        self.pos = 2 if self.binary else 0

    # --- errors -------------------------------------------------------------------------------

    def where(self, pos=None):
        pos = self.pos if pos is None else pos
        if self.binary:
            return f"byte {pos}"
        line = self.data.count(b"\n", 0, pos) + 1
        column = pos - self.data.rfind(b"\n", 0, pos)
        return f"line {line}, column {column}"

    def fail(self, expected, found=None, pos=None):
        """The NnetError for ``expected`` not being there; ``found`` defaults to what is next."""
        pos = self.pos if pos is None else pos
        if found is None:
            found = _shown(self.data[pos:pos + 20].split()[0] if self.data[pos:].split() else b"")
        return NnetError(f"{self.path}: at {self.where(pos)}: expected {expected}, found {found}")

    # --- low level ----------------------------------------------------------------------------

    def _skip_space(self):
        data, n = self.data, len(self.data)
        while self.pos < n and data[self.pos] in _SPACE:
            self.pos += 1

    def _take(self, n, what):
        if self.pos + n > len(self.data):
            raise self.fail(what, "the end of the data (truncated)")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def _word(self, what):
        """The next whitespace-delimited word (whitespace before it skipped)."""
        self._skip_space()
        start, data, n = self.pos, self.data, len(self.data)
        while self.pos < n and data[self.pos] not in _SPACE:
            self.pos += 1
        if self.pos == start:
            raise self.fail(what, "the end of the data (truncated)")
        return data[start:self.pos]

    def line(self):
        """The rest of the current line, without its newline (the nnet3 config lines)."""
        end = self.data.find(b"\n", self.pos)
        if end < 0:
            raise self.fail("a newline", "the end of the data (truncated)")
        text = self.data[self.pos:end]
        self.pos = end + 1
        try:
            return text.rstrip(b"\r").decode()
        except UnicodeDecodeError:
            raise self.fail("a line of text", _shown(text), end - len(text)) from None

    # --- tokens -------------------------------------------------------------------------------

    def token(self):
        """ReadToken: a word and the one whitespace character after it."""
        start = self.pos
        word = self._word("a token")
        if self.pos < len(self.data):
            self.pos += 1  # the space after the token
        try:
            return word.decode()
        except UnicodeDecodeError:
            raise self.fail("a token", _shown(word), start) from None

    def peek_token(self):
        """The next token, not consumed ('' at the end of the data)."""
        pos = self.pos
        try:
            return self.token()
        except NnetError:
            return ""
        finally:
            self.pos = pos

    def expect(self, token):
        start = self.pos
        self._skip_space()
        at = self.pos
        found = self._word("a token") if self.pos < len(self.data) else b""
        if found != token.encode():
            self.pos = start
            raise self.fail(f"token {token}", _shown(found), at)
        if self.pos < len(self.data):
            self.pos += 1

    # --- basic types --------------------------------------------------------------------------

    def _size_byte(self, allowed, what):
        size = struct.unpack("<b", self._take(1, what))[0]
        if size not in allowed:
            self.pos -= 1
            raise self.fail(what, f"a value of size byte {size}")
        return size

    def _text_value(self, parse, what):
        start = self.pos
        word = self._word(what)
        try:
            return parse(word)
        except ValueError:
            raise self.fail(what, _shown(word), start) from None

    def int32(self):
        if self.binary:
            self._size_byte((4,), "an int32")
            return struct.unpack("<i", self._take(4, "an int32"))[0]
        return self._text_value(int, "an integer")

    def float(self):
        """A float or double, as written."""
        if self.binary:
            size = self._size_byte((4, 8), "a float")
            return struct.unpack("<f" if size == 4 else "<d", self._take(size, "a float"))[0]
        return self._text_value(float, "a number")

    def bool(self):
        if not self.binary:
            self._skip_space()
        c = self._take(1, "a bool (T or F)")
        if c not in (b"T", b"F"):
            self.pos -= 1
            raise self.fail("a bool (T or F)", _shown(c))
        if not self.binary and self.pos < len(self.data) and self.data[self.pos] in _SPACE:
            self.pos += 1
        return c == b"T"

    # --- vectors and matrices -----------------------------------------------------------------

    def _binary_array(self, kinds, what):
        start = self.pos
        kind = self.token() if self.peek_token()[:1] in ("F", "D", "C") else ""
        if kind not in kinds:
            self.pos = start
            if kind.startswith("C"):
                raise self.fail(what, f"a compressed matrix ({kind}), which this reader does not read")
            raise self.fail(what)
        dtype = np.dtype("<f4" if kind[0] == "F" else "<f8")
        shape = [self.int32() for _ in range(2 if kind[1] == "M" else 1)]
        if any(d < 0 for d in shape):
            raise self.fail(what, f"a negative size {shape}", start)
        count = int(np.prod(shape))
        raw = self._take(count * dtype.itemsize, f"{what} of {count} values")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))

    def _text_brackets(self, what):
        """The text between '[' and ']' (the brackets consumed, and one newline after ']')."""
        self._skip_space()
        start = self.pos
        if self.data.startswith(b"[]", start):
            self.pos += 2
            body = b""
        else:
            if not self.data.startswith(b"[", start):
                raise self.fail(f"{what} ('[')")
            end = self.data.find(b"]", start)
            if end < 0:
                raise self.fail(f"{what} ending in ']'", "the end of the data (truncated)", start)
            body, self.pos = self.data[start + 1:end], end + 1
        if self.data.startswith(b"\r\n", self.pos):
            self.pos += 2
        elif self.data.startswith(b"\n", self.pos):
            self.pos += 1
        return start, body

    def _numbers(self, words, start, what):
        try:
            return np.array([float(w) for w in words], dtype=np.float64)
        except ValueError:
            bad = next(w for w in words if not _is_number(w))
            raise self.fail(what, _shown(bad), start) from None

    def vector(self):
        """A float vector: float32 or float64 as written in binary, float64 from text."""
        if self.binary:
            return self._binary_array(("FV", "DV"), "a vector (FV or DV)")
        start, body = self._text_brackets("a vector")
        if b"\n" in body.strip():
            raise self.fail("a vector on one line", "a newline inside the brackets (a matrix?)", start)
        return self._numbers(body.split(), start, "a number in the vector")

    def matrix(self):
        """A float matrix: float32 or float64 as written in binary, float64 from text."""
        if self.binary:
            return self._binary_array(("FM", "DM"), "a matrix (FM or DM)")
        start, body = self._text_brackets("a matrix")
        rows = [line.split() for line in body.replace(b";", b"\n").splitlines() if line.split()]
        if not rows:
            return np.zeros((0, 0))
        if len({len(r) for r in rows}) != 1:
            lengths = sorted({len(r) for r in rows})
            raise self.fail("a matrix with rows of equal length", f"rows of {lengths} values", start)
        return self._numbers([w for r in rows for w in r], start, "a number in the matrix").reshape(len(rows), -1)

    def int_vector(self):
        if self.binary:
            self._size_byte((4,), "an int32 vector")
            count = struct.unpack("<i", self._take(4, "an int32 vector's size"))[0]
            if count < 0:
                raise self.fail("an int32 vector", f"a negative size {count}", self.pos - 4)
            return [int(v) for v in np.frombuffer(self._take(4 * count, f"{count} int32 values"), "<i4")]
        start, body = self._text_brackets("an integer vector")
        try:
            return [int(w) for w in body.split()]
        except ValueError:
            raise self.fail("integers in the vector", _shown(body.strip()), start) from None

    def at_eof(self):
        self._skip_space()
        return self.pos >= len(self.data)


def _is_number(word):
    try:
        float(word)
        return True
    except ValueError:
        return False


def _text(value, double):
    """Enough digits to read the value back exactly ('3', not '3.0', as C++ streams print it)."""
    text = repr(float(value)) if double else f"{float(value):.9g}"
    return text[:-2] if text.endswith(".0") else text


class KaldiWriter:
    """Collects Kaldi objects; ``getvalue()`` is the file's bytes (with ``\\0B`` when binary)."""

    def __init__(self, binary):
        self.binary = bool(binary)
        self.parts = [BINARY_HEADER] if self.binary else []

    def raw(self, text):
        """Text written as it is (nnet3's config lines, text-mode newlines)."""
        self.parts.append(text.encode() if isinstance(text, str) else text)

    def newline(self):
        """A newline, in text mode only (where Kaldi's writers put ``if (!binary) os << "\\n"``)."""
        if not self.binary:
            self.parts.append(b"\n")

    def token(self, token):
        if not token or any(c.isspace() for c in token):
            raise NnetError(f"not a valid Kaldi token: {token!r}")
        self.parts.append(token.encode() + b" ")

    def int32(self, value):
        value = int(value)
        if not -2 ** 31 <= value < 2 ** 31:
            raise NnetError(f"{value} does not fit in an int32")
        self.parts.append(struct.pack("<bi", 4, value) if self.binary else f"{value} ".encode())

    def float(self, value, double=False):
        """A BaseFloat (float32), or with ``double`` a double, as Kaldi's WriteBasicType."""
        if self.binary:
            self.parts.append(struct.pack("<bd", 8, value) if double else struct.pack("<bf", 4, value))
        else:
            self.parts.append(f"{_text(value, double)} ".encode())

    def bool(self, value):
        self.parts.append((b"T" if value else b"F") + (b"" if self.binary else b" "))

    def _binary_array(self, kind, array):
        double = array.dtype == np.float64
        self.token(kind.replace("F", "D") if double else kind)
        for d in array.shape:
            self.int32(d)
        self.parts.append(np.ascontiguousarray(array, dtype="<f8" if double else "<f4").tobytes())

    @staticmethod
    def _array(values):
        values = np.asarray(values)
        return values if values.dtype in (np.float32, np.float64) else values.astype(np.float32)

    def vector(self, values):
        """A vector: FV for float32 (and other) values, DV for float64."""
        values = self._array(values).reshape(-1)
        if self.binary:
            self._binary_array("FV", values)
            return
        double = values.dtype == np.float64
        self.parts.append((" [ " + "".join(f"{_text(v, double)} " for v in values.tolist()) + "]\n").encode())

    def matrix(self, values):
        """A matrix: FM for float32 (and other) values, DM for float64."""
        values = self._array(values)
        if values.ndim != 2:
            raise NnetError(f"a Kaldi matrix must have 2 dimensions, not {values.ndim}")
        if self.binary:
            self._binary_array("FM", values)
            return
        if values.shape[1] == 0:
            self.parts.append(b" [ ]\n")
            return
        double = values.dtype == np.float64
        rows = ("\n  " + "".join(f"{_text(v, double)} " for v in row) for row in values.tolist())
        self.parts.append((" [" + "".join(rows) + "]\n").encode())

    def int_vector(self, values):
        values = [int(v) for v in values]
        if self.binary:
            self.parts.append(struct.pack("<bi", 4, len(values)) + np.asarray(values, dtype="<i4").tobytes())
        else:
            self.parts.append(("[ " + "".join(f"{v} " for v in values) + "]\n").encode())

    def getvalue(self):
        return b"".join(self.parts)


def read_kaldi_file(path):
    """A KaldiReader over the whole of ``path``; a missing or unreadable file is one NnetError."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise NnetError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise NnetError(f"{path}: is a directory, not a Kaldi file") from None
    except OSError as e:
        raise NnetError(f"{path}: cannot read: {e.strerror}") from None
    if not data:
        raise NnetError(f"{path}: empty file")
    return KaldiReader(data, os.fspath(path))


def write_kaldi_file(path, writer):
    """The writer's bytes into ``path``, atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(writer.getvalue())
