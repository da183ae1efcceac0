"""Best-path decoding of log-likelihood matrices with Kaldi's FasterDecoder (decode-faster-mapped).

The graph keeps transition-ids on its input side; each arc is scored by the log-likelihood of its
transition-id's pdf, scaled by the acoustic scale, as Kaldi's DecodableMatrixScaledMapped does.
Kaldi's DecodableCtc reads column i-1 for input label i, so the matrix handed to it has one column
per transition-id.
"""
import kaldi_hmm_gmm as khg  # before kaldifst: the other import order hangs (see nnet_tools/speech/__init__.py)
import kaldifst
import numpy as np

from nnet_tools.errors import NnetError


def max_input_label(fst):
    """The largest input label on any arc (one pass over the arcs, about 2 us each)."""
    top = 0
    for state in range(fst.num_states):
        for arc in kaldifst.ArcIterator(fst, state):
            top = max(top, arc.ilabel)
    return top


class Decoder:
    def __init__(self, hclg, tid2pdf, acoustic_scale=0.1, beam=16.0, max_active=2147483647, min_active=20,
                 where="HCLG"):
        if not (0.0 < acoustic_scale < np.inf and 0.0 < beam < np.inf):
            raise NnetError(f"--acoustic-scale and --beam must be finite and > 0, got {acoustic_scale} and {beam}")
        if not 1 < max_active or not 0 <= min_active <= max_active:  # FasterDecoder's own checks
            raise NnetError(f"need --max-active > 1 and 0 <= --min-active <= --max-active, "
                            f"got {max_active} and {min_active}")
        if hclg.start < 0:
            raise NnetError(f"{where}: the graph has no start state")
        num_tids, top = len(tid2pdf) - 1, max_input_label(hclg)
        if top > num_tids:  # the decoder would read scores past the matrix's end
            raise NnetError(f"{where}: the graph has transition-id {top}, the model only {num_tids}: "
                            f"graph and model do not belong together")
        self.tid2pdf = np.asarray(tid2pdf)
        self.acoustic_scale = acoustic_scale
        self._hclg = hclg  # the decoder holds a C++ reference
        opts = khg.FasterDecoderOptions(beam=beam, max_active=max_active, min_active=min_active)
        self._decoder = khg.FasterDecoder(hclg, opts)

    def decode(self, loglikes, where):
        """(word-ids, reached a final state) of the best path, or None when no path survived."""
        num_pdfs = int(self.tid2pdf.max()) + 1
        if loglikes.shape[1] != num_pdfs:
            raise NnetError(f"{where}: {loglikes.shape[1]} log-likelihood columns, but the model has {num_pdfs} pdfs")
        if np.isnan(loglikes).any():
            raise NnetError(f"{where}: NaN log-likelihoods")
        scores = self.acoustic_scale * np.asarray(loglikes, dtype=np.float32)[:, self.tid2pdf[1:]]
        self._decoder.decode(khg.DecodableCtc(np.ascontiguousarray(scores)))
        final = self._decoder.reached_final()
        ok, path = self._decoder.get_best_path(use_final_probs=True)
        if not ok:
            return None
        ok, _, words, _ = kaldifst.get_linear_symbol_sequence(path)
        return (words, final) if ok else None
