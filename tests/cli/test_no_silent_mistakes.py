"""What was accepted with exit 0 and no word (issue 12): each is now a one-line warning or error."""

from __future__ import annotations

import json
import subprocess

import orjson
import pytest

from etkit.cli.main import main
from etkit.executor import SerialExecutor
from etkit.generate.collective import write_collective

from ..conftest import UPSTREAM

EXAMPLES = UPSTREAM / "astra-sim-astra-sim" / "examples"
RING8 = EXAMPLES / "network" / "analytical" / "Ring_8npus.yml"
RING4 = EXAMPLES / "network" / "analytical" / "Ring_4npus.yml"


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("mistakes")
    write_collective(str(out / "ar"), "all_reduce", "1MiB", 4, executor=SerialExecutor())
    return out / "ar"


def _err(capsys) -> str:
    return capsys.readouterr().err


def test_a_system_key_typo_warns_with_the_closest_key(job, tmp_path, capsys):
    sys_json = tmp_path / "sys.json"
    sys_json.write_text(json.dumps({"preferred-dataset-split": 4, "all-reduce-implementation": ["ring"]}))
    assert main(["simulate", str(job), "--network", str(RING4), "--system", str(sys_json), "-q"]) == 0
    err = _err(capsys)
    assert (f"etkit simulate: warning: {sys_json}: unknown system key 'preferred-dataset-split' (did you mean "
            "'preferred-dataset-splits'?); ignored (ASTRA-sim ignores it too)") in err
    assert len([x for x in err.splitlines() if "preferred" in x]) == 1


def test_a_network_key_typo_warns(job, tmp_path, capsys):
    net = tmp_path / "net.yml"
    net.write_text(RING4.read_text() + "latencyy: [1]\n")
    assert main(["simulate", str(job), "--network", str(net), "-q"]) == 0
    assert "unknown network key 'latencyy' (did you mean 'latency'?)" in _err(capsys)


@pytest.mark.shared_data
def test_a_network_given_as_the_system_is_an_error(job, capsys):
    assert main(["simulate", str(job), "--network", str(RING4), "--system", str(RING4), "-q"]) == 2
    assert _err(capsys) == (f"etkit simulate: {RING4} is an ASTRA-sim network configuration, not a system "
                            "configuration: give it with --network\n")
    system = EXAMPLES / "system" / "native_collectives" / "Ring_4chunks.json"
    assert main(["simulate", str(job), "--network", str(system), "-q"]) == 2
    assert "is an ASTRA-sim system configuration, not a network configuration: give it with --system" in _err(capsys)


def test_a_yaml_syntax_error_is_one_line_with_file_line_and_column(job, tmp_path, capsys):
    bad = tmp_path / "bad.yml"
    bad.write_text("topology: [Ring\nnpus_count: [4]\n")
    assert main(["simulate", str(job), "--network", str(bad), "-q"]) == 2
    assert _err(capsys) == (f"etkit simulate: {bad}:2:11: not valid YAML: expected ',' or ']', but got ':' "
                            "(while parsing a flow sequence at line 1, column 11)\n")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"endpoint-delay": 10,\n "peak-perf": }\n')
    assert main(["simulate", str(job), "--network", str(RING4), "--system", str(bad_json), "-q"]) == 2
    assert _err(capsys) == f"etkit simulate: {bad_json}:2:15: not valid JSON: Expecting value\n"


@pytest.mark.shared_data
def test_a_network_bigger_than_the_job_warns_as_astra_sim_refuses_it(job, astra_sim, capsys):
    """ASTRA-sim wants one ET per NPU: with an 8-NPU network and a 4-rank job it stops at the missing rank 4.
    etkit runs it (rank r on NPU r) and says what ASTRA-sim would do."""
    run = subprocess.run([str(astra_sim), f"--workload-configuration={job}", f"--network-configuration={RING8}",
                          f"--system-configuration={EXAMPLES / 'system' / 'native_collectives' / 'Ring_4chunks.json'}"],
                         capture_output=True, text=True, timeout=120)
    assert f"{job}.4.et does not exist" in run.stdout + run.stderr
    assert main(["simulate", str(job), "--network", str(RING8), "-q"]) == 0
    assert (f"warning: {RING8}: the network has 8 NPUs but the job 4 ranks: NPUs 4..7 stay idle (ASTRA-sim refuses "
            "this run: it wants one ET per NPU)") in _err(capsys)
    assert main(["simulate", str(job), "--network", str(RING4), "-q"]) == 0
    assert "stay idle" not in _err(capsys)
    assert main(["simulate", str(job), "--preset", "hgx-h100", "-q"]) == 0  # sized to the job: half a node is fine
    assert "stay idle" not in _err(capsys)


