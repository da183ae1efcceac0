"""Word-position-dependent phones, as utils/prepare_lang.sh --position-dependent-phones true
makes them: in the lexicon a word's first phone gets _B, its last _E, those between _I, the one
phone of a one-phone word _S (silence phones too: '!SIL SIL' becomes '!SIL SIL_S'). The phone
inventory ("phone map") gives each non-silence base phone the four variants P_B P_E P_I P_S and
each silence phone the plain phone too (SIL SIL_B SIL_E SIL_I SIL_S: the plain one is the
optional silence between words, which is in no word).
"""

SUFFIXES = ("_B", "_E", "_I", "_S")
BOUNDARY = {"_B": "begin", "_E": "end", "_I": "internal", "_S": "singleton"}


def mark_lexicon(lexicon):
    """The lexicon [(word, [phones])] with each phone's position in its word marked."""
    out = []
    for word, phones in lexicon:
        if len(phones) == 1:
            out.append((word, [phones[0] + "_S"]))
        else:
            out.append((word, [phones[0] + "_B"] + [p + "_I" for p in phones[1:-1]] + [phones[-1] + "_E"]))
    return out


def phone_map(silence_lines, nonsilence_lines, position_dependent=True):
    """{base phone: [its phones in phones.txt order]} (prepare_lang.sh's phone_map.txt)."""
    out = {}
    for line in silence_lines:
        for p in line:
            out[p] = [p] + [p + s for s in SUFFIXES] if position_dependent else [p]
    for line in nonsilence_lines:
        for p in line:
            out[p] = [p + s for s in SUFFIXES] if position_dependent else [p]
    return out


def apply_map(mapping, lines):
    """Each line of base phones as the line of all their variants (utils/apply_map.pl)."""
    return [[v for p in line for v in mapping[p]] for line in lines]


def questions(silence_lines, nonsilence_lines):
    """The extra questions prepare_lang.sh appends: one per position for all the non-silence
    phones, then the plain silence phones and one per position for them."""
    nonsil = [p for line in nonsilence_lines for p in line]
    sil = [p for line in silence_lines for p in line]
    return [[p + s for p in nonsil] for s in SUFFIXES] + [[p + s for p in sil] for s in ("",) + SUFFIXES]


def word_boundary(phones):
    """phones/word_boundary.txt's [(phone, begin|end|internal|singleton|nonword)]."""
    return [(p, BOUNDARY.get(p[-2:], "nonword")) for p in phones]
