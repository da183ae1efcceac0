"""recipes/digits end to end with the local backend: the acceptance run of the spine."""
import os
import re
import signal
import subprocess

from helpers import DIGITS_RECIPE as RECIPE, copy_recipe, run, wait_for


def test_digits_recipe_reaches_test_accuracy(tmp_path):
    recipe = copy_recipe(tmp_path / "digits")
    # 4 epochs (the recipe's default is 10; both reach 0.98): 5 iterations of 2 -> 4 jobs.
    r = run("./run.sh", "--num-epochs", "4", cwd=recipe, check=True)
    accuracy = float(re.search(r"^Test accuracy: (\S+)$", r.stdout, re.M).group(1))
    assert accuracy >= 0.95, r.stdout[-2000:]
    # jobs ramp 2 -> 4 over the iterations, one train log per job
    ramp = [int(j) for j in re.findall(r"Iter: \d+/\d+   Jobs: (\d+)", r.stdout)]
    assert ramp[0] == 2 and ramp[-1] == 4 and ramp == sorted(ramp)
    log = recipe / "exp" / "nnet" / "log"
    for it, jobs in enumerate(ramp):
        assert len(list(log.glob(f"train.{it}.*.log"))) == jobs
    assert (recipe / "exp" / "nnet" / "final.mdl").exists()
    # cleanup keeps every 100th iteration's model, the last iteration's and final.mdl (as Kaldi)
    kept = {p.name for p in (recipe / "exp" / "nnet").glob("*.mdl")}
    assert kept == {"0.mdl", f"{len(ramp)}.mdl", "final.mdl"}
    # Run again: every stage with complete outputs is skipped, saying so; the test is scored again.
    again = run("./run.sh", "--num-epochs", "4", cwd=recipe, check=True)
    for n in (0, 1, 2):
        assert re.search(rf"^\./run\.sh: stage {n}: outputs complete \(.*\); skipping it", again.stdout, re.M)
    assert f"Test accuracy: {accuracy}" in again.stdout and "Iter:" not in again.stdout


def test_ctrl_c_while_a_local_script_imports_ends_it_quietly(tmp_path):
    """local/prepare_data.py printed a KeyboardInterrupt traceback on Ctrl-C (seconds of imports)."""
    def importing(pid):
        try:
            return "scipy" in open(f"/proc/{pid}/maps").read()
        except OSError:
            return False
    p = subprocess.Popen(["python3", RECIPE / "local" / "prepare_data.py", tmp_path / "data"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for(lambda: importing(p.pid), timeout=60)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert "Traceback" not in err and p.returncode in (-signal.SIGINT, 130), (p.returncode, err)
