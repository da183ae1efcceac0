#!/usr/bin/env python3
"""Decoding time of our decoder over vosk's (Kaldi's C++ online2 nnet3 decoder) on the same
exported model, graph and test wavs, features included for both, as a ratio in one run.

Ours is the pipeline steps/decode.sh runs, in one job: nnet-compute-feats | the DNN's CMVN
(global, as the recipe trains it, or online) | nnet-compute | nnet-decode-faster-mapped. vosk's is
nnet-decode-vosk over the exported dir (it computes the fbank and the CMVN itself). Both are timed as whole processes (start-up
included), alternately, ``--repeats`` times each; the medians give the ratio. Their outputs are
compared word for word. Run after the spoken-digits recipe:

    cd recipes/spoken_digits && ./run.sh && cd ../.. && python3 benchmarks/decode_speed.py
    [--recipe recipes/spoken_digits] [--repeats 3] [--threads 1]
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import time


def timed(command, env):
    start = time.perf_counter()
    subprocess.run(["bash", "-o", "pipefail", "-c", command], check=True, env=env, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def words(path):
    with open(path) as f:
        return dict(line.split(maxsplit=1) if " " in line.strip() else (line.strip(), "") for line in f)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", default="recipes/spoken_digits")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="threads for both (OMP/MKL), one job each")
    a = p.parse_args()
    r = os.path.abspath(a.recipe)
    need = ["exp/nnet/final.mdl", "exp/nnet/vosk_model/am/final.mdl",
            "exp/mono/graph/HCLG.fst", "exp/mono_ali/final.mdl", "data/test/wav.scp"]
    missing = [n for n in need if not os.path.exists(os.path.join(r, n))]
    if missing:
        raise SystemExit(f"{r}: no {missing[0]}: run the recipe first (./run.sh)")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    out = tempfile.mkdtemp(prefix="decode_speed.")
    wav = f"{r}/data/test/wav.scp"
    stats = f"{r}/exp/nnet/global_cmvn.stats"
    cmvn = ("nnet-apply-cmvn-online" if os.path.exists(f"{r}/exp/nnet/online_cmvn") else "nnet-apply-cmvn"
            if os.path.exists(stats) else None)
    ours = (f"nnet-compute-feats --type fbank --config {r}/conf/fbank.conf {wav} ark:- | "
            + (f"{cmvn} {stats} ark:- ark:- | " if cmvn else "") +
            f"nnet-compute {r}/exp/nnet/final.mdl ark:- ark:- | "
            f"nnet-decode-faster-mapped --acoustic-scale 0.1 --beam 13 --max-active 7000 "
            f"{r}/exp/mono_ali/final.mdl {r}/exp/mono/graph/HCLG.fst ark:- ark,t:{out}/ours.txt")
    vosk = f"nnet-decode-vosk {r}/exp/nnet/vosk_model scp:{wav} ark,t:{out}/vosk.txt"
    times = {"ours": [], "vosk": []}
    for _ in range(a.repeats):
        times["ours"].append(timed(ours, env))
        times["vosk"].append(timed(vosk, env))
    with open(wav) as f:
        n = sum(1 for _ in f)
    a_ours, a_vosk = words(f"{out}/ours.txt"), words(f"{out}/vosk.txt")
    differ = sum(a_ours.get(k) != v for k, v in a_vosk.items())
    m_ours, m_vosk = statistics.median(times["ours"]), statistics.median(times["vosk"])
    print(f"test utterances: {n}; threads: {a.threads}; repeats: {a.repeats} (medians)")
    print(f"CMVN: {cmvn or 'none'}")
    print(f"ours (features + CMVN + nnet-compute + decode-faster-mapped): {m_ours:.2f} s  "
          f"{' '.join(f'{t:.2f}' for t in times['ours'])}")
    print(f"vosk (its features + CMVN + nnet3 + online2 decoder):         {m_vosk:.2f} s  "
          f"{' '.join(f'{t:.2f}' for t in times['vosk'])}")
    print(f"ratio ours / vosk: {m_ours / m_vosk:.2f}")
    print(f"utterances whose words differ: {differ} of {len(a_vosk)}")


if __name__ == "__main__":
    main()
