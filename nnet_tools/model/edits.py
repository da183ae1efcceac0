"""Model edits a job applies before it trains, as Kaldi's driver pipes the model through
``nnet3-copy --scale=S --edits='...'``: a parameter scale (proportional shrink) and
``set-dropout-proportion name=PATTERN proportion=P`` (the dropout schedule).
"""
import re

import torch

from nnet_tools.errors import NnetError
from nnet_tools.log import logger


@torch.no_grad()
def scale_parameters(model, scale):
    """nnet3-copy --scale: multiply every parameter by ``scale``. Batch-norm's running mean and
    variance stay as they are: Kaldi scales its stored count, sum and sum of squares together,
    which leaves the mean and variance they define unchanged."""
    if scale != 1.0:
        for p in model.parameters():
            p.mul_(scale)


def name_matches(name, pattern):
    """Kaldi's NameMatchesPattern: '*' matches any run of characters; nothing else is special."""
    return re.fullmatch(".*".join(re.escape(piece) for piece in pattern.split("*")), name, re.S) is not None


def set_dropout_proportion(model, pattern, proportion):
    """Set the proportion of every dropout part whose name (``<layer>.dropout``) matches
    ``pattern``, in the module and in the model's config (so the saved model keeps it).
    Returns how many were set."""
    if not 0.0 <= proportion <= 1.0:
        raise NnetError(f"set-dropout-proportion name={pattern}: proportion {proportion} is not in [0, 1]")
    count = 0
    for name, index, part in model.dropout_parts():
        if name_matches(name, pattern):
            part.p = float(proportion)
            model.config["layers"][index]["dropout-proportion"] = float(proportion)
            count += 1
    return count


def _directive(line, where):
    words = line.split()
    fields = {}
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if not eq or not key:
            raise NnetError(f"{where}: expected key=value, got {word!r} in {line!r}")
        fields[key] = value
    return words[0], fields


def apply_edits(model, text, where="--edits"):
    """Apply nnet3-copy style edits: directives separated by ';' or newlines. Only
    set-dropout-proportion is supported (name defaults to '*', as in Kaldi)."""
    for line in re.split(r"[;\n]", text):
        if not line.strip():
            continue
        directive, fields = _directive(line.strip(), where)
        if directive != "set-dropout-proportion":
            raise NnetError(f"{where}: unsupported edit directive {directive!r} (supported: set-dropout-proportion)")
        unknown = set(fields) - {"name", "proportion"}
        if unknown:
            raise NnetError(f"{where}: unknown key(s) {sorted(unknown)} in {line.strip()!r}")
        if "proportion" not in fields:
            raise NnetError(f"{where}: expected proportion to be set in line: {line.strip()!r}")
        try:
            proportion = float(fields["proportion"])
        except ValueError:
            raise NnetError(f"{where}: proportion {fields['proportion']!r} is not a number in {line.strip()!r}") from None
        count = set_dropout_proportion(model, fields.get("name", "*"), proportion)
        logger.info(f"Set dropout proportions for {count} components.")
