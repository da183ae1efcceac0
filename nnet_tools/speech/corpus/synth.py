"""Utterances synthesised offline with espeak-ng: speakers, plans, waveforms.

A speaker is one (accent, voice variant, speed, pitch) combination; train and test speakers are
disjoint. The plan (who says which words with which pauses) is drawn once from a seed and written
as a Kaldi data dir plus ``synth.plan``, so the slow part, the waveforms, can be made by
JOB=1:nj array jobs each taking every nj-th utterance. make_plan draws connected digits
(recipes/spoken_digits); commands.make_plan draws sentences of a ~1000-word grammar
(recipes/spoken_commands) as utterances of the same kind, which the same synthesise_job makes.
"""
import os
import random
import shutil
import subprocess
import wave

import numpy as np

from nnet_tools.errors import NnetError
from nnet_tools.fileio import atomic_path, write_text

WORDS = ["zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
ACCENTS = ["en-us", "en-gb", "en-gb-scotland", "en-029", "en-gb-x-rp", "en-gb-x-gbclan",
           "en-gb-x-gbcwmd"]
VARIANTS = ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5"]
SPEEDS = [130, 150, 170, 190]
PITCHES = [30, 45, 60, 75]
RATE = 16000


def espeak_binary():
    """Path of espeak-ng, or None when it is not installed."""
    return shutil.which("espeak-ng")


def speakers(seed):
    """Every speaker (accent x variant x speed x pitch), in a seed-shuffled order."""
    all_speakers = [(a, v, s, p) for a in ACCENTS for v in VARIANTS for s in SPEEDS for p in PITCHES]
    random.Random(seed).shuffle(all_speakers)
    return all_speakers


def speaker_id(spk):
    accent, variant, speed, pitch = spk
    return f"{accent.replace('-', '')}{variant}s{speed}p{pitch}"


def make_plan(num_utts, num_speakers, test_fraction, seed):
    """Draw the corpus: {'train': [...], 'test': [...]} of utterance dicts, split by speaker.

    Each utterance: id, speaker (tuple), words (1-7 digits), gaps_ms (pause after each word but
    the last, 0-300 ms), lead_ms/trail_ms of silence, snr_db of the white noise added.
    """
    if num_speakers < 2 or num_utts < num_speakers:
        raise NnetError(f"need at least 2 speakers and one utterance each "
                        f"(got --num-utts {num_utts}, --num-speakers {num_speakers})")
    chosen = speakers(seed)[:num_speakers]
    num_test = max(1, round(num_speakers * test_fraction))
    rng = random.Random(seed + 1)
    plan = {"train": [], "test": []}
    for k, spk in enumerate(chosen):
        part = "test" if k < num_test else "train"
        # Utterances spread evenly; the first num_utts % num_speakers speakers get one more.
        count = num_utts // num_speakers + (1 if k < num_utts % num_speakers else 0)
        sid = speaker_id(spk)
        for i in range(count):
            n = rng.randint(1, 7)
            words = [rng.choice(WORDS) for _ in range(n)]
            plan[part].append({
                "id": f"{sid}-{i:05d}", "speaker": spk, "words": words,
                "gaps_ms": [rng.randint(0, 300) for _ in range(n - 1)],
                "lead_ms": rng.randint(100, 400), "trail_ms": rng.randint(100, 400),
                "snr_db": rng.uniform(25.0, 40.0), "seed": rng.randrange(2**31)})
    return plan


def _plan_line(u):
    accent, variant, speed, pitch = u["speaker"]
    gaps = ",".join(map(str, u["gaps_ms"])) or "-"
    return (f"{u['id']} {accent} {variant} {speed} {pitch} {gaps} {u['lead_ms']} {u['trail_ms']} "
            f"{u['snr_db']:.2f} {u['seed']} {' '.join(u['words'])}\n")


def read_plan(path):
    """Read ``synth.plan`` back into utterance dicts (the inverse of write_data_dir's file)."""
    out = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                fields = line.split()
                if len(fields) < 11:
                    raise NnetError(f"{path}:{n}: expected 'utt accent variant speed pitch gaps "
                                    f"lead trail snr seed word...', got '{line.strip()}'")
                gaps = [] if fields[5] == "-" else [int(g) for g in fields[5].split(",")]
                out.append({"id": fields[0], "speaker": (fields[1], fields[2], int(fields[3]), int(fields[4])),
                            "gaps_ms": gaps, "lead_ms": int(fields[6]), "trail_ms": int(fields[7]),
                            "snr_db": float(fields[8]), "seed": int(fields[9]), "words": fields[10:]})
    except OSError as e:
        raise NnetError(f"{path}: cannot read: {e.strerror}") from None
    except ValueError:
        raise NnetError(f"{path}:{n}: malformed number in '{line.strip()}'") from None
    return out


def write_data_dir(utts, data_dir, wav_dir):
    """Kaldi data dir for ``utts``: wav.scp, text, utt2spk, spk2utt, and synth.plan (sorted)."""
    utts = sorted(utts, key=lambda u: u["id"])
    wav_dir = os.path.abspath(wav_dir)
    spk2utt = {}
    for u in utts:
        spk2utt.setdefault(speaker_id(u["speaker"]), []).append(u["id"])
    write_text(os.path.join(data_dir, "wav.scp"),
               "".join(f"{u['id']} {wav_dir}/{u['id']}.wav\n" for u in utts))
    write_text(os.path.join(data_dir, "text"), "".join(f"{u['id']} {' '.join(u['words'])}\n" for u in utts))
    write_text(os.path.join(data_dir, "utt2spk"),
               "".join(f"{u['id']} {speaker_id(u['speaker'])}\n" for u in utts))
    write_text(os.path.join(data_dir, "spk2utt"),
               "".join(f"{s} {' '.join(us)}\n" for s, us in sorted(spk2utt.items())))
    write_text(os.path.join(data_dir, "synth.plan"), "".join(_plan_line(u) for u in utts))


def _ssml(u):
    parts = []
    for i, w in enumerate(u["words"]):
        parts.append(w)
        if i < len(u["gaps_ms"]) and u["gaps_ms"][i] > 0:
            parts.append(f'<break time="{u["gaps_ms"][i]}ms"/>')
    return "<speak>" + " ".join(parts) + "</speak>"


def _espeak(u, binary):
    accent, variant, speed, pitch = u["speaker"]
    cmd = [binary, "-m", "-v", f"{accent}+{variant}", "-s", str(speed), "-p", str(pitch), "--stdout", _ssml(u)]
    run = subprocess.run(cmd, capture_output=True)
    data = run.stdout
    pos = data.find(b"data")
    if run.returncode != 0 or data[:4] != b"RIFF" or pos < 0:
        msg = run.stderr.decode(errors="replace").strip().splitlines()
        raise NnetError(f"utt '{u['id']}': espeak-ng failed (exit {run.returncode})"
                        + (f": {msg[-1]}" if msg else ""))
    # espeak streams to stdout, so the data chunk's size field is a placeholder: take the rest.
    samples = data[pos + 8:]
    return np.frombuffer(samples[: len(samples) // 2 * 2], dtype="<i2").astype(np.float64)


def synthesise(u, binary):
    """16 kHz int16 waveform of one planned utterance, with its silences and light noise."""
    from scipy.signal import resample_poly
    x = resample_poly(_espeak(u, binary), 320, 441)  # 22050 -> 16000 Hz
    x = np.concatenate([np.zeros(u["lead_ms"] * RATE // 1000), x, np.zeros(u["trail_ms"] * RATE // 1000)])
    speech = x[np.abs(x) > 0]
    rms = np.sqrt(np.mean(speech ** 2)) if speech.size else 1000.0
    rng = np.random.default_rng(u["seed"])
    x = x + rng.normal(0.0, rms / 10 ** (u["snr_db"] / 20), size=x.shape)
    return np.clip(np.round(x), -32768, 32767).astype(np.int16)


def write_wav(path, samples):
    with atomic_path(path) as tmp:
        with wave.open(tmp, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(samples.tobytes())


def synthesise_job(plan_path, wav_dir, job, num_jobs):
    """Make the wavs of every num_jobs-th planned utterance, starting at job (1-based).

    Returns (done, skipped): wavs already present are kept, so a re-run finishes a broken job.
    """
    binary = espeak_binary()
    if binary is None:
        raise NnetError("espeak-ng not found on PATH (Debian/Ubuntu: apt-get install espeak-ng)")
    if not 1 <= job <= num_jobs:
        raise NnetError(f"--job {job} is not in 1..{num_jobs}")
    done = skipped = 0
    for u in read_plan(plan_path)[job - 1::num_jobs]:
        path = os.path.join(wav_dir, u["id"] + ".wav")
        if os.path.exists(path):
            skipped += 1
            continue
        write_wav(path, synthesise(u, binary))
        done += 1
    return done, skipped
