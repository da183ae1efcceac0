"""What the tests share: paths, running a program, waiting, data writers and fakes.

Every test module imports these from here (conftest.py keeps only fixtures and hooks); no test
module imports another."""
import functools
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
DIGITS_LEXICON = REPO / "recipes" / "spoken_digits" / "local" / "dict" / "lexicon.txt"
DIGITS_RECIPE = REPO / "recipes" / "digits"

SMALL_CONFIG = """input-dim: 6
splice: -1:1
layers:
  - {name: hidden, type: relu-batchnorm, dim: 16}
  - {name: output, type: output, dim: 4}
"""


# --- programs and processes -----------------------------------------------------------------

def run(*argv, cwd=None, check=False):
    """Run a program; returns the CompletedProcess with text output."""
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd)
    if check and r.returncode:
        raise AssertionError(f"{argv} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return r


def error_line(result):
    """The one ERROR line of a rejected call (stderr's first line echoes the command line)."""
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def gone(pid):
    """Whether process ``pid`` has ended (a zombie not yet reaped counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_for(condition, timeout=20, what="condition", interval=0.05):
    """Poll ``condition`` until it gives a true value, and return that value; fail, naming ``what``,
    when ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


# --- egs dirs -------------------------------------------------------------------------------

def write_egs_dir(path, num_archives=4, egs_per_archive=600, dim=6, classes=4, fpe=2, left=1, right=1, seed=0):
    """A small, learnable egs dir (class-dependent means) laid out as nnet-get-egs does."""
    from nnet_tools.data import egs
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(classes, dim)) * 2

    def make(n):
        labels = rng.integers(0, classes, (n, fpe)).astype(np.int32)
        inputs = rng.normal(size=(n, left + fpe + right, dim)).astype(np.float32)
        inputs[:, left:left + fpe] += centers[labels]
        return inputs, labels, [f"utt{i}-0" for i in range(n)]
    for k in range(1, num_archives + 1):
        egs.write_archive(path / f"egs.{k}.ark", *make(egs_per_archive), left, right)
    for name in ("valid_diagnostic", "train_diagnostic", "combine"):
        egs.write_archive(path / f"{name}.egs", *make(200), left, right)
    (path / "info").mkdir(parents=True, exist_ok=True)
    for key, value in dict(num_archives=num_archives, frames_per_eg=fpe, feat_dim=dim, left_context=left,
                           right_context=right, output_dim=classes).items():
        (path / "info" / key).write_text(f"{value}\n")
    return path


def nan_archive(egs_dir, out, index=100):
    """egs_dir/egs.1.ark (from write_egs_dir) written to ``out`` with one NaN in eg ``index``."""
    from nnet_tools.data import egs
    a = egs.EgsArchive(egs_dir / "egs.1.ark")
    inputs = np.array(a.inputs)
    inputs[index, 1, 2] = np.nan
    egs.write_archive(out, inputs, np.array(a.labels), a.keys(), 1, 1)
    return out


def archives(egs_dir):
    """The training archives of an egs dir, egs.1.ark first."""
    from nnet_tools.data.egs import EgsArchive
    n = int((egs_dir / "info" / "num_archives").read_text())
    return [EgsArchive(egs_dir / f"egs.{k}.ark") for k in range(1, n + 1)]


# --- features and targets for nnet-get-egs --------------------------------------------------

SMALL = dict(frames_per_eg=4, left_context=2, right_context=3, samples_per_iter=30, num_utts_subset=3,
             num_frames_diagnostic=20, num_train_frames_combine=40)


def write_data(d, lengths, dim=3, num_classes=5, seed=0, targets_len=None, skip_targets=(), dims=None):
    """Random features and targets for utterances utt000.. of the given lengths, into directory d.

    targets_len maps an utterance index to a different target count; skip_targets lists utterances
    without targets; dims maps an utterance index to a different feature dim."""
    from nnet_tools.data.tables import IntVectorWriter, MatrixWriter
    rng = np.random.default_rng(seed)
    feats, targets = {}, {}
    os.makedirs(d, exist_ok=True)
    with MatrixWriter(f"ark,scp:{d}/feats.ark,{d}/feats.scp") as fw, IntVectorWriter(f"ark:{d}/targets.ark") as tw:
        for i, n in enumerate(lengths):
            key = f"utt{i:03d}"
            feats[key] = rng.standard_normal((n, (dims or {}).get(i, dim))).astype(np.float32)
            fw.write(key, feats[key])
            if i not in skip_targets:
                targets[key] = rng.integers(0, num_classes, (targets_len or {}).get(i, n)).astype(np.int32)
                tw.write(key, targets[key])
    return feats, targets, f"scp:{d}/feats.scp", f"ark:{d}/targets.ark"


