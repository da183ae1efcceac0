"""Data: Kaldi tables, Kaldi text vectors, the egs archive format, egs dumping, image corpora."""
