"""The package's layers (nnet_tools/__init__.py): no module imports from a higher layer, and no
library file grows past 400 lines."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nnet_tools"
# Lowest first, as nnet_tools/__init__.py lists them; "" is the base: the package's top-level modules.
LAYERS = ["", "data", "model", "evaluate", "train", "queue", "report", "speech", "kaldi", "driver", "cli"]
MAX_LINES = 400


def layer(module):
    """The layer of a dotted module name inside nnet_tools (``nnet_tools.data.egs`` -> data)."""
    parts = module.split(".")
    if len(parts) > 1 and (PACKAGE / parts[1]).is_dir():
        return parts[1]
    return ""


def imports(path):
    """The nnet_tools modules ``path`` imports, anywhere in the file (function-level too)."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("nnet_tools"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("nnet_tools"):
            if node.module == "nnet_tools":   # from nnet_tools import data: the subpackage is the name
                yield from (f"nnet_tools.{a.name}" for a in node.names)
            else:
                yield node.module


def modules():
    return sorted(p for p in PACKAGE.rglob("*.py"))


def test_every_folder_is_a_layer():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(LAYERS) - {""}


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_from_a_higher_layer(path):
    own = layer("nnet_tools." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts))
    upward = [m for m in imports(path) if LAYERS.index(layer(m)) > LAYERS.index(own)]
    assert not upward, f"{path.relative_to(PACKAGE)} ({own or 'base'}) imports from a higher layer: {upward}"


def test_the_check_sees_an_upward_import(tmp_path):
    """The checker itself: an import of driver/ from data/ is one it reports."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from nnet_tools.driver import schedule\n")
    assert [layer(m) for m in imports(bad)] == ["driver"]
    assert LAYERS.index("driver") > LAYERS.index("data")


def test_no_library_file_over_the_limit():
    long = {str(p.relative_to(PACKAGE)): n for p in modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"files over {MAX_LINES} lines: {long}"