def lengths(n, seed=1, low=1, high=30):
    return np.random.default_rng(seed).integers(low, high, n).tolist()


def run_lib(tmp_path, n_utts=30, name="egs", data=None, **opts):
    """get_egs (in this process) on write_data's utterances, with SMALL's options and ``opts``:
    (write_data's answer, the egs dir, the info values)."""
    from nnet_tools.data import get_egs as ge
    data = data or write_data(tmp_path / "data", lengths(n_utts))
    egs_dir = tmp_path / name
    info = ge.get_egs(data[2], data[3], str(egs_dir), ge.EgsOptions(**{**SMALL, **opts}))
    return data, egs_dir, info


def write_cmvn(d, feats, num_speakers=3):
    """utt2spk (utterance i -> speaker i % num_speakers) and per-speaker cmvn.scp, as Kaldi's
    compute-cmvn-stats --spk2utt writes it."""
    from nnet_tools.data import cmvn
    from nnet_tools.data.tables import DoubleMatrixWriter
    utt2spk = {u: f"spk{i % num_speakers}" for i, u in enumerate(sorted(feats))}
    (d / "utt2spk").write_text("".join(f"{u} {s}\n" for u, s in utt2spk.items()))
    with DoubleMatrixWriter(f"ark,scp:{d}/cmvn.ark,{d}/cmvn.scp") as w:
        for spk in sorted(set(utt2spk.values())):
            w.write(spk, cmvn.accumulate(cmvn.compute_cmvn_stats(feats[u]) for u in feats if utt2spk[u] == spk))
    return utt2spk


def write_data_dir(d, lens):
    """write_data plus DATA/targets.scp, the data dir steps/get_egs.sh reads."""
    from nnet_tools.data.tables import IntVectorWriter
    feats, targets, fs, ts = write_data(d, lens)
    with IntVectorWriter(f"ark,scp:{d}/targets.ark,{d}/targets.scp") as w:
        for u in sorted(targets):
            w.write(u, targets[u])
    return feats, targets


def split_scp(scp, n, out_dir):
    """feats.scp cut into n interleaved parts (any split will do; get_egs.sh cuts contiguous blocks)."""
    lines = open(scp).read().splitlines(keepends=True)
    paths = []
    for j in range(n):
        paths.append(os.path.join(out_dir, f"feats.{j + 1}.scp"))
        with open(paths[-1], "w") as f:
            f.writelines(lines[j::n])
    return paths


# --- speech ---------------------------------------------------------------------------------

def mono_model(lang_dir, lexicon=DIGITS_LEXICON):
    """A lang dir made from ``lexicon`` and a one-Gaussian-per-pdf model of 6-dim features on it."""
    from nnet_tools.speech.lang import langdir
    from nnet_tools.speech.models import gmm
    langdir.prepare(str(lexicon), str(lang_dir))
    _, topo = langdir.read_topology(str(lang_dir))
    return gmm.init_mono(topo, [np.random.default_rng(0).normal(size=(50, 6)).astype(np.float32)])


# --- the driver, without training -----------------------------------------------------------

