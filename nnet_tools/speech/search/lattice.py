"""Lattices as Kaldi's latgen-faster-mapped (src/bin/latgen-faster-mapped.cc) makes them.

Decoding: a (frames x pdfs) log-likelihood matrix, scored per transition-id through its pdf
and scaled by the acoustic scale (as decode.py's Decoder), through kaldi-decoder's
LatticeSimpleDecoder (Kaldi's own, src/decoder/lattice-simple-decoder.cc; it has no --max-active
and no --min-active). Its raw lattice (transition-ids in, words out, (graph, acoustic) costs; read
from OpenFst's binary form in a scratch file) is pruned to the lattice beam and determinized on the
words as Kaldi's DeterminizeLatticePruned does (lattice_determinize.py): one path per word
sequence, the best, with its transition-ids in the weight (a CompactLattice, compact_lattice.py).
The acoustic costs are then unscaled, as latgen writes them.
"""
import kaldi_hmm_gmm  # noqa: F401  before kaldifst/kaldi_decoder: the other import order hangs

import os
import struct
import tempfile

import kaldi_decoder
import kaldifst
import numpy as np

from nnet_tools.errors import NnetError
from nnet_tools.speech.search.decode import max_input_label
from nnet_tools.speech.search.lattice_determinize import determinize_pruned, prune_raw

INF = float("inf")
_SCRATCH_DIR = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None   # the raw lattices' one file


class DecodeResult:
    """``words`` and ``tids`` of the decoder's best path, whether it ``reached_final``, and the
    determinized ``lattice`` (None: no path survived); ``cost`` = graph + scaled acoustic."""

    def __init__(self, words, tids, cost, reached_final, lattice, det_beam):
        self.words, self.tids, self.cost = words, tids, cost
        self.reached_final, self.lattice, self.det_beam = reached_final, lattice, det_beam


class LatticeDecoder:
    def __init__(self, hclg, tid2pdf, acoustic_scale=0.1, beam=16.0, lattice_beam=10.0, prune_interval=25,
                 determinize=True, where="HCLG"):
        for name, value in (("--acoustic-scale", acoustic_scale), ("--beam", beam), ("--lattice-beam", lattice_beam)):
            if not 0.0 < value < INF:
                raise NnetError(f"{name} must be finite and > 0, got {value}")
        if prune_interval < 1:
            raise NnetError(f"--prune-interval must be >= 1, got {prune_interval}")
        if hclg.start < 0:
            raise NnetError(f"{where}: the graph has no start state")
        num_tids, top = len(tid2pdf) - 1, max_input_label(hclg)
        if top > num_tids:  # the decoder would read scores past the matrix's end
            raise NnetError(f"{where}: the graph has transition-id {top}, the model only {num_tids}: "
                            f"graph and model do not belong together")
        self.tid2pdf = np.asarray(tid2pdf)
        self.acoustic_scale, self.lattice_beam, self.determinize = acoustic_scale, lattice_beam, determinize
        self._hclg = hclg  # the decoder holds a C++ reference
        config = kaldi_decoder.LatticeSimpleDecoderConfig(beam=beam, lattice_beam=lattice_beam,
                                                          prune_interval=prune_interval)
        self._decoder = kaldi_decoder.LatticeSimpleDecoder(hclg, config)
        self._scratch = tempfile.TemporaryDirectory(prefix="nnet-latgen.", dir=_SCRATCH_DIR)   # removed with us

    def decode(self, loglikes, where):
        """A DecodeResult, or None when no token survived to the last frame."""
        num_pdfs = int(self.tid2pdf.max()) + 1
        if loglikes.ndim != 2 or loglikes.shape[1] != num_pdfs:
            raise NnetError(f"{where}: {loglikes.shape[-1]} log-likelihood columns, but the model has {num_pdfs} pdfs")
        if np.isnan(loglikes).any():
            raise NnetError(f"{where}: NaN log-likelihoods")
        scores = self.acoustic_scale * np.asarray(loglikes, dtype=np.float32)[:, self.tid2pdf[1:]]
        # Its result is whether a final state was reached (LatticeSimpleDecoder::Decode returns
        # !final_costs_.empty()), not whether any path survived: the best path below says that.
        self._decoder.decode(kaldi_decoder.DecodableCtc(np.ascontiguousarray(scores)))
        reached_final = self._decoder.final_relative_cost() != INF   # Kaldi's ReachedFinal()
        ok, best = self._decoder.get_best_path(use_final_probs=True)
        ok = ok and best.num_states > 0
        if ok:
            ok, tids, words, weight = kaldifst.get_linear_symbol_sequence(best)
        if not ok:
            return None
        ok, raw = self._decoder.get_raw_lattice(use_final_probs=True)
        if not ok or raw.num_states == 0:
            raise NnetError(f"{where}: unexpected problem getting the lattice")
        start, arcs, finals = _from_kaldifst(raw, os.path.join(self._scratch.name, "raw.fst"))
        beam = self.lattice_beam
        if self.determinize:
            lattice, beam = determinize_pruned(start, arcs, finals, beam)
        else:   # Kaldi's --determinize-lattice=false: the raw lattice, pruned, each arc one tid
            lattice = prune_raw(start, arcs, finals, beam)
        _unscale(lattice, 1.0 / self.acoustic_scale)
        return DecodeResult(list(words), list(tids), weight.value1 + weight.value2, reached_final, lattice, beam)


