"""Kaldi's GMM final.mdl (TransitionModel then AmDiagGmm, binary or text) and tree, to and from
our GMM (nnet_tools/speech/models/gmm.py's Model, whose own file is an .npz).

AmDiagGmm (src/gmm/am-diag-gmm.cc, diag-gmm.cc): ``<DIMENSION> d <NUMPDFS> n``, then per pdf
``<DiagGMM> <GCONSTS> v <WEIGHTS> v <MEANS_INVVARS> m <INV_VARS> m </DiagGMM>`` (the gconsts are
optional and recomputed on reading, as Kaldi does; ``<DiagGMMBegin>``/``<DiagGMMEnd>`` are old
spellings Kaldi still reads). The tree is kaldi-hmm-gmm's ContextDependency, written by it.
"""
import kaldi_hmm_gmm as khg  # before kaldifst: the other import order hangs (see nnet_tools/speech/__init__.py)

import os

import numpy as np

from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path
from nnet_tools.kaldi import transition_model
from nnet_tools.kaldi.stream import KaldiWriter, read_kaldi_file, write_kaldi_file
from nnet_tools.speech.models import gmm
from nnet_tools.speech.models.gmm import Model, is_kaldi_model


def read_tid2pdf(path):
    """The transition-id -> pdf-id map (a[0] = -1) of a Kaldi model file: its TransitionModel is
    enough, so a Kaldi nnet3 final.mdl serves as well as a GMM one (as for Kaldi's ali-to-pdf)."""
    return transition_model.read(read_kaldi_file(path)).tid2pdf()


def load_tid2pdf(path):
    """The transition-id -> pdf-id map of a model file, Kaldi's or ours."""
    return read_tid2pdf(path) if is_kaldi_model(path) else gmm.load_tid2pdf(path)


def load(path):
    """A GMM model file, Kaldi's final.mdl or our .npz, as our Model."""
    return read_model(path) if is_kaldi_model(path) else gmm.load(path)


def read_model(path):
    """A Kaldi GMM model file (TransitionModel + AmDiagGmm) as our Model."""
    r = read_kaldi_file(path)
    tm = transition_model.read(r)
    following = "the end of the file (truncated?)" if r.at_eof() else f"'{r.peek_token()}'"
    if following != "'<DIMENSION>'":
        raise NnetError(f"{path}: not a GMM model: its TransitionModel is followed by {following}, not an "
                        f"AmDiagGmm's <DIMENSION> (an nnet3 model?)")
    am = read_am(r)
    if am.num_pdfs != tm.num_pdfs:
        raise NnetError(f"{path}: the AmDiagGmm has {am.num_pdfs} pdfs, the TransitionModel {tm.num_pdfs}")
    topo_text, ktm = transition_model.to_khg(tm, path)
    return Model(topo_text, ktm, am)


def read_am(r):
    """An AmDiagGmm at the reader's position."""
    r.expect("<DIMENSION>")
    dim = r.int32()
    r.expect("<NUMPDFS>")
    num_pdfs = r.int32()
    if dim <= 0 or num_pdfs <= 0:
        raise NnetError(f"{r.path}: AmDiagGmm of dimension {dim} with {num_pdfs} pdfs")
    am = khg.AmDiagGmm()
    for pdf in range(num_pdfs):
        am.add_pdf(_read_diag_gmm(r, dim, pdf))
    return am