class RecordingLauncher:
    """Plays $cmd: writes train logs with given objectives and a (real, tiny) model file for every
    output. ``fails(it, job, attempt)`` makes a training job fail (no model; returns the log text);
    ``valid(it)`` gives the valid log-likelihood the background diagnostics log."""

    def __init__(self, log_dir, objectives, fails=None, valid=None):
        import torch
        from nnet_tools.model import config, model_io
        from nnet_tools.model.nnet import Nnet
        self.log_dir, self.objectives, self.commands, self.launcher_opts = log_dir, objectives, [], {}
        self.fails, self.valid, self.attempts = fails or (lambda it, j, attempt: None), valid, {}
        torch.manual_seed(0)
        self.model = os.path.join(log_dir, "..", "tiny.mdl.src")
        model_io.save(Nnet(config.normalize(config.yaml_load(SMALL_CONFIG))), self.model)

    def run(self, log, command, jobs=None, launcher_opts=()):
        from nnet_tools.driver.launcher import LaunchFailed
        self.commands.append((log, [str(c) for c in command]))
        self.launcher_opts[log] = list(launcher_opts)
        failed = False
        for j in range(1, (jobs or 1) + 1):
            argv = [str(c).replace("JOB", str(j)) for c in command]
            if argv[0] == "nnet-train-one-job":
                it, job = int(log.split(".")[1]), int(argv[-1].split(".")[-2])
                attempt = self.attempts[it, job] = self.attempts.get((it, job), -1) + 1
                failure = self.fails(it, job, attempt)
                with open(os.path.join(self.log_dir, f"train.{it}.{job}.log"), "w") as f:
                    f.write(failure if failure is not None else f"LOG (nnet-train-one-job[x]:f():job.py:1) Overall "
                            f"average objective function for 'output' is {self.objectives(it, job)} over 100 frames.\n")
                if failure is not None:
                    failed = True
                    continue
            for out in [argv[-1]] + [a.split("=", 1)[1] for a in argv if a.startswith("--state-out=")]:
                shutil.copyfile(self.model, out)
        if failed:
            raise LaunchFailed(os.path.join(self.log_dir, log))

    is_nnet_queue = True   # it plays nnet-queue: the driver passes it --stall-limit and --max-wait

    def start(self, log, command, launcher_opts=()):
        # Diagnostics never compete with the jobs' threads, nor are they stopped by the jobs' stall limit.
        assert list(launcher_opts[:4]) == ["--num-threads", "1", "--stall-limit", "0"], launcher_opts
        self.launcher_opts[log] = list(launcher_opts)
        self.commands.append((log, [str(c) for c in command]))
        m = re.fullmatch(r"compute_prob_valid\.(\d+)\.log", log)
        with open(os.path.join(self.log_dir, log), "w") as f:   # finished, as nnet-queue's footer says
            if m and self.valid:
                f.write(f"LOG (nnet-compute-prob[x]:f():d.py:1) Overall log-likelihood for 'output' is "
                        f"{self.valid(int(m.group(1)))} per frame, over 300 frames.\n")
            f.write("# Ended (code 0) at now, elapsed time 0 seconds\n")

    num_started = 0   # background commands run at once here

    def wait(self, upto=None):
        pass

    def command(self, log):
        return next(c for name, c in self.commands if name == log)


def drive(tmp_path, egs_dir, objectives, fails=None, valid=None, stage=None, launcher_cls=None, **changes):
    """The outer loop run on ``egs_dir`` (conftest's egs_info) with a RecordingLauncher (or
    ``launcher_cls``): (the loop, the launcher)."""
    from nnet_tools.driver import options, outer_loop
    settings = dict(num_epochs=3, jobs_initial=2, jobs_final=4, max_models_combine=3, preserve_interval=4)
    opts = options.TrainerOptions(**{**settings, **changes})
    os.makedirs(tmp_path / "exp" / "log", exist_ok=True)
    launcher = (launcher_cls or RecordingLauncher)(str(tmp_path / "exp" / "log"), objectives, fails, valid)
    (tmp_path / "model.yaml").write_text(SMALL_CONFIG)
    loop = outer_loop.OuterLoop(opts, str(egs_dir), str(tmp_path / "exp"), launcher)
    loop.run(stage=stage, config=str(tmp_path / "model.yaml"))
    return loop, launcher


# --- recipes --------------------------------------------------------------------------------

def copy_recipe(dest):
    """A working copy of recipes/digits: its files linked, steps/ pointing at the repo's."""
    dest.mkdir()
    for name in ("run.sh", "cmd.sh", "path.sh", "local", "conf"):
        (dest / name).symlink_to(DIGITS_RECIPE / name)
    (dest / "steps").symlink_to(REPO / "steps")
    return dest


# --- Slurm and Grid Engine ------------------------------------------------------------------

@functools.cache
def unreachable(engine):
    """Why ``engine`` ("slurm" or "sge") cannot be used here, or None."""
    from nnet_tools.queue import BACKENDS
    why = BACKENDS[engine].unreachable()
    return why and f"{why}; start it with: sudo tests/cluster/start-{engine}.sh"


def require(engine):
    """Skip the test when ``engine`` is unreachable; under CI (CI=true), which starts both, fail it."""
    why = unreachable(engine)
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)


