"""benchmarks/seeds.py: the seeds table from the benchmarks' JSON pieces, stored in a results file
and printed back by --from-results."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEEDS = REPO / "benchmarks" / "seeds.py"


def arms(final_one, bmuf_worst):
    def arm(finals, worst, wer=(0.5, 0.5, 0.6, 0.9)):
        return {"ratios": {"acc 0.9000": {"1": 1.0, "2": 1.1, "4": worst, "8": None}},
                "worst": {"1": 1.0, "2": 1.1, "4": worst, "8": None},
                "final": dict(zip(("1", "2", "4", "8"), finals)), "wall": {"1": 10, "2": 6, "4": 4, "8": 3},
                "wer": dict(zip(("1", "2", "4", "8"), wer))}
    return {"plain": arm([0.88, 0.87, 0.86, 0.85], None), "ng": arm([final_one, 0.89, 0.885, 0.88], None),
            "bmuf": arm([final_one, 0.90, 0.895, 0.89], bmuf_worst), "nesterov": arm([0.89, 0.89, 0.88, 0.87], 1.8)}


def partition_piece(model, to_target):
    row = lambda name, sub, t, final: {"name": name, "sub_seconds": sub, "to_target": t, "to_tolerance": t,
                                       "total": 100.0, "final": final}
    return {"model": model, "parameters": 1234, "target": 89.5, "tolerance": 0.1, "date": "2026-12-06",
            "rows": [row("baseline (1 job)", 0, 100.0, 89.5), row("baseline (2 jobs)", 0, None, 89.0),
                     row("k=2 parallel", 20, to_target, 89.8), row("k=2 par., noise 0", 20, None, 89.3),
                     row("k=2 sequential", 35, 80.0, 89.8)]}


def write_pieces(work):
    work.mkdir()
    speech = {"data": "speech frames", "source": "transcribed", "date": "2026-12-06", "final_what": "valid acc",
              "ng_vs_plain": {"target": 0.95, "plain_samples": 2000, "ng_samples": 1000, "plain_final": 0.95,
                              "ng_final": 0.96}, "arms": arms(0.9, 1.3)}
    fashion = dict(speech, data="images", source=None, ng_vs_plain=None, arms=arms(0.9, None))
    pieces = {"speech": speech, "fashion": fashion, "mlp3": partition_piece("mlp3", 50.0),
              "mlp4": partition_piece("mlp4", 25.0)}
    for name, piece in pieces.items():
        (work / f"{name}.json").write_text(json.dumps(piece))


def seeds(*args):
    return subprocess.run([sys.executable, SEEDS, *map(str, args)], capture_output=True, text=True)


def test_table_from_pieces_stored_and_printed_back(tmp_path):
    write_pieces(tmp_path / "work")
    results = tmp_path / "results.md"
    results.write_text("# Results\n\n## Other\n\ntext\n")
    r = seeds("--work", tmp_path / "work", "--results", results)
    assert r.returncode == 0, r.stderr
    table = r.stdout.strip()
    # the best NG arm at N=4 is bmuf (worst 1.3; ng never, nesterov 1.8); at N=8 all never: highest final
    assert "averaging payoff, N = 4 | " in table and "best NG arm NG + bmuf" in table
    assert "final 0.8950 vs 1 job 0.9000; WER 0.60 vs 0.50" in table
    assert "2.0x fewer samples with NG; NG ends +1.00 points" in table
    # partition: speed-up = baseline's time / the row's; never reached stays never
    assert "2.00x to the baseline's 89.50 % (2.00x to -0.1), final +0.30 points" in table   # mlp3 parallel
    assert "4.00x to the baseline's" in table and "1.25x to the baseline's" in table          # mlp4, sequential
    assert "noise 0: never to the baseline's 89.50 % (never to -0.1), final -0.20 points" in table
    assert "N=4, points of valid acc against the arm's 1 job: plain SGD -2.00, NG -1.50, NG + bmuf -0.50" in table
    lines = table.splitlines()
    assert "P4 speech N=4 bmuf: worst samples ratio 1.30" in lines
    assert "P4 speech N=8 plain: worst samples ratio never" in lines
    assert sum(line.startswith("P4 speech N=") for line in lines) == 12
    doc = results.read_text()
    assert doc.startswith("# Results\n\n## Other\n\ntext\n\n## Every seed claim (issue 32)")
    # a second run replaces the block in place; --from-results prints exactly what was stored
    (tmp_path / "work" / "mlp4.json").write_text(json.dumps(partition_piece("mlp4", 50.0)))
    assert seeds("--work", tmp_path / "work", "--results", results).returncode == 0
    again = results.read_text()
    assert again.count("seeds.py: begin") == 1 and "4.00x to the baseline's" not in again
    printed = seeds("--from-results", "--results", results)
    assert printed.returncode == 0 and printed.stdout.strip() in again
    assert "P4 speech N=4 ng: worst samples ratio never" in printed.stdout
    assert not list(tmp_path.glob("results.md.tmp*"))


def test_from_results_without_a_stored_table(tmp_path):
    results = tmp_path / "results.md"
    results.write_text("# Results\n")
    r = seeds("--from-results", "--results", results)
    assert r.returncode == 1 and "no stored table" in r.stderr and "Traceback" not in r.stderr


def test_the_stored_table_has_every_speech_line():
    """The table in docs/results.md carries issue 32's P4 lines, one per N > 1 and arm."""
    r = seeds("--from-results")
    assert r.returncode == 0, r.stderr
    for arm in ("plain", "ng", "bmuf", "nesterov"):
        for n in (2, 4, 8):
            assert any(line.startswith(f"P4 speech N={n} {arm}: worst samples ratio ") for line in r.stdout.splitlines())


def test_only_remeasures_one_piece_and_keeps_the_others_rows(tmp_path):
    write_pieces(tmp_path / "work")
    results = tmp_path / "results.md"
    results.write_text("# Results\n")
    assert seeds("--work", tmp_path / "work", "--results", results).returncode == 0
    before = seeds("--from-results", "--results", results).stdout.splitlines()
    # a new speech piece, tuned, alone in a new work dir: its rows change, every other row stays
    speech = json.loads((tmp_path / "work" / "speech.json").read_text())
    speech["arms"]["bmuf"]["worst"]["4"] = 1.2
    for arm in speech["arms"].values():
        arm["tuning"] = {j: {"chosen": 0.5 if j == "4" else 1.0, "final": {"0.5": 0.9, "1.0": 0.89, "2.0": 0.88}}
                         for j in ("1", "2", "4", "8")}
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "speech.json").write_text(json.dumps(speech))
    r = seeds("--work", tmp_path / "new", "--only", "speech", "--results", results)
    assert r.returncode == 0, r.stderr
    after = seeds("--from-results", "--results", results).stdout.splitlines()
    assert len(after) == len(before)
    changed = [a for b, a in zip(before, after) if b != a]
    assert len(changed) == 3 and all("speech frames" in row for row in changed[:2])
    assert changed[0].startswith("| averaging payoff, N = 4 | ") and changed[1].startswith("| averaging payoff, N = 8 | ")
    assert "learning rate tuned over x0.5/1/2: x0.5 (1 job x1)" in changed[0]
    assert changed[2] == "P4 speech N=4 bmuf: worst samples ratio 1.20"
    assert seeds("--work", tmp_path / "new", "--only", "speech,nope", "--results", results).returncode == 2