def _read_diag_gmm(r, dim, pdf):
    where = f"{r.path}: pdf {pdf}"
    token = r.token()
    if token not in ("<DiagGMM>", "<DiagGMMBegin>"):
        raise NnetError(f"{where}: expected <DiagGMM>, got '{token}'")
    token = r.token()
    if token == "<GCONSTS>":   # recomputed below, as Kaldi's DiagGmm::Read does
        r.vector()
        token = r.token()
    if token != "<WEIGHTS>":
        raise NnetError(f"{where}: expected <WEIGHTS> or <GCONSTS>, got '{token}'")
    weights = np.asarray(r.vector(), dtype=np.float32)
    r.expect("<MEANS_INVVARS>")
    means_invvars = np.asarray(r.matrix(), dtype=np.float32)
    r.expect("<INV_VARS>")
    inv_vars = np.asarray(r.matrix(), dtype=np.float32)
    token = r.token()
    if token not in ("</DiagGMM>", "<DiagGMMEnd>"):
        raise NnetError(f"{where}: expected </DiagGMM>, got '{token}'")
    n = len(weights)
    if n == 0 or means_invvars.shape != (n, dim) or inv_vars.shape != (n, dim):
        raise NnetError(f"{where}: {n} weights, but means_invvars {means_invvars.shape} and inv_vars "
                        f"{inv_vars.shape} (dimension {dim})")
    if not (np.isfinite(weights).all() and np.isfinite(means_invvars).all() and np.isfinite(inv_vars).all()):
        raise NnetError(f"{where}: weights, means or inverse variances are not finite")
    if (inv_vars <= 0).any() or (weights < 0).any():
        raise NnetError(f"{where}: inverse variances must be positive and weights non-negative")
    # The state tuple sets Kaldi's members as they are (set_means would multiply means back into
    # means_invvars and round). As with TransitionModel, only an unbuilt object takes it.
    g = khg.DiagGmm.__new__(khg.DiagGmm)
    g.__setstate__((weights, inv_vars, means_invvars))
    g.compute_gconsts()
    return g


def write_am(w, am):
    w.token("<DIMENSION>")
    w.int32(am.dim)
    w.token("<NUMPDFS>")
    w.int32(am.num_pdfs)
    for pdf in range(am.num_pdfs):
        g = am.get_pdf(pdf)
        if not g.valid_gconsts:
            g.compute_gconsts()
        w.token("<DiagGMM>")
        w.newline()
        for token, value in (("<GCONSTS>", g.gconsts), ("<WEIGHTS>", g.weights)):
            w.token(token)
            w.vector(np.asarray(value, dtype=np.float32))
        for token, value in (("<MEANS_INVVARS>", g.means_invvars), ("<INV_VARS>", g.inv_vars)):
            w.token(token)
            w.matrix(np.asarray(value, dtype=np.float32))
        w.token("</DiagGMM>")
        w.newline()


def write_model(model, path, binary=True):
    """``model`` as Kaldi's final.mdl, atomically."""
    w = KaldiWriter(binary)
    transition_model.write(w, transition_model.from_khg(model.tm, path, model.topo_text))
    write_am(w, model.am)
    write_kaldi_file(path, w)


def write_tree(model, path, binary=True):
    """The monophone tree of ``model``'s topology as Kaldi's ``tree`` (ContextDependency), atomically."""
    with atomic_path(path) as tmp:
        try:
            model.tree().write(binary, tmp)
        except RuntimeError as e:
            raise NnetError(f"{path}: cannot write the tree: {gmm.kaldi_reason(e)}") from None


def check_monophone(model, where):
    """Our .npz model file rebuilds the transition model from the topology with a monophone tree
    (one pdf per phone and HMM state): a Kaldi model whose transition-states differ (a triphone
    tree, phones sharing a tree root) cannot be stored in it."""
    topo = khg.HmmTopology()
    topo.read(model.topo_text)
    built = khg.TransitionModel(ctx_dep=model.tree(), hmm_topo=topo)
    ours = [t.__getstate__() for t in built.__getstate__()[0]]
    theirs = [t.__getstate__() for t in model.tm.__getstate__()[0]]
    if ours != theirs:
        raise NnetError(f"{where}: not a monophone model with one pdf per phone and state ({len(theirs)} "
                        f"transition-states, {model.num_pdfs} pdfs): our .npz GMM format holds only those; "
                        f"keep it in Kaldi's format")


def suffix_format(path):
    """The format a model file's name asks for: 'npz' for a .npz name, else 'kaldi'."""
    return "npz" if os.path.basename(path).endswith(".npz") else "kaldi"
