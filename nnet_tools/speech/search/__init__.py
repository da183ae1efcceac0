"""Stage 5, search: the decoding graph HCLG from L_disambig.fst, G.fst and a model (graph.py:
utils/mkgraph.sh), best-path decoding of log-likelihood matrices with Kaldi's FasterDecoder
(decode.py: decode-faster-mapped), and the word error rate of the result (score.py: compute-wer).
"""
