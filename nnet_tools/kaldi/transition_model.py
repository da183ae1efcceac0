"""Kaldi's TransitionModel and HmmTopology (src/hmm/transition-model.cc, hmm-topology.cc), binary
and text, to and from kaldi-hmm-gmm's ``TransitionModel``.

A TransitionModel in a file is ``<TransitionModel>``, the topology, ``<Triples>`` (phone,
HMM state, pdf) for HMM models or ``<Tuples>`` (phone, HMM state, forward pdf, self-loop pdf) for
chain models, then ``<LogProbs>`` (one per transition-id, 1-based: its length is the number of
transition-ids + 1) and ``</TransitionModel>``. A binary topology is its member vectors (phones,
phone -> entry), a -1 where the entries carry self-loop pdf classes (chain), and per entry its
states (pdf class(es), transitions as (destination, probability)); a text one is the `topo` file
of a lang dir. Everything else (transition-states, transition-ids, pdfs) is derived, as Kaldi's
ComputeDerived does.
"""
import kaldi_hmm_gmm as khg  # before kaldifst: the other import order hangs (see nnet_tools/speech/__init__.py)
from _kaldi_hmm_gmm import TransitionModelTuple  # the C++ module; the package does not re-export it

from dataclasses import dataclass

import numpy as np

from nnet_tools.errors import NnetError
from nnet_tools.kaldi.stream import KaldiReader, KaldiWriter
from nnet_tools.speech.models.gmm import kaldi_reason

NO_PDF = -1   # Kaldi's kNoPdf: a non-emitting state


@dataclass
class State:
    forward_pdf_class: int
    self_loop_pdf_class: int
    transitions: list   # [(destination state, probability)]


@dataclass
class Topology:
    phone2idx: list     # phone -> index into entries (-1: not a phone)
    entries: list       # [[State]]

    @property
    def phones(self):
        return [p for p, i in enumerate(self.phone2idx) if i >= 0]

    @property
    def is_hmm(self):
        return all(s.forward_pdf_class == s.self_loop_pdf_class for e in self.entries for s in e)

    def entry(self, phone):
        return self.entries[self.phone2idx[phone]]

    def text(self):
        """Kaldi's text form (a lang dir's ``topo``), one state a line."""
        lines = ["<Topology>"]
        for i, entry in enumerate(self.entries):
            lines += ["<TopologyEntry>", "<ForPhones>",
                      " ".join(str(p) for p, k in enumerate(self.phone2idx) if k == i), "</ForPhones>"]
            for j, s in enumerate(entry):
                fields = [f"<State> {j}"]
                if s.forward_pdf_class != NO_PDF:
                    fields.append(f"<PdfClass> {s.forward_pdf_class}" if self.is_hmm else
                                  f"<ForwardPdfClass> {s.forward_pdf_class} <SelfLoopPdfClass> {s.self_loop_pdf_class}")
                fields += [f"<Transition> {d} {_g(p)}" for d, p in s.transitions]
                lines.append(" ".join(fields + ["</State>"]))
            lines.append("</TopologyEntry>")
        return "\n".join(lines + ["</Topology>"]) + "\n"


def _g(x):
    """A float32 as the shortest text that reads back to it (0.75, 0.1)."""
    return str(np.float32(x))


def read_topology(r: KaldiReader):
    """An HmmTopology at the reader's position (binary or text, as the reader's)."""
    r.expect("<Topology>")
    if r.binary:
        r.int_vector()                      # phones: phone2idx says it again
        phone2idx = r.int_vector()
        n = r.int32()
        is_hmm = n != -1
        if not is_hmm:
            n = r.int32()
        entries = []
        for _ in range(_count(r, n, "topology entries")):
            states = []
            for _ in range(_count(r, r.int32(), "states")):
                forward = r.int32()
                self_loop = forward if is_hmm else r.int32()
                transitions = [(r.int32(), r.float()) for _ in range(_count(r, r.int32(), "transitions"))]
                states.append(State(forward, self_loop, transitions))
            entries.append(states)
        r.expect("</Topology>")
        return Topology(list(phone2idx), entries)
    phone2idx, entries = [], []
    while (token := r.token()) != "</Topology>":
        if token != "<TopologyEntry>":
            raise _bad(r, f"expected <TopologyEntry> or </Topology>, got '{token}'")
        r.expect("<ForPhones>")
        phones = []
        while (token := r.token()) != "</ForPhones>":
            if not token.isdigit() or int(token) == 0:
                raise _bad(r, f"expected a phone id (a positive integer) or </ForPhones>, got '{token}'")
            phones.append(int(token))
        for p in phones:
            phone2idx += [-1] * (p + 1 - len(phone2idx))
            if phone2idx[p] != -1:
                raise _bad(r, f"phone {p} is in two topology entries")
            phone2idx[p] = len(entries)
        entries.append(_read_text_states(r))
    return Topology(phone2idx, entries)


