"""Best-path decoding of log-likelihood matrices with Kaldi's FasterDecoder (decode-faster-mapped).

The graph keeps transition-ids on its input side; each arc is scored by the log-likelihood of its
transition-id's pdf, scaled by the acoustic scale, as Kaldi's DecodableMatrixScaledMapped does.
Kaldi's DecodableCtc reads column i-1 for input label i, so the matrix handed to it has one column
per transition-id.
"""
import kaldi_hmm_gmm as khg  # before kaldifst: the other import order hangs (see __init__)
import kaldifst
import numpy as np

from nnet_tools.errors import NnetError


class Decoder:
    def __init__(self, hclg, tid2pdf, acoustic_scale=0.1, beam=16.0, max_active=2147483647, min_active=20):
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
        scores = self.acoustic_scale * np.asarray(loglikes, dtype=np.float32)[:, self.tid2pdf[1:]]
        self._decoder.decode(khg.DecodableCtc(np.ascontiguousarray(scores)))
        final = self._decoder.reached_final()
        ok, path = self._decoder.get_best_path(use_final_probs=True)
        if not ok:
            return None
        ok, _, words, _ = kaldifst.get_linear_symbol_sequence(path)
        return (words, final) if ok else None
