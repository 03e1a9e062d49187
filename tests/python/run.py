#!/usr/bin/env python3
"""ctest's entry to the Python tests: runs pytest on the files given, with the
interpreter the module was built for. Exits 77 (ctest: skipped) when that
interpreter has no pytest (Debian 12: apt-get install python3-pytest), and
when a file collected no test because it skipped itself whole (test_torch.py
without PyTorch: pytest's exit code 5, which ctest would count as a failure)."""
import os
import sys

try:
    import pytest
except ImportError:
    print("pytest is not installed for %s: the Python tests are skipped (apt-get install python3-pytest)"
          % sys.executable)
    sys.exit(77)

# No .pytest_cache or __pycache__ left in the source tree.
sys.dont_write_bytecode = True
here = os.path.dirname(os.path.abspath(__file__))
code = pytest.main(["-q", "-rs", "-p", "no:cacheprovider", "--rootdir", here] + sys.argv[1:])
sys.exit(77 if code == pytest.ExitCode.NO_TESTS_COLLECTED else code)
