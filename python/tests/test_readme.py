"""The Python examples of python/README.md run (on a RecordingBackend: no GPU needed)."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("block", range(len(BLOCKS)))
def test_readme_example_runs(block):
    code = "import numpy as np\nimport cudagraph as cg\n" + BLOCKS[block]
    exec(compile(code, f"python/README.md example {block + 1}", "exec"), {})
