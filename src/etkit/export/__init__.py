"""Exports of etkit jobs for other tools.

``astra_sim(job, out, ...)`` (``etkit export astra-sim``) writes a job so that ASTRA-sim 2.x runs it to
the end at the cost etkit's simulator gives it: comm groups numbered from 1, METADATA nodes dropped,
the collectives ASTRA-sim cannot run written as the ones etkit simulates in their place
(:func:`etkit.simulate.collectives.decompose`), SEND/RECV complete,
and, with a network and system, ASTRA-sim's configuration files and the command that runs them::

    from etkit.export import astra_sim
    done = astra_sim("out/job", "astra/job", network="net.yml", system="sys.json")
    print(done.command)
"""

from __future__ import annotations

from .astra_sim import AstraSimExport, astra_sim
from .plan import ExportError

__all__ = ["astra_sim", "AstraSimExport", "ExportError"]
