import os
import sys

# Tests import their helpers as `tests.helpers...` / `from tests.util import ...`.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Passes verify the IR (shapes included) after every change while testing.
os.environ.setdefault("FUSEGRAPH_VERIFY", "full")
