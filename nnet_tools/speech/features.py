"""MFCC and fbank features with kaldi-native-fbank (Kaldi's arithmetic), and add-deltas.

Options come as Kaldi's do, ``--num-mel-bins=40`` lines in a conf file (compute-mfcc-feats
--config=conf/mfcc.conf), so a Kaldi recipe's conf/ carries over.
"""
import wave

import numpy as np

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
          "num-mel-bins": ("mel_opts.num_bins", int),
          "low-freq": ("mel_opts.low_freq", float),
          "high-freq": ("mel_opts.high_freq", float),
          "use-energy": ("use_energy", "bool"),
          "energy-floor": ("energy_floor", float),
          "raw-energy": ("raw_energy", "bool"),
          "htk-compat": ("htk_compat", "bool")}
_MFCC_ONLY = {"num-ceps": ("num_ceps", int), "cepstral-lifter": ("cepstral_lifter", float)}
_FBANK_ONLY = {"use-log-fbank": ("use_log_fbank", "bool"), "use-power": ("use_power", "bool")}


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
    """knf options for ``feat_type`` (mfcc|fbank), from Kaldi's defaults, a conf file, then overrides.

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
    for where, line in lines:
        if not line:
            continue
        name, eq, value = line.lstrip("-").partition("=")
        if not line.startswith("--") or not eq:
            raise NnetError(f"{where}: expected --option=value, got '{line}'")
        if name not in known:
            raise NnetError(f"{where}: unknown {feat_type} option --{name}")
        path, kind = known[name]
        target = opts
        *parents, leaf = path.split(".")
        for p in parents:
            target = getattr(target, p)
        setattr(target, leaf, _parse_value(name, value, kind, where))
    _check_options(opts, feat_type)
    return opts


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


# Data sizes a writer streaming to a pipe leaves in the header, as frame counts of 16-bit mono:
# Kaldi's WaveInfo then reads to the end of the file ("stream mode") and expects no size.
_STREAMED_FRAMES = (0xFFFFFFFF // 2, 0x7FFFF000 // 2)


def read_wav(path, where):
    """int16 mono samples of a wav file, as float32 in int16 scale (what Kaldi's readers give).

    A file shorter than its header says is read as far as it goes, with Kaldi's warning.
    """
    try:
        with wave.open(path, "rb") as w:
            if w.getsampwidth() != 2:
                raise NnetError(f"{where}: {path}: only 16-bit PCM wav is supported")
            if w.getnchannels() != 1:
                raise NnetError(f"{where}: {path}: expected mono audio, got {w.getnchannels()} channels")
            rate, frames = w.getframerate(), w.getnframes()
            data = w.readframes(frames)
    except FileNotFoundError:
        raise NnetError(f"{where}: wav file {path} does not exist") from None
    except (OSError, wave.Error, EOFError) as e:
        raise NnetError(f"{where}: cannot read wav {path}: {e or 'empty or truncated file'}") from None
    if not data:  # Kaldi fails here rather than warn that the file was truncated
        raise NnetError(f"{where}: cannot read wav {path}: empty file (no data)")
    if len(data) < 2 * frames and frames not in _STREAMED_FRAMES:
        logger.warning(f"{where}: {path}: Expected {2 * frames} bytes of wave data, but read only "
                       f"{len(data)} bytes. Truncated file?")
    # A last odd byte is no whole sample: Kaldi drops it too.
    samples = np.frombuffer(data, dtype="<i2", count=len(data) // 2)
    return rate, samples.astype(np.float32)


def read_wav_scp(specifier):
    """[(utt, wav path)] from a wav.scp of 'utt path' lines (extended filenames are not supported),
    given as the file, 'scp:FILE', or stdin ('-', 'scp:-').

    Kaldi's compute-mfcc-feats does not check keys, but a key written twice breaks every later
    random access to the features (Kaldi: 'Script file ... contains duplicate key'), and
    utils/validate_data_dir.sh refuses such a wav.scp: so do we, before writing anything.
    """
    path = table_file(specifier, "wav.scp", kind="scp")
    out, seen = [], set()
    for n, fields, line in records(path):
        if len(fields) != 2 or fields[-1] == "|":
            raise NnetError(f"{printable(path)}:{n}: expected 'utt file.wav', got '{line.strip()}' "
                            f"(commands in wav.scp are not supported)")
        if fields[0] in seen:
            raise NnetError(f"{printable(path)}:{n}: utterance '{fields[0]}' appears twice")
        seen.add(fields[0])
        out.append((fields[0], fields[1]))
    return out


def compute(opts, samples, rate, where):
    """Feature matrix (frames x dim) of one waveform, as compute-{mfcc,fbank}-feats gives."""
    import kaldi_native_fbank as knf
    if abs(rate - opts.frame_opts.samp_freq) > 0.5:
        raise NnetError(f"{where}: sample rate {rate} Hz does not match --sample-frequency="
                        f"{opts.frame_opts.samp_freq:g}")
    computer = knf.OnlineMfcc(opts) if isinstance(opts, knf.MfccOptions) else knf.OnlineFbank(opts)
    computer.accept_waveform(float(rate), samples)
    computer.input_finished()
    n = computer.num_frames_ready
    if n == 0:
        raise NnetError(f"{where}: too short for one frame ({len(samples)} samples)")
    return np.stack([computer.get_frame(i) for i in range(n)]).astype(np.float32)


def compute_table(opts, wav_scp, writer, log):
    """Features of every utterance of wav_scp into ``writer``; a bad wav is counted, not fatal.

    Returns (done, failed), as Kaldi's compute-mfcc-feats reports them.
    """
    done = failed = 0
    for utt, path in read_wav_scp(wav_scp):
        where = f"{wav_scp}: utt '{utt}'"
        try:
            rate, samples = read_wav(path, where)
            feats = compute(opts, samples, rate, where)
        except NnetError as e:
            log.warning(f"{e}; skipping it")
            failed += 1
            continue
        writer.write(utt, feats)
        done += 1
    return done, failed


def check_delta_options(order, window):
    """Kaldi's DeltaFeatures asserts these bounds; here they are one line."""
    if not 0 <= order < 1000:
        raise NnetError(f"--delta-order must be in [0, 1000), got {order}")
    if not 0 < window < 1000:
        raise NnetError(f"--delta-window must be in (0, 1000), got {window}")


def add_deltas(feats, order=2, window=2):
    """Kaldi's add-deltas: [x, delta, delta-delta] with edge frames replicated."""
    import kaldi_native_fbank as knf
    check_delta_options(order, window)
    opts = knf.DeltaOptions()
    opts.order, opts.window = order, window
    return knf.compute_deltas(opts, np.ascontiguousarray(feats, dtype=np.float32))

