"""The grammar G.fst of a lang dir: a word loop (a digit-loop grammar)."""
import math

from nnet_tools.errors import NnetError


def word_loop_fst(lang, exclude=("!SIL",)):
    """G: one state looping over every real word with equal probability (a digit-loop grammar)."""
    import kaldifst
    loop_words = [i for w, i in lang.words.items()
                  if i != 0 and not w.startswith("#") and w not in ("<s>", "</s>") and w not in exclude]
    if not loop_words:
        raise NnetError(f"the lexicon has no word for the word-loop grammar but {', '.join(exclude)}")
    cost = math.log(len(loop_words))
    fst = kaldifst.StdVectorFst()
    s = fst.add_state()
    fst.start = s
    fst.set_final(state=s, weight=0.0)
    for i in loop_words:
        fst.add_arc(state=s, arc=kaldifst.StdArc(ilabel=i, olabel=i, weight=cost, nextstate=s))
    kaldifst.arcsort(fst, sort_type="ilabel")
    return fst
