"""Every option vocabulary of :mod:`etkit.vocab` is exactly the keys of the table the library uses."""

from __future__ import annotations

from etkit import vocab


def test_names_match_their_tables() -> None:
    from etkit.analyze.comm import ALGORITHMS
    from etkit.generate.collective import COLLECTIVE_TYPES
    from etkit.generate.dlrm import DLRM_MODELS
    from etkit.generate.layout import RECOMPUTE_MODES, SCHEDULES
    from etkit.generate.llm import MODELS
    from etkit.generate.micro import MICRO_CASES
    from etkit.generate.serve import SERVE_PRESETS
    from etkit.generate.training import DTYPE_BYTES
    from etkit.model.devices import DEVICES
    from etkit.pytorch.collect import WORKLOADS
    from etkit.simulate.calibrate import DEFAULT_SIZES
    from etkit.simulate.config import PRESETS

    assert vocab.ANALYZE_ALGORITHMS == tuple(ALGORITHMS)
    assert vocab.PRESETS == tuple(sorted(PRESETS))
    assert vocab.CALIBRATION_SIZES == tuple(DEFAULT_SIZES)
    assert vocab.COLLECTIVE_TYPES == tuple(COLLECTIVE_TYPES)
    assert vocab.MICRO_CASES == tuple(MICRO_CASES)
    assert vocab.LLM_MODELS == tuple(sorted(MODELS))
    assert vocab.DLRM_MODELS == tuple(sorted(DLRM_MODELS))
    assert vocab.DEVICES == tuple(sorted(DEVICES))
    assert vocab.DTYPES == tuple(sorted(DTYPE_BYTES))
    assert (vocab.RECOMPUTE_MODES, vocab.SCHEDULES) == (tuple(RECOMPUTE_MODES), tuple(SCHEDULES))
    assert vocab.WORKLOADS == tuple(WORKLOADS)
    assert vocab.SERVE_PRESETS == tuple(sorted(SERVE_PRESETS))
