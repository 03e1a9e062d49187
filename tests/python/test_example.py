"""tools/python_example.py on a tiny model directory written here, and the
README's Python example run as it is printed there."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, write_model

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("example") / "1B_gate_elementwise"
    write_model(d, np.random.default_rng(7))
    return d


def run_validated(args, cwd=None):
    # VKGATE_VALIDATION=1: the library enables the validation layer and prints
    # every message as "vkgate: validation ..." on stderr.
    env = dict(os.environ, VKGATE_VALIDATION="1")
    r = subprocess.run([sys.executable] + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert "vkgate: validation" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def test_python_example(model_dir, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (apt-get install python3-matplotlib)")
    out = tmp_path / "attn.png"
    r = run_validated([os.path.join(REPO, "tools", "python_example.py"), str(model_dir), "--max-new-tokens", "4",
                       "--layer", "1", "--out", str(out)])
    assert out.read_bytes().startswith(PNG)
    assert "first-token attention per layer" in r.stdout
    import importlib.util
    if importlib.util.find_spec("torch"):
        assert "vs PyTorch float64: NMSE" in r.stdout, r.stdout
    else:
        assert "comparison is skipped" in r.stdout


def readme_python_example():
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    section = text.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "README.md's Python section has no python code block"
    return blocks[0]


def test_readme_example(model_dir, tmp_path):
    script = tmp_path / "readme_example.py"
    script.write_text(readme_python_example())
    # The example reads its model directory by a relative name: run it beside one.
    r = run_validated([str(script)], cwd=str(model_dir.parent))
    assert r.stdout.strip()
