"""An egs dir's files from the dumped egs records: the archives egs.K.ark (each shuffled as
nnet3-shuffle-egs does), the diagnostic and combine subsets (nnet3-subset-egs), the utterance
lists, cmvn_opts and info/ (info/num_archives last: it marks a complete dir). Archives are
gathered from memory-mapped records and written a chunk at a time."""
import os

import numpy as np

from nnet_tools.data.cmvn import format_cmvn_opts
from nnet_tools.data.egs import ArchiveWriter
from nnet_tools.data.egs_plan import STREAM_SHUFFLE, STREAM_SUBSET, rng
from nnet_tools.data.egs_spool import record_dtype
from nnet_tools.errors import NnetError
from nnet_tools.fileio import write_text
from nnet_tools.log import logger


class _Concat:
    """Record arrays (memory maps) read as one, gathered by index a chunk at a time."""

    def __init__(self, parts):
        self.parts = [p for p in parts if len(p)]
        self.offsets = np.cumsum([0] + [len(p) for p in self.parts])

    def __len__(self):
        return int(self.offsets[-1])

    def take(self, index, dtype):
        out = np.empty(len(index), dtype)
        part = np.searchsorted(self.offsets, index, side="right") - 1
        for p in np.unique(part):
            mask = part == p
            out[mask] = self.parts[p][index[mask] - self.offsets[p]]
        return out


def _write(path, records, order, keys, opts, feat_dim, chunk_bytes):
    """Write records[order] (a record array or a _Concat) as an egs archive, ``chunk_bytes`` at a
    time, so memory holds one chunk, not the archive; ``keys`` maps utterance indices to names."""
    source = records if isinstance(records, _Concat) else _Concat([records])
    dtype = record_dtype(opts, feat_dim)
    chunk = max(1, chunk_bytes // dtype.itemsize)
    with ArchiveWriter(path, len(order), feat_dim, opts.frames_per_eg, opts.left_context, opts.right_context,
                       opts.compress) as writer:
        for i in range(0, len(order), chunk):
            part = source.take(np.asarray(order[i:i + chunk]), dtype)
            writer.write(part["inputs"], part["labels"],
                         [f"{keys[u]}-{t}" for u, t in zip(part["utt"].tolist(), part["t0"].tolist())])


def _subset(records, n, seed, stream):
    """nnet3-subset-egs: n random egs (all if fewer), in random order."""
    return records[rng(seed, stream).permutation(len(records))[:n]]


def by_utterance(pools):
    """Pool record arrays concatenated and sorted by (utterance index, first frame): an order that
    does not depend on how the features were split between jobs."""
    records = np.concatenate([np.asarray(p) for p in pools]) if pools else np.zeros(0)
    return records[np.lexsort((records["t0"], records["utt"]))] if len(records) else records


def draw_subsets(valid, train, opts, where):
    """valid_diagnostic, train_diagnostic and combine (= valid_combine ++ train_combine) records."""
    fpe = opts.frames_per_eg
    out = {"valid_diagnostic.egs": _subset(valid, opts.num_frames_diagnostic // fpe, opts.srand, STREAM_SUBSET),
           "train_diagnostic.egs": _subset(train, opts.num_frames_diagnostic // fpe, opts.srand, STREAM_SUBSET + 1),
           "combine.egs": np.concatenate([
               _subset(valid, opts.num_valid_frames_combine // fpe, opts.srand, STREAM_SUBSET + 2),
               _subset(train, opts.num_train_frames_combine // fpe, opts.srand, STREAM_SUBSET + 3)])}
    for name, records in out.items():
        if not len(records):
            raise NnetError(f"{where}/{name}: no examples (valid utterances gave {len(valid)} egs, train-subset "
                            f"utterances {len(train)}; check --num-frames-diagnostic, "
                            f"--num-train-frames-combine and --frames-per-eg {fpe})")
    return out


def finish_egs_dir(egs_dir, num_archives, max_id, opts, subsets, keys, counts, cmvn_opts, uttlists, chunk_bytes):
    """Subsets, utterance lists, cmvn_opts and info/ (num_archives last: it marks a complete dir)."""
    for name, records in subsets.items():
        _write(os.path.join(egs_dir, name), records, np.arange(len(records)), keys, opts, counts["feat_dim"],
               chunk_bytes)
        logger.info(f"Wrote {len(records)} egs to {os.path.join(egs_dir, name)}")
    for name, utts in uttlists.items():
        write_text(os.path.join(egs_dir, name), "".join(f"{u}\n" for u in utts))
    # Kaldi keeps cmvn_opts at the top of the egs dir (the training script copies it on); ours is
    # a complete apply-cmvn option string, so decoding can pass it on as it is.
    cmvn_opts = cmvn_opts if cmvn_opts is not None else format_cmvn_opts(False, False)
    write_text(os.path.join(egs_dir, "cmvn_opts"), f"{cmvn_opts}\n")
    fpe = opts.frames_per_eg
    info = {"frames_per_eg": fpe, "feat_dim": counts["feat_dim"], "left_context": opts.left_context,
            "right_context": opts.right_context, "num_frames": counts["train_frames"],
            "egs_per_archive": counts["train_frames"] // (fpe * num_archives),
            "output_dim": opts.num_targets if opts.num_targets is not None else max_id + 1,
            "cmvn_opts": cmvn_opts,
            "num_archives": num_archives}  # last: its presence marks a complete egs dir
    for name, value in info.items():
        write_text(os.path.join(egs_dir, "info", name), f"{value}\n")
    logger.info(f"Wrote {num_archives} archives of about {info['egs_per_archive']} egs each to {egs_dir}: "
                f"{counts['train_egs']} training egs covering {counts['train_frames']} labelled frames "
                f"({fpe} frames per eg); {counts['errors']} utterances skipped")
    return info


def write_archive(egs_dir, k, pieces, keys, opts, feat_dim, num_archives, chunk_bytes):
    """Shuffle (nnet3-shuffle-egs --srand=k+srand) the concatenated pieces of archive k and write it."""
    records = _Concat(pieces)
    if not len(records):
        logger.warning(f"{egs_dir}/egs.{k}.ark: no examples (too few egs for {num_archives} "
                       f"archives; consider a larger --samples-per-iter)")
    order = rng(k + opts.srand, STREAM_SHUFFLE).permutation(len(records))
    _write(os.path.join(egs_dir, f"egs.{k}.ark"), records, order, keys, opts, feat_dim, chunk_bytes)
    logger.debug(f"Wrote {egs_dir}/egs.{k}.ark")
