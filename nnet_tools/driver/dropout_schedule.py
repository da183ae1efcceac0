"""Kaldi's --trainer.dropout-schedule (steps/libs/nnet3/train/dropout_schedule.py).

A schedule is ``func`` or space-separated ``pattern=func`` items (a bare func means ``*=func``;
later patterns are applied after, so they override earlier ones on the parts both match). A func
is a comma list of at least two proportions: the first at data fraction 0, the last at 1, and the
ones between ``value@x`` or a bare ``value``, which Kaldi places at x = 0.5 (not spread evenly).
Between points the proportion is linear in x, the fraction of the data processed so far.

    >>> proportions(parse("*=0,0.5,0 lstm.*=0,0.3@0.75,0"), 0.75)
    [('*', 0.25), ('lstm.*', 0.3)]
"""
from nnet_tools.errors import NnetError


def _func(text, where):
    parts = text.strip().split(",")
    if len(parts) < 2:
        raise NnetError(f"{where}: dropout proportion string {text!r} must specify at least the start "
                        f"and end dropouts")
    points = []
    for i, item in enumerate(parts):
        value, _, at = item.partition("@")
        try:
            proportion = float(value)
            x = 0.0 if i == 0 else 1.0 if i == len(parts) - 1 else float(at) if at else 0.5
        except ValueError:
            raise NnetError(f"{where}: cannot parse {item!r} in dropout schedule {text!r} "
                            f"(want value or value@fraction)") from None
        if at and i in (0, len(parts) - 1):
            raise NnetError(f"{where}: {item!r}: the first and last proportions are at fractions 0 and 1; "
                            f"give them without @")
        if not 0.0 <= proportion <= 1.0:
            raise NnetError(f"{where}: dropout proportion {value} in {text!r} is not in [0, 1]")
        if not (points[-1][0] if points else 0.0) <= x <= 1.0:
            raise NnetError(f"{where}: failed while parsing {item!r} in dropout schedule {text!r}: data "
                            f"fractions must be in [0, 1] and increasing")
        points.append((x, proportion))
    return points


def parse(text, where="--dropout-schedule"):
    """'pattern=func ...' -> [(pattern, [(x, proportion), ...] ascending in x)]."""
    schedule = []
    for item in text.split():
        fields = item.split("=")
        if len(fields) > 2:
            raise NnetError(f"{where}: the dropout schedule must be 'pattern1=func1 pattern2=func2' (the pattern "
                            f"may be omitted for all components); got {item!r} in {text!r}")
        pattern, func = fields if len(fields) == 2 else ("*", fields[0])
        schedule.append((pattern, _func(func, where)))
    if not schedule:
        raise NnetError(f"{where}: empty dropout schedule")
    return schedule


def value_at(points, data_fraction):
    """Piecewise-linear value of one func at a data fraction in [0, 1]. At a repeated x (a step)
    the later point wins, as in Kaldi; x = 0 gives the first point."""
    if data_fraction <= 0.0:
        return points[0][1]
    below = max(i for i, (x, _) in enumerate(points) if x <= data_fraction)
    if below == len(points) - 1:
        return points[below][1]
    (x0, v0), (x1, v1) = points[below], points[below + 1]
    return v0 + (data_fraction - x0) * (v1 - v0) / (x1 - x0)


def proportions(schedule, data_fraction):
    """[(pattern, proportion)] at ``data_fraction`` (num_archives_processed / num_archives_to_process,
    clamped to [0, 1] as Kaldi's get_dropout_edit_option does)."""
    fraction = min(max(float(data_fraction), 0.0), 1.0)
    return [(pattern, value_at(points, fraction)) for pattern, points in schedule]


def edits(schedule, data_fraction):
    """The nnet-train-one-job --edits value (nnet3-copy --edits) that sets those proportions:
    'set-dropout-proportion name=* proportion=0.25;...'."""
    return ";".join(f"set-dropout-proportion name={pattern} proportion={value:.6g}"
                    for pattern, value in proportions(schedule, data_fraction))
