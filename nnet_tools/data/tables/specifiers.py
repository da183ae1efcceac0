"""rspecifiers, wspecifiers and rxfilenames (``scp:feats.scp``, ``ark,scp:a.ark,a.scp``, ``x.ark:12``,
``gunzip -c x.gz |``): parsed only as far as choosing what to check and where to write; Kaldi's
own classification still validates the options. Input files are checked here, so that a missing
or unreadable one is one line naming it."""
import errno
import os
import re

from nnet_tools.errors import NnetError


def is_pipe(target):
    return target.startswith("|") or target.rstrip().endswith("|")


def is_plain_file(target):
    return target not in ("", "-") and not is_pipe(target)


def split_specifier(specifier, kind_of):
    options, colon, target = specifier.partition(":")
    types = [o for o in (o.strip() for o in options.split(",")) if o in ("ark", "scp")]
    if not colon or not types:
        raise NnetError(f"bad {kind_of} '{specifier}': expected ark:FILE or scp:FILE "
                        f"(e.g. 'ark:feats.ark', 'scp:data/train/feats.scp', 'ark:-')")
    if not target:
        raise NnetError(f"bad {kind_of} '{specifier}': no file name after ':' (use '-' for stdin/stdout)")
    return types, target


def check_rspecifier(rspecifier):
    """Reject what is malformed or names a missing file; return whether it opens a pipe."""
    types, target = split_specifier(rspecifier, "rspecifier")
    if is_plain_file(target):
        check_input_file(rspecifier, file_of(target))
        if types == ["scp"] and os.path.isfile(target) and _starts_as_binary_archive(target):
            raise NnetError(f"{rspecifier}: a binary archive, not a script file (read it as ark:)")
    return is_pipe(target)


def _starts_as_binary_archive(path):
    """Whether the file's first line is a key and Kaldi's binary header, as an archive's is; Kaldi
    would read the binary as a file name and fail to open it."""
    with open(path, "rb") as f:
        key, _, rest = f.read(256).partition(b" ")
    return bool(key) and b"\n" not in key and rest.startswith(b"\0B")


def check_input_file(name, path):
    """A missing, directory or unreadable input ``path`` is one line naming ``name``. Devices
    and FIFOs (``/dev/stdin``, ``<(cmd)``, a named pipe) are read as Kaldi reads them; opening
    one only to check it would take data, or the writer, from the real read."""
    if not os.path.exists(path):
        raise NnetError(f"{name}: no such file '{path}'")
    if os.path.isdir(path):
        raise NnetError(f"{name}: is a directory '{path}'")
    why = why_unreadable(path) if os.path.isfile(path) else (
        None if os.access(path, os.R_OK) else os.strerror(errno.EACCES))
    if why:
        raise NnetError(f"{name}: cannot read '{path}': {why}")


def file_of(target):
    """The file of "foo.ark:1234" (an scp entry, or an rspecifier read from a byte offset)."""
    return re.sub(r":\d+$", "", target)


def why_unreadable(path):
    """The OS's reason ``path`` cannot be opened for reading, or None."""
    try:
        open(path, "rb").close()
    except OSError as e:
        return e.strerror
    return None


def check_output_name(wspecifier, path):
    """What Kaldi's ClassifyWxfilename refuses: outer whitespace, and a byte offset ("x.ark:12",
    which only a reader understands). Kaldi never sees our names, only the temp files'."""
    if path != path.strip():
        raise NnetError(f"bad wspecifier '{wspecifier}': the file name '{path}' begins or ends with a space")
    if re.search(r":\d+$", path):
        raise NnetError(f"bad wspecifier '{wspecifier}': '{path}' ends in a byte offset, which only reading allows")
