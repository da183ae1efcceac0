import itertools

import click

from nnet_tools.cli.common import program
from nnet_tools.data import tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.lang import langdir
from nnet_tools.speech.models import gmm, questions


@click.command()
@click.option("--num-utts", type=click.IntRange(min=1), default=10, show_default=True,
              help="Utterances whose global mean and variance seed every pdf (train_mono.sh: subset-feats --n=10).")
@click.option("--shared-phones", default="",
              help="Phone sets that share pdfs, one set a line (Kaldi's lang/phones/sets.int).")
@click.argument("lang_dir")
@click.argument("feats_rspecifier")
@click.argument("model_out")
@program("nnet-gmm-init-mono")
def main(num_utts, shared_phones, lang_dir, feats_rspecifier, model_out):
    """Initialise a monophone GMM from LANG_DIR/topo and feature statistics (Kaldi's gmm-init-mono).

    \b
    Example:
      nnet-gmm-init-mono --shared-phones data/lang/phones/sets.int data/lang "ark:exp/mono/feats.1.ark" exp/mono/0.mdl
    """
    _, topo_text = langdir.read_topology(lang_dir)
    utts = itertools.islice(tables.read_matrices(feats_rspecifier), num_utts)
    feats = [f for utt, f in utts if gmm.usable_features(f, None, f"{feats_rspecifier}: utt '{utt}'")]
    if not feats:
        raise NnetError(f"{feats_rspecifier}: no features to initialise from")
    sets = questions.read_int_sets(shared_phones, "phone sets") if shared_phones else None
    model = gmm.init_mono(topo_text, feats, sets)
    gmm.save(model, model_out)
    logger.info(f"Wrote {model_out}: {model.num_pdfs} pdfs, feature dim {model.dim}, "
                f"{model.tm.num_transition_ids} transition-ids.")
