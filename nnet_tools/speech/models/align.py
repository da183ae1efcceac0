"""Graphs and alignment: compile-train-graphs, align-equal-compiled, gmm-align-compiled."""
import kaldi_hmm_gmm as khg  # before kaldifst: the other import order hangs (see nnet_tools/speech/__init__.py)
import kaldifst

import numpy as np

from nnet_tools.cpp_stderr import stderr_captured
from nnet_tools.errors import NnetError


class GraphCompiler:
    """compile-train-graphs: per-utterance HCLG of the transcript, without transition probs
    (Kaldi adds them at alignment time, as they change every pass)."""

    def __init__(self, model, lang, lexicon_fst, where="lang"):
        model.check_lang(lang, where)
        self.lang = lang
        opts = khg.TrainingGraphCompilerOptions(transition_scale=0.0, self_loop_scale=0.0)
        # The compiler keeps C++ references to these: hold them so Python does not free them.
        self._keep = (model.tree(), lexicon_fst, opts)
        self._gc = khg.TrainingGraphCompiler(trans_model=model.tm, ctx_dep=self._keep[0], lex_fst=lexicon_fst,
                                             disambig_syms=lang.disambig, opts=opts)

    def compile(self, words, where):
        word_ids = self.lang.word_ids(words, where)
        try:
            with stderr_captured([]):
                return self._gc.compile_graph_from_text(word_ids)
        except RuntimeError:  # Kaldi's assertion: L composed with the words is empty
            raise NnetError(f"{where}: the transcript has no path through L.fst (a word of words.txt "
                            f"that L.fst does not pronounce?)") from None


def align_equal(graph, num_frames, seed):
    """align-equal-compiled: a random path of exactly num_frames through the graph, or None."""
    ok, path = kaldifst.equal_align(ifst=graph, length=num_frames, rand_seed=seed, num_retries=10)
    if not ok:
        return None
    ok, tids, _, _ = kaldifst.get_linear_symbol_sequence(path)
    return tids if ok and len(tids) == num_frames else None


class Aligner:
    """gmm-align-compiled with Kaldi's train_mono.sh scales; counts done/failed/retried."""

    def __init__(self, model, beam=6.0, retry_beam=40.0, careful=False, acoustic_scale=0.1,
                 transition_scale=1.0, self_loop_scale=0.1):
        if not (0 < beam < np.inf and 0 < acoustic_scale < np.inf):
            raise NnetError(f"--beam and --acoustic-scale must be finite and > 0, got {beam} and {acoustic_scale}")
        if not (retry_beam == 0 or beam < retry_beam < np.inf):  # Kaldi: "Beams do not make sense"
            raise NnetError(f"--retry-beam must be 0 (no retry) or finite and above --beam {beam:g}, got {retry_beam:g}")
        if not (0 <= transition_scale < np.inf and 0 <= self_loop_scale < np.inf):
            raise NnetError(f"--transition-scale and --self-loop-scale must be finite and >= 0, "
                            f"got {transition_scale} and {self_loop_scale}")
        self.model = model
        self.config = khg.AlignConfig(beam=beam, retry_beam=retry_beam, careful=careful)
        self.scales = (acoustic_scale, transition_scale, self_loop_scale)
        self.done = self.failed = self.retried = self.frames = 0
        self.tot_like = 0.0

    def align(self, utt, graph, feats):
        acoustic_scale, transition_scale, self_loop_scale = self.scales
        khg.add_transition_probs(trans_model=self.model.tm, transition_scale=transition_scale,
                                 self_loop_scale=self_loop_scale, fst=graph)
        decodable = khg.DecodableAmDiagGmmScaled(am=self.model.am, tm=self.model.tm,
                                                 feats=np.ascontiguousarray(feats, dtype=np.float32),
                                                 scale=acoustic_scale)
        done_before = self.done
        (self.done, self.failed, self.retried, self.tot_like, self.frames, alignment, _) = \
            khg.align_utterance_wrapper(config=self.config, utt=utt, acoustic_scale=acoustic_scale, fst=graph,
                                        decodable=decodable, num_done=self.done, num_error=self.failed,
                                        num_retried=self.retried, tot_like=self.tot_like,
                                        frame_count=self.frames)
        return alignment if self.done > done_before else None


def phone_segments(table, tids):
    """Kaldi's SplitToPhones: [(phone, pdf-class of each frame)] in order, from an alignment and
    its model's tid_table(). A phone ends with its transition into the final state, and, as our
    graphs put self-loops after the transition out of a state (Kaldi's --reorder), with the
    self-loops that follow it."""
    tids = np.asarray(tids)
    ends = []
    for e in np.flatnonzero(table.is_final[tids]) + 1:
        while e < len(tids) and table.is_self_loop[tids[e]] and table.state[tids[e]] == table.state[tids[e - 1]]:
            e += 1
        ends.append(e)
    if not ends or ends[-1] != len(tids):  # an alignment that stops inside a phone
        ends.append(len(tids))
    starts = [0] + ends[:-1]
    return [(int(table.phone[tids[a]]), table.pdf_class[tids[a:b]]) for a, b in zip(starts, ends)]


def contexts(phones, width, central):
    """The phone window around each phone of a sequence, 0 beyond its ends (Kaldi's convention)."""
    padded = [0] * central + list(phones) + [0] * (width - 1 - central)
    return [padded[i:i + width] for i in range(len(phones))]


class AlignmentConverter:
    """convert-ali: an alignment of ``old`` as the same path (phones, HMM states, transitions)
    through ``new``'s transition-ids, whose pdfs its own tree gives in each phone's context."""

    def __init__(self, old, new):
        self.old = old.tid_table()
        self.new_state = {t.__getstate__(): s + 1 for s, t in enumerate(new.tm.tuples)}
        self.new_first = np.asarray(new.tm.state2id)
        self.topo = khg.HmmTopology()
        self.topo.read(new.topo_text)
        self.tree = new.tree()
        self._cache = {}   # (phone window, HMM state) -> new transition-state

    def convert(self, tids, where):
        tids = np.asarray(tids)
        segments = phone_segments(self.old, tids)
        windows = contexts([p for p, _ in segments], self.tree.context_width, self.tree.central_position)
        out, start = np.empty_like(tids), 0
        for (phone, classes), window in zip(segments, windows):
            for t in range(start, start + len(classes)):
                tid = tids[t]
                state = self._new_state(window, phone, int(self.old.hmm_state[tid]), where)
                out[t] = self.new_first[state] + tid - self.old.first_tid[self.old.state[tid]]
            start += len(classes)
        return out

    def _new_state(self, window, phone, hmm_state, where):
        key = (tuple(window), hmm_state)
        if key not in self._cache:
            entry = self.topo.topology_for_phone(phone)
            pdfs = []
            for cls in (entry[hmm_state].forward_pdf_class, entry[hmm_state].self_loop_pdf_class):
                ok, pdf = self.tree.compute(window, cls)
                if not ok:
                    raise NnetError(f"{where}: the new tree has no pdf for phones {window}, pdf-class {cls}")
                pdfs.append(pdf)
            state = self.new_state.get((phone, hmm_state, *pdfs))
            if state is None:
                raise NnetError(f"{where}: phone {phone} state {hmm_state} is not in the new model "
                                f"(models from different topologies?)")
            self._cache[key] = state
        return self._cache[key]
