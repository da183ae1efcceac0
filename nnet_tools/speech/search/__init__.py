"""Stage 5, search: the decoding graph HCLG from L_disambig.fst, G.fst and a model (graph.py:
utils/mkgraph.sh), best-path decoding of log-likelihood matrices with Kaldi's FasterDecoder
(decode.py: decode-faster-mapped), lattices (lattice.py: latgen-faster-mapped's decoder;
compact_lattice.py: the CompactLattice type; lattice_determinize.py: pruning and the pruned
determinization; lattice_io.py: Kaldi's text lattice archives) and their best paths at each LM
weight and word insertion penalty (lattice_best_path.py: lattice-best-path), and the word error
rate of the result (score.py: compute-wer).
"""
