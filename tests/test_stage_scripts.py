"""The shell stage scripts' own checks: a bad number is one line and exit 1 before any work."""
import subprocess

import pytest

from conftest import REPO


@pytest.mark.parametrize("script, args, message", [
    ("utils/split_data.sh", ["data/x", "0"], "Invalid num-split argument '0'"),      # once awk on split0/-nan
    ("utils/split_data.sh", ["data/x", "abc"], "Invalid num-split argument 'abc'"),
    ("steps/train_mono.sh", ["--stage", "abc", "data/x", "data/lang", "exp/mono"], "--stage must be an integer, got 'abc'"),
])
def test_stage_scripts_check_their_numbers(tmp_path, script, args, message):
    r = subprocess.run(["bash", REPO / script, *args], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 1 and message in r.stderr.splitlines()[-1], r.stderr
    assert list(tmp_path.iterdir()) == []