def _read_text_states(r):
    states = []
    token = r.token()
    while token != "</TopologyEntry>":
        if token != "<State>":
            raise _bad(r, f"expected <State> or </TopologyEntry>, got '{token}'")
        if r.int32() != len(states):
            raise _bad(r, f"states must be numbered in order from 0 (expected state {len(states)})")
        forward = self_loop = NO_PDF
        token = r.token()
        if token == "<PdfClass>":
            forward = self_loop = r.int32()
            token = r.token()
        elif token == "<ForwardPdfClass>":
            forward = r.int32()
            r.expect("<SelfLoopPdfClass>")
            self_loop = r.int32()
            token = r.token()
        transitions = []
        while token == "<Transition>":
            transitions.append((r.int32(), r.float()))
            token = r.token()
        if token != "</State>":
            raise _bad(r, f"expected <Transition> or </State>, got '{token}'")
        states.append(State(forward, self_loop, transitions))
        token = r.token()
    return states


def _bad(r, message):
    """The one-line error for what the reader found, naming its file."""
    return NnetError(f"{r.path}: at {r.where()}: {message}")


def _count(r, n, what):
    if n < 0 or n > 10 ** 7:
        raise _bad(r, f"bad number of {what}: {n}")
    return n


def write_topology(w: KaldiWriter, topo: Topology):
    """As Kaldi's HmmTopology::Write: member vectors in binary, the topo file's tokens in text."""
    w.token("<Topology>")
    w.newline()
    if w.binary:
        w.int_vector(topo.phones)
        w.int_vector(topo.phone2idx)
        if not topo.is_hmm:
            w.int32(-1)
        w.int32(len(topo.entries))
    for i, entry in enumerate(topo.entries):
        if w.binary:
            w.int32(len(entry))
        else:
            for token in ("<TopologyEntry>", "<ForPhones>"):
                w.token(token)
                w.newline()
            for p in (p for p, k in enumerate(topo.phone2idx) if k == i):
                w.int32(p)
            w.newline()
            w.token("</ForPhones>")
            w.newline()
        for j, s in enumerate(entry):
            _write_state(w, topo.is_hmm, j, s)
        if not w.binary:
            w.token("</TopologyEntry>")
            w.newline()
    w.token("</Topology>")
    w.newline()


def _write_state(w, is_hmm, j, s):
    if w.binary:
        w.int32(s.forward_pdf_class)
        if not is_hmm:
            w.int32(s.self_loop_pdf_class)
        w.int32(len(s.transitions))
    else:
        w.token("<State>")
        w.int32(j)
        if s.forward_pdf_class != NO_PDF:
            w.token("<PdfClass>" if is_hmm else "<ForwardPdfClass>")
            w.int32(s.forward_pdf_class)
            if not is_hmm:
                w.token("<SelfLoopPdfClass>")
                w.int32(s.self_loop_pdf_class)
    for d, p in s.transitions:
        if not w.binary:
            w.token("<Transition>")
        w.int32(d)
        w.float(p)
    if not w.binary:
        w.token("</State>")
        w.newline()


def parse_topology_text(text, path):
    """A lang dir's ``topo`` (text) as a Topology."""
    return read_topology(KaldiReader(text.encode(), path))


@dataclass
class TransitionModel:
    """What a Kaldi TransitionModel holds; the derived tables as Kaldi computes them."""
    topo: Topology
    tuples: list        # [(phone, hmm_state, forward_pdf, self_loop_pdf)], sorted
    log_probs: np.ndarray   # float32, [0] unused

    def __post_init__(self):
        self.state2id, cur = [0], 1   # per transition-state (1-based), one past the end too
        for phone, hmm_state, _, _ in self.tuples:
            self.state2id.append(cur)
            cur += len(self.topo.entry(phone)[hmm_state].transitions)
        self.state2id.append(cur)
        self.id2state, self.id2pdf = [0] * cur, [0] * cur
        for ts, (phone, hmm_state, forward, self_loop) in enumerate(self.tuples, 1):
            transitions = self.topo.entry(phone)[hmm_state].transitions
            for index, tid in enumerate(range(self.state2id[ts], self.state2id[ts + 1])):
                self.id2state[tid] = ts
                self.id2pdf[tid] = self_loop if transitions[index][0] == hmm_state else forward
        self.num_pdfs = max(max(t[2], t[3]) for t in self.tuples) + 1

    @property
    def num_transition_ids(self):
        return len(self.id2state) - 1

    def non_self_loop_log_probs(self):
        """Per transition-state, log(1 - self-loop prob) (0 without a self-loop), in float32 as Kaldi's."""
        out = [0.0]
        for ts, (phone, hmm_state, _, _) in enumerate(self.tuples, 1):
            loops = [k for k, (d, _) in enumerate(self.topo.entry(phone)[hmm_state].transitions) if d == hmm_state]
            if not loops:
                out.append(0.0)
                continue
            p = np.float32(1.0) - np.exp(np.float32(self.log_probs[self.state2id[ts] + loops[0]]))
            out.append(float(np.log(p if p > 0 else np.float32(1e-10))))
        return out

    def tid2pdf(self):
        """Array a with a[tid] = pdf-id (a[0] = -1: transition-ids start at 1)."""
        return np.array([-1] + self.id2pdf[1:], dtype=np.int32)


