"""Stragglers by lateness: a real gloo job with a planted late rank, and a 1,024-rank pipeline with none.

The job (late_rank_job.py) runs 3 ranks on CPU/gloo; rank 1 sleeps before each profiled step, so ranks
0 and 2 wait for it in every all-reduce. Converted from host ETs + Kineto and from Kineto alone, the
analysis must name exactly rank 1 and put the waiting on ranks 0 and 2. In a generated 1F1B pipeline
every stage makes the next wait by design: stage 0 waits most, and no rank is a straggler.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from etkit.analyze import breakdown, imbalance
from etkit.executor import SerialExecutor

from . import late_rank_job as plan

JOB_SCRIPT = Path(plan.__file__)


@pytest.fixture(scope="module")
def late_job(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("late_rank") / "raw"
    done = subprocess.run([sys.executable, str(JOB_SCRIPT), str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.mark.torch
@pytest.mark.slow
def test_the_planted_late_rank_is_the_only_straggler(late_job, tmp_path):
    from etkit.model.job import load_job
    from etkit.pytorch.job import convert_job
    from etkit.pytorch.kineto_convert import load_kineto_job

    convert_job(late_job, tmp_path / "j", executor=SerialExecutor())
    for job in (load_job(tmp_path / "j", executor=SerialExecutor()), load_kineto_job(late_job, executor=SerialExecutor())):
        im = imbalance(job)
        assert [s.rank for s in im.stragglers] == [plan.LATE]
        assert im.ranks[0].rank == plan.LATE  # the table ranks by the waiting caused
        others = [r for r in range(plan.WORLD) if r != plan.LATE]
        sleep_ns = plan.SLEEP_S * 1e9
        # every step each other rank waited about the sleep for the late one, in its all-reduce
        for event in im.events[:plan.STEPS]:
            assert event.what == "ALL_REDUCE" and event.late_rank == plan.LATE and sorted(event.waits) == others
            assert all(0.8 * sleep_ns < w < 1.5 * sleep_ns for w in event.waits.values())
        b = breakdown(job)
        for r in others:
            assert b.ranks[r].waiting_ns > 0.8 * plan.STEPS * sleep_ns
        assert b.ranks[plan.LATE].waiting_ns < 0.1 * sleep_ns


def test_a_1024_rank_pipeline_flags_no_waiting_stage():
    from etkit.analyze.context import prepare
    from etkit.generate import llm
    from etkit.simulate import load_config, simulate

    job = llm(model="llama3-70b", dp=32, tp=8, pp=4, layers=4, microbatches=4).to_job()
    net, system, _ = load_config(None, None, preset="hgx-h100")
    ctx = prepare(job, simulate(job, net, system).schedule)
    assert len(ctx.roles) == 4  # the 4 pipeline stages, each 256 ranks of 32 replicas x 8 tensor ranks
    assert [len(c.ranks) for c in ctx.roles] == [256] * 4
    im = imbalance(job, context=ctx)
    assert im.stragglers == []
    b = breakdown(job, context=ctx)
    stage0 = ctx.roles[0].ranks
    waited = {c.index: b.ranks[c.ranks[0]].waiting_ns for c in ctx.roles}
    assert max(waited, key=waited.get) == 0 and all(b.ranks[r].waiting_ns == waited[0] for r in stage0)
