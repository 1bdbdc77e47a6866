"""The class of an operation from its name: what ``etkit anonymize`` writes instead of the name.

A class says what kind of work a node does (``gemm``, ``conv``, ``attention``, ``elementwise``, ...), which
is what simulators and analyses need, and nothing about whose model it is. The node's kind (compute,
host CPU, communication, memory: :mod:`etkit.analyze.kinds`) is carried by its type and ``is_cpu_op``,
which anonymisation keeps; communication nodes are named by their collective (the schema's
``CommType``), so only compute-like names go through :func:`op_class`.

The rules are tried in order on the lower-cased name; PyTorch operators (``aten::addmm``), autograd
nodes (``AddmmBackward0``), GPU kernels (``ampere_sgemm_128x64_tn``, ``void at::native::...<...>``) and
the names etkit's generators use (``fwd.mb0.layer3.attn_qkv``) are recognised. A backward op gets the
suffix ``_backward``. Names that match nothing are ``op``; Python frames (``nn.Module: Net_0``,
``model.py(42): forward``) are ``python``.
"""

from __future__ import annotations

import re

from ..format.schema import CommType, NodeType

__all__ = ["op_class", "node_class", "CLASSES", "GEMM_CLASSES"]

_RULES: tuple[tuple[str, str], ...] = (
    ("root", r"^\[pytorch\|profiler"),
    ("python", r"nn\.module:|^## |\.py\(\d+\)|\.py:\d+|<built-in|<module>|^torch/|^python"),
    ("view", r"broadcast_tensors"),
    ("fill", r"\bnormal_|uniform_|bernoulli|resize_"),
    ("python", r"\.forward\b|\.backward\b"),
    ("optimizer", r"optimizer|\badam|\bsgd\b|zero_grad|_foreach_|lerp_|addcdiv|addcmul"),
    ("comm", r"c10d|nccl|gloo|record_param_comms|all[ _]?reduce|all[ _]?gather|reduce[ _]?scatter|all[ _]?to[ _]?all|"
             r"broadcast|barrier|\bsend\b|\brecv\b|_p2p|alltoall"),
    ("runtime", r"^cuda[a-z ]|^hip[a-z ]|cudalaunch|launchkernel|synchronize|^cudnn[a-z]*get|^cublas[a-z]*create"),
    ("memcpy", r"memcpy|memset|\bcopy_h|dtoh|htod|dtod"),
    ("conv", r"conv|fprop|dgrad|wgrad|cudnn"),
    ("attention", r"attention|flash|fmha|sdpa|attn_core|mha\b"),
    ("gemm", r"\bmm\b|addmm|bmm|baddbmm|matmul|\blinear\b|addmv|\bmv\b|\bdot\b|einsum|gemm|gemv|cublas|cutlass|"
             r"xmma|wgmma|hmma|attn_qkv|attn_out|mlp_up|mlp_down|lm_head|router|expert_up|expert_down|_mm_"),
    ("norm", r"norm"),
    ("softmax", r"softmax"),
    ("loss", r"loss|nll|cross_entropy"),
    ("embedding", r"embedding|index_select|\bindex\b|index_put|gather|scatter"),
    ("copy", r"copy|clone|_to_copy|contiguous|\bcat\b|\bstack\b|\bto\b|concat"),
    ("reduction", r"\bsum\b|\bmean\b|\bamax\b|\bmax\b|\bmin\b|reduce|\bargmax|cumsum|\bstd\b|\bvar\b"),
    ("fill", r"fill|zero|\bones|\bempty|\bfull\b|arange|rand|memset|\bnew_"),
    ("view", r"view|reshape|permute|transpose|expand|\bt\b|tbackward|as_strided|narrow|chunk|split|slice|"
             r"select|squeeze|flatten|unbind|detach|alias|lift_fresh|resolve"),
    ("elementwise", r"add|mul|div|sub|relu|gelu|silu|swish|sigmoid|tanh|exp|log|pow|sqrt|neg|abs|where|clamp|"
                    r"dropout|threshold|elementwise|vectorized|unrolled|mask|rsub|lt\b|gt\b|eq\b|ne\b|sign|erf|sin|cos|"
                    r"rotary|rope|act_|_kernel"),
    ("item", r"\bitem\b|_local_scalar|nonzero"),
)
_COMPILED = tuple((cls, re.compile(rx)) for cls, rx in _RULES)

#: Every class :func:`op_class` can return (``_backward`` forms included), and the node-type names.
CLASSES: tuple[str, ...] = tuple(dict.fromkeys(
    [c for c, _ in _RULES] + [f"{c}_backward" for c, _ in _RULES] + ["op", "op_backward"]))
#: Classes whose FLOPs follow from their operands' shapes.
GEMM_CLASSES = frozenset({"gemm", "gemm_backward"})
_BACKWARD = re.compile(r"backward|\bbwd\b|^bwd\.|\.bwd\.")
#: Autograd node names: ``AddmmBackward0``; split before matching so ``addmm`` is seen as a word.
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def op_class(name: str) -> str:
    """The class of an operation called ``name`` (``aten::addmm`` -> ``gemm``, ``MmBackward0`` ->
    ``gemm_backward``, anything unknown -> ``op``)."""
    text = _CAMEL.sub(" ", name).lower().replace("::", " ").replace("aten ", " ")
    backward = bool(_BACKWARD.search(text))
    if backward:
        text = _BACKWARD.sub(" ", text)
    for cls, rx in _COMPILED:
        if rx.search(text):
            return f"{cls}_backward" if backward and cls not in ("root", "python", "runtime") else cls
    return "op_backward" if backward else "op"


#: Names of the non-compute node types (METADATA, MEM_LOAD, ...) in lower case.
_TYPE_NAMES = {int(t): t.name.lower().removesuffix("_node") for t in NodeType}


def node_class(node_type: int, comm_type: int, name: str) -> str:
    """What an anonymised node is called: compute nodes their :func:`op_class`, collectives their
    ``CommType`` (``all_reduce``), sends and receives ``send``/``recv``, other nodes their type."""
    if node_type == NodeType.COMP_NODE:
        return op_class(name)
    if node_type == NodeType.COMM_COLL_NODE:
        try:
            return CommType(comm_type).name.lower()
        except ValueError:
            return "collective"
    return _TYPE_NAMES.get(int(node_type), "node")
