"""Stage 3, the lang dir (Kaldi's utils/prepare_lang.sh): the lexicon with its disambiguation
symbols and the lexicon FST L.fst (lexicon.py), Kaldi's dict dir and its checks (dictdir.py),
a dict dir pronounced by espeak-ng (espeak_dict.py), word-position-dependent phones
(positions.py), the grammar G.fst: a word loop (grammar.py) or a word n-gram LM trained, scored
and formatted (lm.py), OpenFst file reading and writing (fstio.py), and the lang dir itself:
symbol tables, phone sets, HMM topology, written and read back (langdir.py).
"""
