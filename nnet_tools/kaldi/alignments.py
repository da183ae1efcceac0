"""Kaldi's alignment files: ``exp/*_ali/ali.N.gz``, each a gzip'd int32-vector table (text, as
train_mono.sh and align_si.sh write it with ``ark,t:|gzip -c``, or binary) of per-frame
transition-ids, one entry per utterance; and their pdf-ids, the DNN's targets (ali-to-pdf).

The tables are read and written by Kaldi's own table code (nnet_tools.data.tables) through a
decompressed temporary copy: the library runs no gunzip.
"""
import contextlib
import gzip
import os
import re
import shutil
import tempfile
import zlib

from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path
from nnet_tools.speech.models.gmm import check_tids


def alignment_files(ali_dir):
    """ALI_DIR's ali.1.gz .. ali.N.gz, in job order; ``num_jobs``, where there, must agree."""
    found = {}
    for name in os.listdir(ali_dir) if os.path.isdir(ali_dir) else []:
        if m := re.fullmatch(r"ali\.([1-9][0-9]*)\.gz", name):
            found[int(m[1])] = os.path.join(ali_dir, name)
    if not found:
        why = "has no ali.*.gz files" if os.path.isdir(ali_dir) else "is not a directory"
        raise NnetError(f"{ali_dir}: {why} (a Kaldi alignment dir: exp/*_ali)")
    missing = sorted(set(range(1, max(found) + 1)) - set(found))
    num_jobs_file = os.path.join(ali_dir, "num_jobs")
    if os.path.exists(num_jobs_file):
        with open(num_jobs_file) as f:
            text = f.read().strip()
        if not text.isdigit() or int(text) != max(found) or missing:
            raise NnetError(f"{num_jobs_file}: says {text} jobs, but {ali_dir} has ali.N.gz for N in {sorted(found)}")
    elif missing:
        raise NnetError(f"{ali_dir}: ali.{missing[0]}.gz is missing (there are ali.N.gz up to {max(found)})")
    return [found[k] for k in sorted(found)]


@contextlib.contextmanager
def _decompressed(path):
    with tempfile.TemporaryDirectory(prefix="nnet-ali.") as d:
        tmp = os.path.join(d, "ali.ark")
        try:
            with gzip.open(path, "rb") as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst)
        except FileNotFoundError:
            raise NnetError(f"{path}: no such file") from None
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:
            raise NnetError(f"{path}: not a complete gzip file ({e or 'truncated'})") from None
        except OSError as e:
            raise NnetError(f"{path}: cannot read: {e.strerror}") from None
        yield tmp


def read_alignments(path):
    """(utterance, transition-ids) of one ali.N.gz, in its order."""
    with _decompressed(path) as tmp:
        try:
            yield from tables.read_int_vectors(f"ark:{tmp}")
        except NnetError as e:  # name the .gz, not the temporary copy
            raise NnetError(str(e).replace(tmp, path)) from None


def read_alignment_dir(ali_dir):
    """(utterance, transition-ids) of every ali.N.gz of ALI_DIR; an utterance twice is an error."""
    seen = {}
    for path in alignment_files(ali_dir):
        for utt, ali in read_alignments(path):
            if utt in seen:
                raise NnetError(f"{path}: utterance '{utt}' is also in {seen[utt]}")
            seen[utt] = path
            yield utt, ali


def write_alignments(path, alignments):
    """(utterance, transition-ids) pairs as a gzip'd text table, atomically (as train_mono.sh's)."""
    with tempfile.TemporaryDirectory(prefix="nnet-ali.") as d:
        tmp = os.path.join(d, "ali.ark")
        with tables.IntVectorWriter(f"ark,t:{tmp}") as writer:
            for utt, ali in alignments:
                writer.write(utt, ali)
        with atomic_path(path) as out, open(tmp, "rb") as src, gzip.open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)


def to_pdfs(tid2pdf, ali, where):
    """ali-to-pdf: the pdf-id of each frame's transition-id (``tid2pdf[0]`` is unused)."""
    check_tids(ali, len(tid2pdf) - 1, where)
    return tid2pdf[ali]
