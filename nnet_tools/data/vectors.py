"""One Kaldi vector in a file (priors, pdf counts, presoftmax_prior_scale.vec): read in any form
Kaldi writes it, binary (float ``\\0BFV`` or double ``\\0BDV``) or text (``[ a b c ]``), or as bare
numbers; written as Kaldi text, which Kaldi's own tools read back."""
from nnet_tools.data import tables
from nnet_tools.errors import NnetError


def read_vector(path, what="vector"):
    """A list of floats; one clear line naming the file when it is none of those forms."""
    try:
        return [float(v) for v in tables.read_vector(str(path))]
    except NnetError as e:
        kaldi_error = e  # Kaldi's own words, if the bare-numbers reading fails too
    try:
        with open(path) as f:
            return [float(v) for v in f.read().replace("[", " ").replace("]", " ").split()]
    except OSError as e:
        raise NnetError(f"{path}: cannot read {what}: {e.strerror}") from None
    except (ValueError, UnicodeDecodeError):
        raise kaldi_error from None


def write_vector(path, values):
    """Atomically write Kaldi's text form, '[ a b c ]'."""
    tables.write_vector(path, values, binary=False)
