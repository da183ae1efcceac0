"""Tables of CompactLattices in Kaldi's text form (src/lat/kaldi-lattice.cc), which Kaldi's
lattice-copy and every other lattice reader read, e.g. `lat.1.gz` from ``ark:| gzip -c``:

    utt-id
    0\t1\t4\t2.5,310.25,4_4_4_6
    1\t12.0625,0,8_8

(an arc: state, next state, word, ``graphcost,acousticcost,tid_tid_...``, the weight left out when
it is One; a final state: state and its weight). Binary CompactLattices are not read.
"""
import contextlib
import os
import signal
import subprocess
import sys

import numpy as np

from nnet_tools.data.tables.specifiers import check_input_file, check_output_name, is_pipe, split_specifier
from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path
from nnet_tools.speech.search.compact_lattice import CompactLattice, topological_order

INF = float("inf")


def _weight_text(g, a, tids):
    return f"{str(np.float32(g))},{str(np.float32(a))},{'_'.join(map(str, tids))}"


def format_lattice(key, lattice):
    """One archive entry in Kaldi's text form (WriteCompactLattice, text; FstPrinter's order:
    the start state first; weights that are One left out)."""
    lines = [f"{key} "]
    states = [lattice.start] + [s for s in range(lattice.num_states) if s != lattice.start]
    for s in states:
        for t, w, g, a, tids in lattice.arcs[s]:
            if g == 0 and a == 0 and not tids:
                lines.append(f"{s}\t{t}\t{w}")
            else:
                lines.append(f"{s}\t{t}\t{w}\t{_weight_text(g, a, tids)}")
        f = lattice.finals[s]
        if f is not None:
            lines.append(f"{s}" if f[0] == 0 and f[1] == 0 and not f[2] else f"{s}\t{_weight_text(*f)}")
        elif not lattice.arcs[s]:
            lines.append(f"{s}\tInfinity,Infinity,")
    return "\n".join(lines) + "\n\n"


def _float(text):
    if text == "Infinity":
        return INF
    if text == "-Infinity":
        return -INF
    value = float(np.float32(float(text)))
    if value != value:
        raise ValueError(text)
    return value


def _parse_weight(text):
    """Kaldi's CompactLatticeWeight text: 'graph,acoustic,tid_tid' ('graph,acoustic,' without tids)."""
    head, sep, string = text.rpartition(",")
    g, sep2, a = head.partition(",")
    if not sep or not sep2:
        raise ValueError(text)
    tids = tuple(int(x) for x in string.split("_")) if string else ()
    if any(t <= 0 for t in tids):
        raise ValueError(text)
    return _float(g), _float(a), tids


class _Parser:
    def __init__(self, name):
        self.name = name

    def lattice(self, key, lines):
        """(line number, text) pairs -> CompactLattice."""
        arcs, finals, start = [], [], None

        def grow(s):
            while len(arcs) <= s:
                arcs.append([])
                finals.append(None)

        for n, line in lines:
            cols = line.split()
            try:
                ids = [int(c) for c in cols[:3 if len(cols) >= 3 else 1]]
                if any(x < 0 for x in ids[:2]) or len(ids) > 2 and ids[2] < 0:
                    raise ValueError(line)
                s = ids[0]
                grow(s)
                if start is None:
                    start = s
                if len(cols) in (1, 2):
                    weight = _parse_weight(cols[1]) if len(cols) == 2 else (0.0, 0.0, ())
                    if weight[0] == INF:
                        continue
                    if INF in (abs(weight[0]), abs(weight[1])):
                        raise ValueError(line)
                    finals[s] = weight
                elif len(cols) in (3, 4):
                    weight = _parse_weight(cols[3]) if len(cols) == 4 else (0.0, 0.0, ())
                    if INF in (abs(weight[0]), abs(weight[1])):
                        raise ValueError(line)
                    grow(ids[1])
                    arcs[s].append((ids[1], ids[2]) + weight)
                else:
                    kind = "a Lattice, not a CompactLattice" if len(cols) == 5 else "too many columns"
                    raise NnetError(f"{self.name}: key '{key}': line {n}: {kind}: '{line.strip()}'")
            except ValueError:
                raise NnetError(f"{self.name}: key '{key}': line {n}: not a CompactLattice line "
                                f"(state next-state word graph,acoustic,tids): '{line.strip()}'") from None
        if start is None:
            return CompactLattice(0, [], [])
        lattice = CompactLattice(start, arcs, finals)
        topological_order(lattice.start, lattice.arcs, f"{self.name}: key '{key}'")
        return lattice


def read_lattices(rspecifier):
    """(key, CompactLattice) of each entry of a text archive: ``ark:FILE``, ``ark:-``,
    ``"ark:gunzip -c lat.*.gz |"``; a key twice is an error."""
    types, target = split_specifier(rspecifier, "rspecifier")
    if types != ["ark"]:
        raise NnetError(f"bad rspecifier '{rspecifier}': lattices are read from archives (ark:), not scp")
    if target != "-" and not is_pipe(target):
        check_input_file(rspecifier, target)
    return _read_entries(rspecifier, target)


