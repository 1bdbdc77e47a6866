"""Library errors speak the library's words; the CLI names the flags that set the same options."""

from __future__ import annotations

import math
import pickle

import pytest

from etkit.cli.main import main
from etkit.errors import OptionError, UsageError
from etkit.simulate import Knobs

from .builders import node, write_job


def test_an_option_error_names_the_option_or_its_flag():
    exc = OptionError("{backend} needs {device} (see {{docs}})", backend="nccl", device="cuda")
    assert str(exc) == "backend='nccl' needs device='cuda' (see {docs})"
    assert exc.as_flags() == "--backend nccl needs --device cuda (see {docs})"
    again = pickle.loads(pickle.dumps(exc))  # crosses process pools intact
    assert isinstance(again, UsageError) and str(again) == str(exc) and again.as_flags() == exc.as_flags()
    named = OptionError("give exactly one of {dp} or {max_buffer_bytes}", dp=..., max_buffer_bytes=...)
    assert (str(named), named.as_flags()) == ("give exactly one of dp or max_buffer_bytes",
                                              "give exactly one of --dp or --max-buffer-bytes")


@pytest.mark.parametrize("field, value", [("scale_compute", 0.0), ("scale_bandwidth", math.inf),
                                          ("scale_latency", -1.0)])
def test_knobs_name_the_field_not_a_flag(field, value):
    with pytest.raises(OptionError) as info:
        Knobs(**{field: value})
    assert str(info.value).startswith(f"{field}={value!r} must be")
    assert info.value.as_flags().startswith(f"--{field.replace('_', '-')} {value} must be")


def test_knobs_take_keywords_only():
    with pytest.raises(TypeError):
        Knobs(2.0)  # type: ignore[misc]


def test_scale_names_its_options(tmp_path):
    from etkit.scale import plan_scale

    prefix = write_job(tmp_path / "job", [[node(1)], [node(1)]])
    with pytest.raises(OptionError, match=r"^give exactly one of dp, tp, pp or ranks$") as info:
        plan_scale(prefix, dp=2, tp=2)
    assert info.value.as_flags() == "give exactly one of --dp, --tp, --pp or --ranks"


def test_the_cli_prints_the_flag(tmp_path, capsys):
    pytest.importorskip("torch")
    prefix = write_job(tmp_path / "job", [[node(1)]])
    code = main(["replay", str(prefix), "--backend", "nccl", "--device", "cpu", "-q"])
    assert code == 2
    assert capsys.readouterr().err.strip() == "etkit replay: --backend nccl needs --device cuda"
