"""The names that etkit's options take (presets, models, devices, algorithms, ...), as plain data.

The command line builds its parsers from these, so that ``etkit VERB --help`` imports no numpy,
protobuf or simulator: the tables behind the names (``etkit.simulate.config.PRESETS``,
``etkit.generate.llm.MODELS``, ...) live with the code that uses them, in modules that are costly to
import. ``tests/test_vocab.py`` checks that every name here is exactly the keys of its table.
"""

from __future__ import annotations

__all__ = [
    "ANALYZE_ALGORITHMS", "CALIBRATION_SIZES", "COLLECTIVE_TYPES", "DEVICES", "DLRM_MODELS", "DTYPES", "LLM_MODELS",
    "MICRO_CASES", "PRESETS", "RECOMPUTE_MODES", "SCHEDULES", "SERVE_PRESETS", "WORKLOADS",
]

#: How ``analyze`` expands a collective into rank-to-rank traffic (``etkit.analyze.comm.ALGORITHMS``).
ANALYZE_ALGORITHMS = ("ring", "direct")
#: etkit's system presets (``etkit.simulate.config.PRESETS``).
PRESETS = ("hgx-a100", "hgx-h100", "hgx-h200")
#: Message sizes ``calibrate`` measures by default (``etkit.simulate.calibrate.DEFAULT_SIZES``).
CALIBRATION_SIZES = (1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22)
#: ``generate collective --type`` (``etkit.generate.collective.COLLECTIVE_TYPES``).
COLLECTIVE_TYPES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "barrier")
#: ``generate micro --case``, in the generator's order (``etkit.generate.micro.MICRO_CASES``).
MICRO_CASES = (
    "one_metadata_node_all_types", "one_remote_mem_load_node", "one_remote_mem_store_node", "one_comp_node",
    "two_comp_nodes_independent", "two_comp_nodes_dependent", "ALL_REDUCE", "ALL_TO_ALL", "ALL_GATHER",
    "REDUCE_SCATTER", "BROADCAST", "BARRIER", "one_comm_send_node", "one_comm_recv_node",
)
#: Model presets of ``generate llm`` and ``generate dlrm`` (``etkit.generate.llm.MODELS``, ``.dlrm.DLRM_MODELS``).
LLM_MODELS = ("gpt3-175b", "llama3-405b", "llama3-70b", "llama3-8b", "mixtral-8x7b")
DLRM_MODELS = ("dlrm-mlperf", "dlrm-small")
#: Serving presets of ``generate llm-serve --serving-preset`` (``etkit.generate.serve.SERVE_PRESETS``).
SERVE_PRESETS = ("llama3-70b-h100", "llama3-70b-h200", "llama3-8b-h100", "llama3-8b-h200", "mixtral-8x7b-h100",
                 "mixtral-8x7b-h200")
#: Roofline device presets (``etkit.model.devices.DEVICES``).
DEVICES = ("A100", "H100", "H200", "MI300X")
#: Element types of generated work (``etkit.generate.training.DTYPE_BYTES``).
DTYPES = ("bf16", "fp16", "fp32", "fp8")
#: Activation recomputation and pipeline schedules (``etkit.generate.layout``).
RECOMPUTE_MODES = ("none", "selective", "full")
SCHEDULES = ("1f1b", "gpipe")
#: Built-in example jobs of ``collect example --workload`` (``etkit.pytorch.collect.WORKLOADS``).
WORKLOADS = ("ddp", "tp", "pp", "moe", "fsdp", "cnn")
