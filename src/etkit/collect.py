"""``etkit.collect``: record real PyTorch jobs (re-exports :mod:`etkit.pytorch.collect`).

>>> from etkit.collect import profile           # doctest: +SKIP
>>> with profile("traces", steps=2) as rec:      # doctest: +SKIP
...     for batch in loader:
...         train_step(batch); rec.step()
"""

from .pytorch.collect import WORKLOADS, CollectError, Recorder, profile, run_example

__all__ = ["profile", "run_example", "Recorder", "CollectError", "WORKLOADS"]
