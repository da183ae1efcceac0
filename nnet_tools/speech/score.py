"""Word error rate as Kaldi's compute-wer: '%WER 1.23 [ 12 / 975, 3 ins, 4 del, 5 sub ]'."""
import re

import kaldialign

from nnet_tools.errors import NnetError

WER_LINE = re.compile(r"^%WER (\d+\.\d\d) \[ (\d+) / (\d+), (\d+) ins, (\d+) del, (\d+) sub \]")


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

    def wer_line(self):
        # Kaldi prints 100 * errors / ref words with two decimals; an empty reference is 0 words.
        wer = 100.0 * self.errors / self.ref_words if self.ref_words else 0.0
        return (f"%WER {wer:.2f} [ {self.errors} / {self.ref_words}, {self.ins} ins, {self.dels} del, "
                f"{self.subs} sub ]")

    def ser_line(self):
        ser = 100.0 * self.sent_errors / self.sents if self.sents else 0.0
        return f"%SER {ser:.2f} [ {self.sent_errors} / {self.sents} ]"


def compute_wer(refs, hyps, mode="present"):
    """ErrorCounts over utterances; mode as compute-wer's: 'present' scores only utterances in
    both, 'all' fails on a missing hypothesis, 'strict' also on a missing reference."""
    if mode not in ("present", "all", "strict"):
        raise NnetError(f"--mode must be present, all or strict, not '{mode}'")
    counts = ErrorCounts()
    missing = 0
    for utt, ref in refs.items():
        if utt not in hyps:
            if mode != "present":
                raise NnetError(f"no hypothesis for utterance '{utt}' (--mode={mode})")
            missing += 1
            continue
        counts.add(ref, hyps[utt])
    if mode == "strict":
        extra = sorted(set(hyps) - set(refs))
        if extra:
            raise NnetError(f"no reference for utterance '{extra[0]}' (--mode=strict)")
    # Either would print '%WER 0.00', which best_wer.sh would then pick as the best.
    if not counts.sents:
        raise NnetError(f"no utterance scored: none of the {len(refs)} references has a hypothesis")
    if not counts.ref_words:
        raise NnetError(f"no reference words in the {counts.sents} utterances scored: a WER is undefined")
    return counts, missing


def best_wer(lines):
    """utils/best_wer.sh: the line with the lowest WER among '%WER ...' lines (None if none)."""
    best = None
    for line in lines:
        m = WER_LINE.search(line.split(":", 1)[-1].strip()) or WER_LINE.search(line.strip())
        if m and (best is None or float(m.group(1)) < best[0]):
            best = (float(m.group(1)), line.rstrip("\n"))
    return None if best is None else best[1]
