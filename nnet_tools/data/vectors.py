"""Kaldi text vector files, '[ 1.5 2 3 ]' (what vector-sum --binary=false and Kaldi's driver's
write_kaldi_matrix write): presoftmax_prior_scale.vec, priors, pdf counts."""
from nnet_tools.errors import NnetError
from nnet_tools.fileio import write_text


def read_vector(path, what="vector"):
    """A list of floats from '[ a b c ]' or plain whitespace-separated numbers."""
    try:
        with open(path) as f:
            return [float(v) for v in f.read().replace("[", " ").replace("]", " ").split()]
    except OSError as e:
        raise NnetError(f"{path}: cannot read {what}: {e.strerror}") from None
    except ValueError:
        raise NnetError(f"{path}: {what} must be a vector of numbers") from None


def write_vector(path, values):
    """Atomically write '[ a b c ]\\n'."""
    write_text(path, "[ " + " ".join(f"{float(v):.7g}" for v in values) + " ]\n")
