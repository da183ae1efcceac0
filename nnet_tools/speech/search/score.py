"""Word error rate as Kaldi's compute-wer: '%WER 1.23 [ 12 / 975, 3 ins, 4 del, 5 sub ]'."""
import kaldialign

from nnet_tools.errors import NnetError


class ErrorCounts:
    def __init__(self):
        self.ins = self.dels = self.subs = self.ref_words = 0
        self.sent_errors = self.sents = 0

    def add(self, ref, hyp):
        """Count the edits between one reference and one hypothesis (lists of words)."""
        ed = kaldialign.edit_distance(ref, hyp)
        self.ins += ed["ins"]
        self.dels += ed["del"]
        self.subs += ed["sub"]
        self.ref_words += len(ref)
        self.sents += 1
        self.sent_errors += int(ed["total"] > 0)

    @property
    def errors(self):
        return self.ins + self.dels + self.subs

    def wer_line(self, partial=False):
        """Kaldi's line: 100 * errors / ref words with two decimals; ' [PARTIAL]' when some
        reference had no hypothesis."""
        wer = 100.0 * self.errors / self.ref_words if self.ref_words else 0.0
        return (f"%WER {wer:.2f} [ {self.errors} / {self.ref_words}, {self.ins} ins, {self.dels} del, "
                f"{self.subs} sub ]" + (" [PARTIAL]" if partial else ""))

    def ser_line(self):
        ser = 100.0 * self.sent_errors / self.sents if self.sents else 0.0
        return f"%SER {ser:.2f} [ {self.sent_errors} / {self.sents} ]"


def compute_wer(refs, hyps, mode="strict"):
    """(ErrorCounts, number of references without a hypothesis), as Kaldi's compute-wer --mode:
    'strict' (its default) fails on a reference without a hypothesis, 'present' skips it,
    'all' scores it against an empty hypothesis. Hypotheses without a reference are ignored."""
    if mode not in ("present", "all", "strict"):
        raise NnetError(f"--mode must be present, all or strict, not '{mode}'")
    counts = ErrorCounts()
    missing = 0
    for utt, ref in refs.items():
        if utt not in hyps:
            if mode == "strict":
                raise NnetError(f"no hypothesis for utterance '{utt}' (--mode=strict; "
                                f"--mode=present skips it, --mode=all scores it as empty)")
            missing += 1
            if mode == "present":
                continue
        counts.add(ref, hyps.get(utt, []))
    # Either would print '%WER 0.00' (Kaldi: nan), which best_wer.sh would then pick as the best.
    if not counts.sents:
        raise NnetError(f"no utterance scored: none of the {len(refs)} references has a hypothesis")
    if not counts.ref_words:
        raise NnetError(f"no reference words in the {counts.sents} utterances scored: a WER is undefined")
    return counts, missing