_ARC = np.dtype([("ilabel", "<i4"), ("olabel", "<i4"), ("value1", "<f4"), ("value2", "<f4"), ("nextstate", "<i4")])


def _from_kaldifst(lat, scratch):
    """A kaldifst.Lattice as lists: arcs[s] = (next, tid, word, graph, acoustic), finals[s] = (g, a).
    Read from OpenFst's binary form (written to ``scratch``), 5x faster than kaldifst's arc iterator."""
    if not lat.write(scratch):
        raise NnetError(f"{scratch}: cannot write the decoder's lattice there")
    with open(scratch, "rb") as f:
        data = f.read()
    pos = 4
    for _ in range(2):   # the FST type and arc type names
        pos += 4 + struct.unpack_from("<i", data, pos)[0]
    version, flags, _, start, num_states = struct.unpack_from("<iiQqq", data, pos)
    pos += 40   # the header's last field is the number of arcs
    if flags:   # symbol tables or alignment: never in a decoder's lattice
        raise NnetError("unexpected lattice from the decoder (its header has flags set)")
    finals, offsets, counts = [], [], []
    unpack = struct.Struct("<ffq").unpack_from
    for _ in range(num_states):
        g, a, n = unpack(data, pos)
        finals.append(None if g == INF else (g, a))
        offsets.append(pos + 16)
        counts.append(n)
        pos += 16 + 20 * n
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.repeat(np.asarray(offsets, dtype=np.int64) - 20 * np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    where = starts + 20 * np.arange(int(counts.sum()))
    raw = np.frombuffer(data, dtype=np.uint8)[where[:, None] + np.arange(20)].copy().view(_ARC).ravel()
    rows = list(zip(raw["nextstate"].tolist(), raw["ilabel"].tolist(), raw["olabel"].tolist(),
                    raw["value1"].tolist(), raw["value2"].tolist()))
    arcs, k = [], 0
    for n in counts.tolist():
        arcs.append(rows[k:k + n])
        k += n
    return start, arcs, finals


def _unscale(lattice, factor):
    """Multiply the acoustic costs by ``factor`` (latgen writes them unscaled); float32 values."""
    f32 = np.float32
    lattice.arcs = [[(t, w, float(f32(g)), float(f32(a * factor)), tids) for t, w, g, a, tids in out]
                    for out in lattice.arcs]
    lattice.finals = [None if f is None else (float(f32(f[0])), float(f32(f[1] * factor)), f[2])
                      for f in lattice.finals]
