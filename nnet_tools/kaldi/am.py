"""nnet-to-kaldi and nnet-from-kaldi: our model files <-> Kaldi nnet3 ``final.mdl`` / ``final.raw``.

Export with a transition model (our GMM model file, or any Kaldi file starting with one, such as a
GMM ``final.mdl``) writes Kaldi's acoustic model: TransitionModel + AmNnetSimple, with our model's
priors as ``<Priors>`` (probabilities, as nnet3-am-adjust-priors leaves them); without one, a raw
nnet. Import reads either, binary or text, into our model file, with the priors of a final.mdl.
"""
import zipfile

from nnet_tools.errors import NnetError
from nnet_tools.kaldi import convert, gmm as kaldi_gmm, nnet3, transition_model
from nnet_tools.kaldi.stream import read_kaldi_file, write_kaldi_file
from nnet_tools.log import logger
from nnet_tools.model import model_io, priors as priors_mod


def load_transition_model(path):
    """The transition model of our GMM model file (.npz) or of a Kaldi file that starts with one
    (read as it is written, so it is written again byte for byte)."""
    if kaldi_gmm.is_kaldi_model(path) or not zipfile.is_zipfile(path):
        r = read_kaldi_file(path)
        if r.peek_token() != "<TransitionModel>":
            raise r.fail("<TransitionModel> (an nnet-tools GMM model or a Kaldi final.mdl)")
        return transition_model.read(r)
    model = kaldi_gmm.load(path)
    return transition_model.from_khg(model.tm, str(path), model.topo_text)


def export(model_path, out_path, binary=True, transition_model_path=None):
    """Our model -> Kaldi nnet3: a final.mdl with a transition model, else a raw nnet."""
    net, stored = model_io.load(model_path, with_priors=True)
    tm = priors = None
    if transition_model_path is not None:
        tm = load_transition_model(transition_model_path)
        if tm.num_pdfs != net.output_dim:
            raise NnetError(f"{transition_model_path}: the transition model has {tm.num_pdfs} pdfs, "
                            f"the model {model_path} has {net.output_dim} outputs")
        if stored is None:
            logger.warning(f"{model_path} has no priors (nnet-adjust-priors stores them): <Priors> is empty, "
                           f"and decoders will use posteriors, not scaled likelihoods")
        else:
            priors = priors_mod.stored(stored, net.output_dim, model_path)
    knet = convert.from_ours(net.eval(), priors, tm)
    write_kaldi_file(out_path, nnet3.write(knet, binary))
    left, right = knet.model_context()
    what = "acoustic model (TransitionModel + AmNnetSimple)" if tm is not None else "raw nnet3"
    logger.info(f"Wrote {what} with {len(knet.components)} components, left-context {left}, "
                f"right-context {right}, to {out_path} ({'binary' if binary else 'text'})")
    return knet


def import_(kaldi_path, out_path):
    """A Kaldi nnet3 final.mdl or raw nnet -> our model file."""
    knet = nnet3.read(kaldi_path)
    net, priors = convert.to_ours(knet, kaldi_path)
    if priors is not None:
        priors = priors_mod.normalise(priors, where=f"{kaldi_path}: <Priors>")
    model_io.save(net, out_path, priors=priors)
    logger.info(f"Read {'final.mdl' if knet.is_am else 'raw nnet3'} {kaldi_path}: {len(net.layers)} layers, "
                f"left-context {net.left_context}, right-context {net.right_context}"
                f"{', with priors' if priors is not None else ''}; wrote {out_path}")
    return net, priors
