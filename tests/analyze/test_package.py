"""The analyze package imports its analyses when first used: ``etkit info`` loads only the summary, and a name
shared by a function and its module (``breakdown``, ``critical_path``, ...) is always the function."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys, types
import etkit.analyze.summary
print(sorted(m for m in sys.modules if m.startswith("etkit.analyze")))
import etkit.analyze.breakdown, etkit.analyze.job_analysis  # the submodules themselves, then the names
from etkit.analyze import analyze_job, breakdown, critical_path, imbalance, top_ops
import etkit.analyze as package
print([type(f).__name__ for f in (analyze_job, breakdown, critical_path, imbalance, top_ops, package.breakdown)])
print(type(package.comm).__name__, breakdown.__module__, sys.modules["etkit.analyze.breakdown"].breakdown is breakdown)
"""


def test_the_summary_alone_is_imported_for_info_and_names_stay_functions() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "['etkit.analyze', 'etkit.analyze.summary']"
    assert out[1] == str(["function"] * 6)
    assert out[2] == "module etkit.analyze.breakdown True"
