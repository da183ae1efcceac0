"""MFCC and fbank features with kaldi-native-fbank (Kaldi's arithmetic): compute-{mfcc,fbank}-feats.

Options come as Kaldi's do, ``--num-mel-bins=40`` lines in a conf file (compute-mfcc-feats
--config=conf/mfcc.conf), so a Kaldi recipe's conf/ carries over. Waveforms are read by Kaldi's
own WaveData, from files or from commands in wav.scp.
"""
import dataclasses

import numpy as np

from nnet_tools.data import tables
from nnet_tools.data.textfile import printable, records, table_file
from nnet_tools.errors import NnetError
from nnet_tools.log import logger

# Kaldi option name -> (attribute path on the knf options, type). Shared by MFCC and fbank.
_FRAME = {"sample-frequency": ("frame_opts.samp_freq", float),
          "frame-shift": ("frame_opts.frame_shift_ms", float),
          "frame-length": ("frame_opts.frame_length_ms", float),
          "dither": ("frame_opts.dither", float),
          "preemphasis-coefficient": ("frame_opts.preemph_coeff", float),
          "remove-dc-offset": ("frame_opts.remove_dc_offset", "bool"),
          "window-type": ("frame_opts.window_type", str),
          "round-to-power-of-two": ("frame_opts.round_to_power_of_two", "bool"),
          "snip-edges": ("frame_opts.snip_edges", "bool"),
          "blackman-coeff": ("frame_opts.blackman_coeff", float),
          "num-mel-bins": ("mel_opts.num_bins", int),
          "low-freq": ("mel_opts.low_freq", float),
          "high-freq": ("mel_opts.high_freq", float),
          "vtln-low": ("mel_opts.vtln_low", float),
          "vtln-high": ("mel_opts.vtln_high", float),
          "use-energy": ("use_energy", "bool"),
          "energy-floor": ("energy_floor", float),
          "raw-energy": ("raw_energy", "bool"),
          "htk-compat": ("htk_compat", "bool")}
_MFCC_ONLY = {"num-ceps": ("num_ceps", int), "cepstral-lifter": ("cepstral_lifter", float)}
_FBANK_ONLY = {"use-log-fbank": ("use_log_fbank", "bool"), "use-power": ("use_power", "bool")}


@dataclasses.dataclass
class WaveOptions:
    """compute-{mfcc,fbank}-feats' own options, which Kaldi conf files may hold beside the
    feature options. Resampling and VTLN warping are not supported: --allow-downsample and
    --allow-upsample are accepted, but an utterance that needs them fails, and --vtln-warp
    must be 1."""
    channel: int = -1             # -1: the first channel, with a warning when there are more
    min_duration: float = 0.0     # seconds; shorter utterances give no output
    subtract_mean: bool = False   # subtract each utterance's mean feature vector
    allow_downsample: bool = False
    allow_upsample: bool = False


_PROGRAM = {"channel": ("channel", int), "min-duration": ("min_duration", float),
            "subtract-mean": ("subtract_mean", "bool"), "allow-downsample": ("allow_downsample", "bool"),
            "allow-upsample": ("allow_upsample", "bool")}
_ONLY = {"vtln-warp": 1.0, "output-format": "kaldi"}  # options taken with their one supported value


def _parse_value(name, text, kind, where):
    if kind == "bool":
        if text.lower() in ("true", "1"):
            return True
        if text.lower() in ("false", "0"):
            return False
        raise NnetError(f"{where}: --{name} takes true or false, not '{text}'")
    try:
        return kind(text)
    except ValueError:
        raise NnetError(f"{where}: --{name}: bad value '{text}'") from None