@pytest.mark.shared_data
def test_device_on_a_cpu_only_trace_says_it_had_no_effect(converted_job, tmp_path, capsys):
    cpu = converted_job("tp_transformer_ws2")
    assert main(["simulate", str(cpu), "--preset", "hgx-h100", "--device", "H200", "-q", "-j", "1"]) == 0
    assert "--device H200 had no effect: the job has no GPU compute nodes (a CPU-only trace)" in _err(capsys)
    from etkit.generate.llm import write_llm

    write_llm(str(tmp_path / "llm"), model="llama3-8b", layers=1, tp=2, quiet=True)
    figures = []
    for extra in ([], ["--device", "H200"]):
        assert main(["simulate", str(tmp_path / "llm"), "--preset", "hgx-h100", "--json", "-", "-q", *extra]) == 0
        captured = capsys.readouterr()
        assert "had no effect" not in captured.err
        figures.append(orjson.loads(captured.out)["makespan_ns"])
    assert figures[1] < figures[0]  # H200's memory bandwidth shortens a GPU trace


def test_timeline_refuses_a_name_of_another_kind(job, tmp_path, capsys):
    out = tmp_path / "x.html"
    assert main(["timeline", str(job), "-o", str(out), "-q"]) == 2
    assert _err(capsys).startswith(f"etkit timeline: {out}: a timeline is Chrome JSON (.json, .json.gz) or Perfetto "
                                   "protobuf (.pftrace, .perfetto-trace, .pb); name the file so, or give --format; "
                                   "for an HTML page use `etkit report`")
    assert not out.exists()
    assert main(["report", str(job), "-o", str(tmp_path / "r.json"), "-q"]) == 2
    assert "the report is an HTML page: name it .html" in _err(capsys)


def test_graph_writes_pdf(job, tmp_path, capsys):
    out = tmp_path / "g.pdf"
    assert main(["graph", f"{job}.0.et", "-o", str(out)]) == 0
    assert out.read_bytes().startswith(b"%PDF-") and "wrote" in capsys.readouterr().out


def test_an_output_prefix_that_is_a_folder_or_a_file_name_is_refused(tmp_path, capsys):
    for bad, message in ((str(tmp_path) + "/", "is a folder"), (str(tmp_path / "j.et"), "give the prefix")):
        with pytest.raises(SystemExit):
            main(["generate", "collective", "--type", "all_reduce", "--ranks", "2", "-o", bad])
        assert message in _err(capsys)
    assert main(["generate", "collective", "--type", "all_reduce", "--ranks", "2", "-o", f"{tmp_path}/hy.", "-q"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hy.0.et", "hy.1.et"]


def test_the_knobs_reach_the_simulation_of_every_verb_that_simulates(job, tmp_path, capsys):
    spans = {}
    for extra in ([], ["--scale-bandwidth", "4"], ["--straggler", "1:3"]):
        assert main(["analyze", str(job), "--network", str(RING4), "--json", "-", "-q", "-j", "1", *extra]) == 0
        spans[tuple(extra)] = orjson.loads(capsys.readouterr().out)["makespan_ns"]
    base = spans[()]
    assert spans[("--scale-bandwidth", "4")] < base and spans[("--straggler", "1:3")] >= base
    assert main(["timeline", str(job), "--network", str(RING4), "--scale-bandwidth", "4", "-o",
                 str(tmp_path / "t.json"), "-q", "-j", "1"]) == 0
    assert "times from: simulation" in capsys.readouterr().out
