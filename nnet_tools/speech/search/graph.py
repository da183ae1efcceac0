"""The decoding graph HCLG (Kaldi's utils/mkgraph.sh) from L_disambig.fst, G.fst and a model.

Steps as mkgraph.sh: LG = detstar(L o G) in the log semiring, minimised; CLG by composing the
(monophone) context; Ha = the HMM transducer with transition probs (scale 1.0); HCLGa =
detstar(Ha o CLG) with disambiguation transition-ids removed, minimised; HCLG = HCLGa with
self-loops (scale 0.1). LG is pushed as fstpushspecial pushes it (push_special.py): without it
the LM's costs come at word ends and a beam of 13 prunes the right word sequences. fstrmepslocal,
an optimisation only, is left out.
"""
import kaldi_hmm_gmm as khg  # before kaldifst: the other import order hangs (see nnet_tools/speech/__init__.py)
import kaldifst

from nnet_tools.errors import NnetError
from nnet_tools.speech.search.push_special import push_special


def _relabel_inputs_to_eps(fst, labels):
    """fstrmsymbols: a copy of ``fst`` whose input labels in ``labels`` are epsilon."""
    labels = set(labels)
    if not labels:
        return fst
    out = kaldifst.StdVectorFst()
    for _ in range(fst.num_states):
        out.add_state()
    out.start = fst.start
    for s in range(fst.num_states):
        out.set_final(s, fst.final(s))
        for a in kaldifst.ArcIterator(fst, s):
            out.add_arc(s, kaldifst.StdArc(0 if a.ilabel in labels else a.ilabel, a.olabel, a.weight, a.nextstate))
    return out


def make_hclg(lang, model, l_disambig, g, transition_scale=1.0, self_loop_scale=0.1):
    """HCLG with transition-ids on the input side and word-ids on the output side."""
    kaldifst.arcsort(l_disambig, sort_type="olabel")
    kaldifst.arcsort(g, sort_type="ilabel")
    lg = kaldifst.compose(l_disambig, g)
    kaldifst.determinize_star(lg, use_log=True)
    kaldifst.minimize_encoded(lg)
    lg = push_special(lg)
    tree = model.tree()
    clg, ilabels = kaldifst.compose_context(disambig_syms=lang.disambig, context_width=tree.context_width,
                                            central_position=tree.central_position, ifst=lg)
    kaldifst.arcsort(clg, sort_type="ilabel")
    ha, disambig_tids = khg.get_h_transducer(ilabel_info=ilabels, ctx_dep=tree, trans_model=model.tm,
                                             config=khg.HTransducerConfig(transition_scale=transition_scale))
    hclga = kaldifst.compose(ha, clg)
    kaldifst.determinize_star(hclga, use_log=True)
    hclga = _relabel_inputs_to_eps(hclga, disambig_tids)
    kaldifst.minimize_encoded(hclga)
    hclg = khg.add_self_loops(self_loop_scale=self_loop_scale, disambig_syms=[], reorder=True,
                              trans_model=model.tm, ifst=hclga)
    kaldifst.arcsort(hclg, sort_type="ilabel")
    if hclg.num_states == 0:
        raise NnetError("HCLG is empty: L and G have no path in common (are G's words in L?)")
    return hclg
