"""Stage 3, the lang dir (Kaldi's utils/prepare_lang.sh): the lexicon with its disambiguation
symbols and the lexicon FST L.fst (lexicon.py), the grammar G.fst (grammar.py), OpenFst file
reading and writing (fstio.py), and the lang dir itself: symbol tables, phone sets, HMM
topology, written and read back (langdir.py).
"""