def _read_entries(rspecifier, target):
    parser = _Parser(rspecifier)
    with _input(rspecifier, target) as stream:
        seen, key, lines, n = set(), None, [], 0
        for raw in stream:
            n += 1
            try:
                line = raw.decode()
            except UnicodeDecodeError:
                if key is None and b"\0B" in raw:
                    raise NnetError(f"{rspecifier}: line {n}: a binary lattice (Kaldi's default 'ark:'); only text "
                                    f"lattices are read: lattice-copy ark:IN ark,t:OUT converts it") from None
                raise NnetError(f"{rspecifier}: line {n}: not text") from None
            if key is None:
                if not line.strip():
                    continue
                if "\0" in line:
                    raise NnetError(f"{rspecifier}: line {n}: a binary lattice (Kaldi's default 'ark:'); only text "
                                    f"lattices are read: lattice-copy ark:IN ark,t:OUT converts it")
                tokens = line.split()
                if len(tokens) != 1:
                    raise NnetError(f"{rspecifier}: line {n}: expected a key alone on its line "
                                    f"(a text CompactLattice archive), found '{line.strip()[:40]}'")
                key, lines = tokens[0], []
                if key in seen:
                    raise NnetError(f"{rspecifier}: duplicate key '{key}'")
                seen.add(key)
            elif line.strip():
                lines.append((n, line))
            else:
                yield key, parser.lattice(key, lines)
                key = None
        if key is not None:  # Kaldi ends every lattice with an empty line: the archive was cut
            raise NnetError(f"{rspecifier}: lattice '{key}' ends without its empty line: "
                            f"the archive is truncated")


@contextlib.contextmanager
def _input(rspecifier, target):
    if target == "-":
        yield sys.stdin.buffer
        return
    if not is_pipe(target):
        with open(target, "rb") as f:
            yield f
        return
    command = target.rstrip()[:-1]
    proc = subprocess.Popen(command, shell=True, stdout=subprocess.PIPE)
    try:
        yield proc.stdout
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        proc.stdout.close()
    rc = proc.wait()
    if rc:
        raise NnetError(f"{rspecifier}: the command '{command.strip()}' failed (exit status {rc})")


class LatticeWriter:
    """Write CompactLattices as a text archive: ``ark:FILE`` (atomically: the file appears when
    the writer closes without error), ``ark:-``, ``"ark:| gzip -c > lat.1.gz"``. ``ark,t:`` is the
    same (text is the only form written; Kaldi reads text lattices from any archive)."""

    def __init__(self, wspecifier):
        types, target = split_specifier(wspecifier, "wspecifier")
        if types != ["ark"]:
            raise NnetError(f"bad wspecifier '{wspecifier}': lattices are written as archives (ark:FILE), "
                            f"not with scp")
        self.name = wspecifier
        self._files = contextlib.ExitStack()
        self._proc = None
        if target == "-":
            sys.stdout.flush()
            self._out = sys.stdout.buffer
        elif is_pipe(target):
            if not target.startswith("|"):
                raise NnetError(f"bad wspecifier '{wspecifier}': an output command starts with '|'")
            self._command = target[1:].strip()
            # In its own process group, so that abort() stops all of it before it sees the end of
            # its input (gzip through atomic_write.sh would then put a cut-short lat.N.gz in place).
            self._proc = subprocess.Popen(self._command, shell=True, stdin=subprocess.PIPE, start_new_session=True)
            self._out = self._proc.stdin
        else:
            check_output_name(wspecifier, target)
            tmp = self._files.enter_context(atomic_path(target))
            self._out = self._files.enter_context(open(tmp, "wb"))
        self._open = True

    def write(self, key, lattice):
        if not key or any(c.isspace() for c in key):
            raise NnetError(f"{self.name}: key '{key}': a key must be non-empty and without spaces")
        try:
            self._out.write(format_lattice(key, lattice).encode())
        except BrokenPipeError:
            raise NnetError(f"{self.name}: the command '{self._command}' ended before its input") from None

    def close(self):
        if not self._open:
            return
        self._open = False
        if self._proc is not None:
            try:
                self._out.close()
            except BrokenPipeError:
                pass
            rc = self._proc.wait()
            if rc:
                raise NnetError(f"{self.name}: the command '{self._command}' failed (exit status {rc})")
        elif self._out is sys.stdout.buffer:
            self._out.flush()
        else:
            self._files.close()   # closes the temp file, then renames it

    def abort(self):
        if not self._open:
            return
        self._open = False
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGTERM)
            with contextlib.suppress(BrokenPipeError):
                self._out.close()
            self._proc.wait()
        elif self._out is not sys.stdout.buffer:
            error = NnetError(f"{self.name}: aborted")
            self._files.__exit__(type(error), error, None)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