def read(r: KaldiReader):
    """A TransitionModel at the reader's position, checked as Kaldi's Read and Check do."""
    r.expect("<TransitionModel>")
    topo = read_topology(r)
    token = r.token()
    if token not in ("<Triples>", "<Tuples>"):
        raise _bad(r, f"expected <Triples> or <Tuples> after the topology, got '{token}'")
    tuples = []
    for _ in range(_count(r, r.int32(), "transition-states")):
        phone, hmm_state, forward = r.int32(), r.int32(), r.int32()
        tuples.append((phone, hmm_state, forward, r.int32() if token == "<Tuples>" else forward))
    r.expect("</" + token[1:])
    r.expect("<LogProbs>")
    log_probs = np.asarray(r.vector(), dtype=np.float32)
    r.expect("</LogProbs>")
    r.expect("</TransitionModel>")
    _check(r, topo, tuples, log_probs)
    return TransitionModel(topo, tuples, log_probs)


def hmm_topology(topo, where):
    """kaldi-hmm-gmm's HmmTopology of ``topo``, checked by Kaldi's HmmTopology::Check."""
    out = khg.HmmTopology()
    try:
        out.read(topo.text())
    except RuntimeError as e:
        raise NnetError(f"{where}: bad HMM topology: {kaldi_reason(e)}") from None
    return out


def _check(r, topo, tuples, log_probs):
    hmm_topology(topo, r.path)
    if not tuples:
        raise _bad(r, "a TransitionModel with no transition-states")
    if tuples != sorted(set(tuples)):
        raise _bad(r, "the transition-state tuples are not sorted and unique")
    num_ids = 0
    for phone, hmm_state, forward, self_loop in tuples:
        if not 0 < phone < len(topo.phone2idx) or topo.phone2idx[phone] < 0:
            raise _bad(r, f"a transition-state of phone {phone}, which the topology does not have")
        if not 0 <= hmm_state < len(topo.entry(phone)) - 1:
            raise _bad(r, f"phone {phone} has no emitting HMM state {hmm_state}")
        if forward < 0 or self_loop < 0:
            raise _bad(r, f"phone {phone} state {hmm_state}: negative pdf-id")
        num_ids += len(topo.entry(phone)[hmm_state].transitions)
    if len(log_probs) != num_ids + 1:
        raise _bad(r, f"<LogProbs> has {len(log_probs)} values; {num_ids} transition-ids need {num_ids + 1}")
    if not (np.isfinite(log_probs).all() and (log_probs <= 0).all()):
        raise _bad(r, "<LogProbs> must be finite and not positive (log-probabilities)")


def write(w: KaldiWriter, tm: TransitionModel):
    hmm = tm.topo.is_hmm
    w.token("<TransitionModel>")
    w.newline()
    write_topology(w, tm.topo)
    w.token("<Triples>" if hmm else "<Tuples>")
    w.int32(len(tm.tuples))
    w.newline()
    for t in tm.tuples:
        for x in t[:3] if hmm else t:
            w.int32(x)
        w.newline()
    for token in ("</Triples>" if hmm else "</Tuples>", "<LogProbs>"):
        w.token(token)
        w.newline()
    w.vector(np.asarray(tm.log_probs, dtype=np.float32))
    for token in ("</LogProbs>", "</TransitionModel>"):
        w.token(token)
        w.newline()


def to_khg(tm: TransitionModel, where):
    """(topology text, kaldi_hmm_gmm TransitionModel) for ``tm``. kaldi-hmm-gmm reads no
    TransitionModel; an unbuilt one takes the state tuple (its __setstate__ on a built one is
    ignored: see nnet_tools/speech/models/gmm.py's load)."""
    out = khg.TransitionModel.__new__(khg.TransitionModel)
    out.__setstate__(([TransitionModelTuple(*t) for t in tm.tuples], hmm_topology(tm.topo, where), tm.state2id,
                      tm.id2state, tm.id2pdf, tm.num_pdfs, [float(x) for x in tm.log_probs],
                      tm.non_self_loop_log_probs()))
    return tm.topo.text(), out


def from_khg(tm, where="transition model", topo_text=None):
    """Ours of a kaldi_hmm_gmm TransitionModel. The topology is ``topo_text`` (the text it was
    built from, our Model's topo_text: exact), else the one in its ``str()`` (Kaldi's text Write,
    whose probabilities have 6 digits); the log-probs are the object's, at full precision."""
    state = tm.__getstate__()
    topo = (parse_topology_text(topo_text, where) if topo_text is not None
            else read(KaldiReader(str(tm).encode(), where)).topo)
    return TransitionModel(topo, [tuple(t.__getstate__()) for t in state[0]], np.asarray(state[6], dtype=np.float32))
