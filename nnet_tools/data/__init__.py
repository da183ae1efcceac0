"""Data: Kaldi tables, the egs archive format, egs dumping, image corpora."""
