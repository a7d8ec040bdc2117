"""Generated documentation stays in step with the code."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_operators_md_is_generated_from_fusegraph_ops():
    out = subprocess.run([sys.executable, "-m", "fusegraph", "ops", "--markdown"], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert (ROOT / "docs" / "operators.md").read_text() == out, "regenerate: fusegraph ops --markdown > docs/operators.md"