def engines_state():
    """What the engines say now (queues, nodes, the Slurm daemons' last lines): attached to a
    failed cluster test's report, since a task that never ran shows nothing in its own log."""
    probes = [["squeue", "-a", "-o", "%i %T %r %j %M"], ["sinfo", "-N", "-o", "%N %T %E %C %e"],
              ["tail", "-n", "20", "/var/log/slurm/slurmctld.log"], ["tail", "-n", "20", "/var/log/slurm/slurmd.log"],
              ["qstat", "-f"], ["qstat", "-u", "*"]]
    out = []
    for argv in probes:
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            out.append(f"$ {' '.join(argv)}\n{r.stdout}{r.stderr}")
        except (OSError, subprocess.TimeoutExpired) as e:
            out.append(f"$ {' '.join(argv)}\n{e}")
    return "\n".join(out)


def queued_jobs(engine, name):
    """Ids of the jobs named ``name`` that still have tasks queued or running."""
    if engine == "slurm":
        out = subprocess.run(["squeue", "--noheader", f"--name={name}", "--format=%F"],
                             capture_output=True, text=True, check=True).stdout
        return set(out.split())
    r = subprocess.run(["qstat", "-j", name], capture_output=True, text=True)
    return set(re.findall(r"^job_number:\s+(\d+)", r.stdout, re.MULTILINE)) if r.returncode == 0 else set()


# --- a data dir of one's own (recipes/spoken_digits from stage 1) --------------------------------

def espeak_samples(text, voice="en-us", speed=160, rate=16000):
    """int16 samples of ``text`` spoken by espeak-ng at ``rate`` Hz (espeak's own is 22050)."""
    from math import gcd
    from scipy.signal import resample_poly
    out = subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "--stdout", text],
                         capture_output=True, check=True).stdout
    x = np.frombuffer(out[out.find(b"data") + 8:][: (len(out) - out.find(b"data") - 8) // 2 * 2], "<i2")
    g = gcd(rate, 22050)
    x = resample_poly(x.astype(np.float64), rate // g, 22050 // g)
    x = x + np.random.default_rng(len(text)).normal(0, 30, len(x))   # a noise floor: no all-zero frames
    return np.clip(np.round(x), -32768, 32767).astype(np.int16)


def write_own_data_dir(d, speakers, rate=16000, segments=False, gap=0.3):
    """A Kaldi data dir as another synthesiser's recipe makes it: {speaker: (voice, [transcripts])}
    -> d/{wav.scp,text,utt2spk,spk2utt} (and d/wav/*.wav). Utterance-ids are speaker-prefixed. With
    ``segments``, each speaker's utterances are one recording, ``gap`` seconds apart, and d/segments
    cuts them out; wav.scp then lists the recordings."""
    import wave
    d = Path(d)
    (d / "wav").mkdir(parents=True, exist_ok=True)
    text, utt2spk, wav_scp, segs = [], [], [], []
    for spk in sorted(speakers):
        voice, transcripts = speakers[spk]
        pieces, t = [], 0.0
        for i, words in enumerate(transcripts):
            utt = f"{spk}-{i:03d}"
            samples = espeak_samples(words.lower(), voice, rate=rate)
            text.append(f"{utt} {words}\n")
            utt2spk.append(f"{utt} {spk}\n")
            if segments:
                segs.append(f"{utt} {spk}-rec {t:.3f} {t + len(samples) / rate:.3f}\n")
                pieces += [samples, np.zeros(int(gap * rate), np.int16)]
                t += len(samples) / rate + int(gap * rate) / rate
            else:
                pieces.append((utt, samples))
        recordings = [(f"{spk}-rec", np.concatenate(pieces))] if segments else pieces
        for name, samples in recordings:
            with wave.open(str(d / "wav" / f"{name}.wav"), "wb") as w:
                w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
                w.writeframes(samples.tobytes())
            wav_scp.append(f"{name} {d / 'wav' / name}.wav\n")
    for name, lines in (("text", text), ("utt2spk", utt2spk), ("wav.scp", wav_scp), ("segments", segs)):
        if lines:
            (d / name).write_text("".join(sorted(lines)))
    spk2utt = {}
    for line in sorted(utt2spk):
        utt, spk = line.split()
        spk2utt.setdefault(spk, []).append(utt)
    (d / "spk2utt").write_text("".join(f"{s} {' '.join(u)}\n" for s, u in spk2utt.items()))
    return d
