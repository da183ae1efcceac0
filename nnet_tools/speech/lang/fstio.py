"""OpenFst files (L.fst, G.fst, HCLG.fst): read and written with OpenFst's errors as one line."""
import os

from nnet_tools.cpp_stderr import stderr_captured
from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path, write_error


def _openfst_says(call, otherwise):
    """Run an OpenFst call that reports failure only by its result and a line on stderr: (result,
    that line without its 'ERROR: ', or ``otherwise``)."""
    said = []
    with stderr_captured(said):
        result = call()
    lines = "".join(said).strip().splitlines()
    return result, lines[0].removeprefix("ERROR: ") if lines else otherwise


def write_fst(fst, path):
    with atomic_path(path) as tmp:
        written, reason = _openfst_says(lambda: fst.write(tmp), "OpenFst's write failed")
        if not written:  # a full disk, mostly: the temp file stays short and must not be renamed
            raise write_error(path, RuntimeError(reason))


def read_fst(path):
    import kaldifst
    if not os.path.isfile(path):
        raise NnetError(f"{path}: FST file does not exist")
    fst, reason = _openfst_says(lambda: kaldifst.StdVectorFst.read(path), "not an OpenFst binary file?")
    if fst is None:
        raise NnetError(f"{path}: cannot read FST ({reason})")
    return fst