def make_options(feat_type, config=None, overrides=()):
    """(knf options for ``feat_type`` (mfcc|fbank), WaveOptions), from Kaldi's defaults, a conf
    file, then overrides. A boolean option given bare (``--use-energy``) is true, as in Kaldi.

    Kaldi's defaults differ from knf's in one place: dither 1.0 on int16-scale samples.
    """
    import kaldi_native_fbank as knf
    if feat_type not in ("mfcc", "fbank"):
        raise NnetError(f"feature type must be mfcc or fbank, not '{feat_type}'")
    opts = knf.MfccOptions() if feat_type == "mfcc" else knf.FbankOptions()
    opts.frame_opts.dither = 1.0
    known = dict(_FRAME, **(_MFCC_ONLY if feat_type == "mfcc" else _FBANK_ONLY))
    lines = []
    if config:
        try:
            with open(config) as f:
                lines = [(f"{config}:{n}", line.split("#")[0].strip()) for n, line in enumerate(f, 1)]
        except OSError as e:
            raise NnetError(f"{config}: cannot read: {e.strerror}") from None
    lines += [("command line", o) for o in overrides]
    wave = WaveOptions()
    for where, line in lines:
        if not line:
            continue
        name, eq, value = line.lstrip("-").partition("=")
        if name in _ONLY:
            path, kind = None, type(_ONLY[name])
        else:
            path, kind = known.get(name) or _PROGRAM.get(name) or (None, None)
        if not eq and kind == "bool":
            value, eq = "true", "="
        if not line.startswith("--") or not eq:
            raise NnetError(f"{where}: expected --option=value, got '{line}'")
        if kind is None:
            raise NnetError(f"{where}: unknown {feat_type} option --{name}")
        value = _parse_value(name, value, kind, where)
        if name in _ONLY:
            if value != _ONLY[name]:
                raise NnetError(f"{where}: --{name}={value} is not supported, only {_ONLY[name]}")
            continue
        target = wave if name in _PROGRAM else opts
        *parents, leaf = path.split(".")
        for p in parents:
            target = getattr(target, p)
        setattr(target, leaf, value)
    _check_options(opts, feat_type)
    return opts, wave


_WINDOWS = ("hamming", "hanning", "povey", "rectangular", "sine", "blackman")


def _check_options(opts, feat_type):
    """Kaldi's own checks on the options, before kaldi-native-fbank sees them: out of range,
    some of its code divides by zero or reads past a buffer instead of failing."""
    import kaldi_native_fbank as knf
    frame, mel = opts.frame_opts, opts.mel_opts
    numbers = {"--sample-frequency": frame.samp_freq, "--frame-shift": frame.frame_shift_ms,
               "--frame-length": frame.frame_length_ms, "--dither": frame.dither,
               "--preemphasis-coefficient": frame.preemph_coeff, "--low-freq": mel.low_freq,
               "--high-freq": mel.high_freq, "--energy-floor": opts.energy_floor}
    if feat_type == "mfcc":
        numbers["--cepstral-lifter"] = opts.cepstral_lifter
    for name, value in numbers.items():
        if not np.isfinite(value):
            raise NnetError(f"{name} must be a finite number, got {value}")
    samples_per_ms = frame.samp_freq / 1000.0
    if frame.samp_freq <= 0 or frame.frame_shift_ms * samples_per_ms < 1 or frame.frame_length_ms * samples_per_ms < 1:
        raise NnetError(f"--frame-shift {frame.frame_shift_ms:g} ms and --frame-length {frame.frame_length_ms:g} ms "
                        f"must each be at least one sample at --sample-frequency {frame.samp_freq:g}")
    if frame.dither < 0 or not 0 <= frame.preemph_coeff <= 1 or opts.energy_floor < 0:
        raise NnetError("need --dither >= 0, 0 <= --preemphasis-coefficient <= 1 and --energy-floor >= 0")
    if frame.window_type not in _WINDOWS:
        raise NnetError(f"--window-type must be one of {', '.join(_WINDOWS)}, not '{frame.window_type}'")
    if mel.num_bins < 3:
        raise NnetError(f"--num-mel-bins must be at least 3, got {mel.num_bins}")
    if feat_type == "mfcc" and not 1 <= opts.num_ceps <= mel.num_bins:
        raise NnetError(f"--num-ceps must be in 1..--num-mel-bins ({mel.num_bins}), got {opts.num_ceps}")
    try:  # the mel banks: frequencies and bin counts the FFT size cannot carry
        (knf.OnlineMfcc if feat_type == "mfcc" else knf.OnlineFbank)(opts)
    except (ValueError, RuntimeError) as e:
        raise NnetError(f"bad {feat_type} options: {str(e).strip().splitlines()[-1]}") from None


