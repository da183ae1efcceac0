import click

from nnet_tools.cli.common import program
from nnet_tools.data import cmvn, tables
from nnet_tools.errors import NnetError
from nnet_tools.log import logger
from nnet_tools.speech.transforms import matrix


@click.command()
@click.option("--utt2spk", default=None,
              help="utt2spk file: a TRANSFORM table is keyed by speaker (per-speaker transforms).")
@click.argument("transform")
@click.argument("feats_rspecifier")
@click.argument("feats_wspecifier")
@program("nnet-transform-feats")
def main(utt2spk, transform, feats_rspecifier, feats_wspecifier):
    """Apply a transform (LDA, MLLT, LDA+MLLT, fMLLR) to features (Kaldi's transform-feats).
    TRANSFORM is one matrix file (a global transform) or a table of matrices (per utterance,
    or per speaker with --utt2spk). Linear if the transform has as many columns as the
    features have dims, affine (1.0 appended to each frame) if one more; any other shape is an
    error. An utterance without a transform in the table is warned about and skipped.

    \b
    Examples:
      nnet-splice-feats scp:data/train/feats.scp ark:- | nnet-transform-feats exp/tri2/final.mat ark:- ark:lda.ark
      nnet-transform-feats --utt2spk ark:data/test/utt2spk ark:exp/tri3/trans.1 scp:feats.scp ark:-
    """
    table = cmvn.is_table(transform)
    if utt2spk and not table:
        raise NnetError(f"--utt2spk={utt2spk} given with one global transform {transform} (a table needs it)")
    spk_of = cmvn.read_utt2spk(utt2spk) if utt2spk else None
    glob = None if table else matrix.read_matrix(transform)
    transforms = tables.RandomAccessMatrices(transform) if table else None
    done = errors = 0
    tot_t = tot_logdet = 0.0
    kinds, global_logdet = set(), {}
    try:
        with tables.MatrixWriter(feats_wspecifier) as writer:
            for utt, feats in tables.read_matrices(feats_rspecifier):
                if table:
                    key = spk_of.get(utt) if spk_of is not None else utt
                    if key is None or key not in transforms:
                        logger.warning(f"No fMLLR transform available for utterance {utt}, producing no "
                                       f"output for this utterance")
                        errors += 1
                        continue
                    mat, where = transforms[key], f"{transform}: key '{key}'"
                else:
                    mat, where = glob, transform
                try:
                    out = matrix.apply_transform(feats, mat)
                except NnetError as e:
                    raise NnetError(f"{where}: utterance '{utt}' of {feats_rspecifier}: {e}") from None
                done += 1
                dim = feats.shape[1]
                if table or dim not in global_logdet:   # a global transform's, once per feature dim
                    ld = matrix.logdet(mat, dim)
                    if not table:
                        global_logdet[dim] = ld
                else:
                    ld = global_logdet[dim]
                if ld is not None:
                    value, pseudo = ld
                    kinds.add(pseudo)
                    if value == value and abs(value) != float("inf"):
                        tot_t += len(feats)
                        tot_logdet += len(feats) * value
                    else:
                        logger.warning(f"Matrix has bad logdet {value}")
                writer.write(utt, out)
            if tot_t > 0:
                logger.info(f"Overall average {'[pseudo-]' if True in kinds else ''}logdet is "
                            f"{tot_logdet / tot_t:.6g} over {tot_t:g} frames.")
            logger.info(f"Applied transform to {done} utterances; {errors} had errors.")
            if not done:
                raise NnetError(f"{feats_rspecifier}: no utterance transformed"
                                + (f": none of the {errors} had a transform in {transform}" if errors else ""))
    finally:
        if transforms is not None:
            transforms.close()