def read_wav(rxfilename, where, channel=-1):
    """(rate, float32 samples in int16 scale) of one channel of a wav file or command, as
    compute-mfcc-feats picks it: --channel=-1 is the first, with a warning if there are more;
    None when the file has no such channel (Kaldi: 'producing no output')."""
    rate, data = read_channels(rxfilename, where)
    if channel == -1:
        if len(data) != 1:
            logger.warning(f"{where}: channel not specified but you have data with {len(data)} channels; "
                           f"defaulting to zero")
        channel = 0
    if channel >= len(data):
        logger.warning(f"{where}: {len(data)} channels but you specified channel {channel}, producing no output")
        return rate, None
    return rate, data[channel]


def read_channels(rxfilename, where):
    """(rate, [channels x samples]) of a wav file or command."""
    try:
        return tables.read_wave(rxfilename, name=f"{where}: {rxfilename}")
    except NnetError as e:
        raise NnetError(f"{where}: cannot read wav {str(e).removeprefix(f'{where}: ')}") from None


def read_wav_scp(specifier):
    """[(utt, rxfilename)] from a wav.scp of 'utt file.wav' or 'utt command |' lines, given as the
    file, 'scp:FILE', or stdin ('-', 'scp:-').

    Kaldi's compute-mfcc-feats does not check keys, but a key written twice breaks every later
    random access to the features (Kaldi: 'Script file ... contains duplicate key'), and
    utils/validate_data_dir.sh refuses such a wav.scp: so do we, before writing anything.
    """
    path = table_file(specifier, "wav.scp", kind="scp")
    out, seen = [], set()
    for n, fields, line in records(path):
        if len(fields) < 2:
            raise NnetError(f"{printable(path)}:{n}: expected 'utt file.wav' or 'utt command |', "
                            f"got '{line.strip()}'")
        if fields[0] in seen:
            raise NnetError(f"{printable(path)}:{n}: utterance '{fields[0]}' appears twice")
        seen.add(fields[0])
        out.append((fields[0], line.strip()[len(fields[0]):].strip()))
    return out


def compute(opts, samples, rate, where):
    """Feature matrix (frames x dim) of one waveform, as compute-{mfcc,fbank}-feats gives."""
    import kaldi_native_fbank as knf
    if abs(rate - opts.frame_opts.samp_freq) > 0.5:
        wanted = opts.frame_opts.samp_freq
        raise SampleRateMismatch(f"{where}: sample rate {rate:g} Hz does not match --sample-frequency={wanted:g} "
                                 f"(the features' conf file): resample the audio to {wanted:g} Hz (in wav.scp: "
                                 f"'utt sox FILE -r {wanted:g} -t wav - |') or set --sample-frequency={rate:g}")
    computer = knf.OnlineMfcc(opts) if isinstance(opts, knf.MfccOptions) else knf.OnlineFbank(opts)
    computer.accept_waveform(float(rate), samples)
    computer.input_finished()
    n = computer.num_frames_ready
    if n == 0:
        raise NnetError(f"{where}: too short for one frame ({len(samples)} samples)")
    return np.stack([computer.get_frame(i) for i in range(n)]).astype(np.float32)


class SampleRateMismatch(NnetError):
    """A wav at another rate than --sample-frequency: the conf file, or the whole data dir, is
    wrong, not this one file; so the program stops on it rather than skip it."""


def compute_table(opts, wave, wav_scp, writer, log, segments=None):
    """Features of every utterance of wav_scp into ``writer``, with WaveOptions ``wave``; a bad
    wav is counted, not fatal, but a wav at another sample rate stops it. With ``segments``
    (datadir.read_segments' list) wav_scp holds recordings, and each segment is cut from its
    recording as Kaldi's extract-segments cuts it. Returns (done, failed), as Kaldi's
    compute-mfcc-feats reports them.
    """
    done = failed = 0
    for utt, feats in (_segment_features(opts, wave, wav_scp, segments, log) if segments is not None
                       else _utterance_features(opts, wave, wav_scp, log)):
        if feats is None:
            failed += 1
            continue
        writer.write(utt, feats)
        done += 1
    return done, failed


def _utterance_features(opts, wave, wav_scp, log):
    for utt, rxfilename in read_wav_scp(wav_scp):
        where = f"{wav_scp}: utt '{utt}'"
        yield utt, _or_skip(log, utterance_features, opts, wave, rxfilename, where)


def _or_skip(log, fn, *args):
    try:
        return fn(*args)
    except SampleRateMismatch:
        raise
    except NnetError as e:
        log.warning(f"{e}; skipping it")
        return None


def _segment_features(opts, wave, wav_scp, segments, log, max_overshoot=0.5, min_length=0.1):
    """(utt, features or None) per segment, as extract-segments | compute-*-feats: [start, end)
    seconds of the recording's channel; an end up to max_overshoot past the recording's is cut
    to it; further past, or a segment shorter than min_length, is skipped with a warning."""
    recordings, last = dict(read_wav_scp(wav_scp)), (None, None)
    for utt, reco, start, end, channel in segments:
        where = f"{wav_scp}: segment '{utt}' of recording '{reco}'"
        if reco not in recordings:
            log.warning(f"{where}: no such recording in {wav_scp}; skipping it")
            yield utt, None
            continue
        if last[0] != reco:  # segments come sorted, so each recording is read once
            last = reco, _or_skip(log, read_channels, recordings[reco], f"{wav_scp}: recording '{reco}'")
        if last[1] is None:
            yield utt, None
            continue
        rate, data = last[1]
        if channel == -1 and len(data) > 1:
            raise NnetError(f"{where}: the recording has {len(data)} channels: give the channel in the segments file")
        begin, stop, total = int(start * rate), (len(data[0]) if end == -1 else int(end * rate)), len(data[0])
        problem = (f"starts at sample {begin}, past the recording's {total}" if begin >= total else
                   f"ends at sample {stop}, more than {max_overshoot:g} s past the recording's {total}"
                   if stop >= total + int(max_overshoot * rate) else
                   f"shorter than {min_length:g} s" if min(stop, total) <= begin + int(min_length * rate) else
                   f"channel {channel}, but the recording has {len(data)}" if channel >= len(data) else None)
        if problem:
            log.warning(f"{where}: {problem}; skipping it")
            yield utt, None
            continue
        samples = data[max(channel, 0)][begin:min(stop, total)]
        yield utt, _or_skip(log, _features_of, opts, wave, rate, samples, where)


def utterance_features(opts, wave, rxfilename, where):
    """One utterance's features, as compute_table makes them; None for no output (no such
    channel, shorter than --min-duration), with a warning."""
    rate, samples = read_wav(rxfilename, where, wave.channel)
    if samples is None:
        return None
    return _features_of(opts, wave, rate, samples, where)


def _features_of(opts, wave, rate, samples, where):
    if len(samples) < wave.min_duration * rate:
        logger.warning(f"{where}: too short ({len(samples) / rate:g} sec): producing no output")
        return None
    wanted = opts.frame_opts.samp_freq
    if (rate > wanted and wave.allow_downsample) or (rate < wanted and wave.allow_upsample):
        raise NnetError(f"{where}: sample rate {rate:g} Hz, not {wanted:g}: resampling is not supported; "
                        f"resample in wav.scp instead ('utt sox FILE -r {wanted:g} -t wav - |')")
    feats = compute(opts, samples, rate, where)
    if wave.subtract_mean:
        feats -= feats.mean(axis=0, dtype=np.float32)
    return feats
