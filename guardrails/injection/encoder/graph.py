"""The encoder's export format and its ONNX graph: weights.npz holds every matrix int8 per output row with a float32
scale (the linear maps' in LINEAR_LEVELS), every vector float32; `onnx_model` turns those arrays into the graph
network.py runs.

Shapes follow the checkpoint: hidden 384, 12 heads, 6 layers, feed-forward 1536, post-norm residual blocks, GELU (the
erf form, as trained), mean pooling over every token of the input (its [CLS] and [SEP] included, as trained), one
linear head.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper

LAYER_NORM_EPS = 1e-12
# The linear maps' weights use 7 bits of their int8: x86 CPUs without VNNI multiply uint8 inputs by int8 weights in
# pairs summed into int16 (vpmaddubsw), which saturates past 32,767; 255 * 63 * 2 cannot. So every CPU computes the
# same integers and a score is the same on every machine (the recorded scores' test relies on it). Measured on the
# shipped fit against 127 levels: equal speed, equal ranking (2026-12-07, recall at 3% false positives 0.820
# against 0.818 on the twelve held-out writers).
LINEAR_LEVELS = 63
# Per-layer linear maps, in the export's naming: query, key, value, attention output, feed-forward in, out.
LINEARS = ("query", "key", "value", "attn_out", "ffn_in", "ffn_out")
# In the graph query, key and value are one [hidden, 3 * hidden] map: one product instead of three.
_ATTENTION_INPUTS = ("query", "key", "value")
_OPSET = 20  # Gelu and LayerNormalization as standard operators


def quantized(matrix: np.ndarray, levels: int = 127) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per row (a torch Linear's row is one output), values in [-levels, levels]: (int8 [rows, cols],
    float32 scale [rows]). Int8 quarters the file against float32; per-row scales keep the error of a row's dot
    product near 0.4% (127 levels) or 0.8% (LINEAR_LEVELS)."""
    scale = np.abs(matrix).max(axis=1) / levels
    scale[scale == 0] = 1.0
    return np.round(matrix / scale[:, None]).astype(np.int8), scale.astype(np.float32)


def onnx_model(arrays: dict[str, np.ndarray]) -> ModelProto:
    """The forward pass of one export, token ids (int64 [T]) -> logit (float [1])."""
    return _Graph(arrays).model()


class _Graph:
    """The ONNX graph of one export: initializers from its arrays, nodes appended in order."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays
        self.nodes: list[NodeProto] = []
        self.initializers: list[TensorProto] = []

    def model(self) -> ModelProto:
        a = self.arrays
        ids = "ids"  # int64 [T]
        # Word embeddings stay int8 in memory (a prompt reads ~100 of 30,522 rows): gather rows and scales, then scale.
        words = self.op(
            "Cast", self.op("Gather", self.constant("words.q", a["word_embeddings.q"]), ids), to=TensorProto.FLOAT
        )
        scales = self.op("Gather", self.constant("words.scale", a["word_embeddings.scale"][:, None]), ids)
        positions = self.constant("positions", _dequantized(a, "position_embeddings"))
        length = self.op("Shape", ids)
        start, axis = self.constant("zero", _int64s(0)), self.constant("axis0", _int64s(0))
        x = self.op("Add", self.op("Mul", words, scales), self.op("Slice", positions, start, length, axis))
        x = self.layer_norm(x, "embed_norm")
        for i in range(int(a["num_layers"])):
            x = self.block(x, f"l{i}", int(a["num_heads"]))
        pooled = self.op("ReduceMean", x, axis, keepdims=0)
        head = self.constant("head.weight", a["head.weight"][:, None])
        logit = self.op("Add", self.op("MatMul", pooled, head), self.constant("head.bias", a["head.bias"].reshape(1)))
        graph = helper.make_graph(
            self.nodes,
            "injection_encoder",
            [helper.make_tensor_value_info(ids, TensorProto.INT64, ["tokens"])],
            [helper.make_tensor_value_info(logit, TensorProto.FLOAT, [1])],
            self.initializers,
        )
        # IR 9: what the onnx and onnxruntime releases pyproject allows all read
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], ir_version=9)

    def block(self, x: str, prefix: str, num_heads: int) -> str:
        hidden = self.arrays[f"{prefix}.query.q"].shape[0]
        head_dim = hidden // num_heads
        # [T, 3 * hidden] -> [3, heads, T, head_dim] -> query, key, value
        qkv_shape = self.constant(f"{prefix}.qkv_shape", _int64s(-1, 3, num_heads, head_dim))
        qkv = self.op("Transpose", self.op("Reshape", self.linear(x, prefix, "qkv"), qkv_shape), perm=[1, 2, 0, 3])
        query, key, value = self.split(qkv, 3)
        scale = self.constant(f"{prefix}.score_scale", np.array(1.0 / math.sqrt(head_dim), dtype=np.float32))
        scores = self.op("Mul", self.op("MatMul", query, self.op("Transpose", key, perm=[0, 2, 1])), scale)
        weights = self.op("Softmax", scores, axis=-1)
        flat = self.constant(f"{prefix}.flat", _int64s(-1, hidden))
        context = self.op("Reshape", self.op("Transpose", self.op("MatMul", weights, value), perm=[1, 0, 2]), flat)
        x = self.layer_norm(self.op("Add", x, self.linear(context, prefix, "attn_out")), f"{prefix}.attn_norm")
        inner = self.op("Gelu", self.linear(x, prefix, "ffn_in"))
        return self.layer_norm(self.op("Add", x, self.linear(inner, prefix, "ffn_out")), f"{prefix}.ffn_norm")

    def linear(self, x: str, prefix: str, name: str) -> str:
        """x @ W + b with W int8 per output column: the input quantized per tensor as it runs (uint8, its own scale
        and zero point), an integer product, then both scales. ONNX Runtime fuses the four nodes into one kernel."""
        names = _ATTENTION_INPUTS if name == "qkv" else (name,)
        weights = np.concatenate([self.arrays[f"{prefix}.{n}.q"] for n in names]).T  # [in, out]
        if np.abs(weights.astype(np.int16)).max() > LINEAR_LEVELS:
            raise ValueError(f"{prefix}.{name}: weights past {LINEAR_LEVELS} levels (an older export; run train.py)")
        scales = np.concatenate([self.arrays[f"{prefix}.{n}.scale"] for n in names])
        biases = np.concatenate([self.arrays[f"{prefix}.{n}.bias"] for n in names])
        x_q, x_scale, x_zero = self.op("DynamicQuantizeLinear", x, outputs=3)
        w = self.constant(f"{prefix}.{name}.q", np.ascontiguousarray(weights))
        product = self.op("Cast", self.op("MatMulInteger", x_q, w, x_zero), to=TensorProto.FLOAT)
        scale = self.op("Mul", x_scale, self.constant(f"{prefix}.{name}.scale", scales))
        return self.op("Add", self.op("Mul", product, scale), self.constant(f"{prefix}.{name}.bias", biases))

    def layer_norm(self, x: str, name: str) -> str:
        gain = self.constant(f"{name}.gain", self.arrays[f"{name}.gain"])
        bias = self.constant(f"{name}.bias", self.arrays[f"{name}.bias"])
        return self.op("LayerNormalization", x, gain, bias, axis=-1, epsilon=LAYER_NORM_EPS)

    def split(self, x: str, parts: int) -> list[str]:
        pieces = self.op("Split", x, outputs=parts, axis=0, num_outputs=parts)
        axis = self.constant(f"{x}.axis", _int64s(0))
        return [self.op("Squeeze", piece, axis) for piece in pieces]

    def constant(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def op(self, op_type: str, *inputs: str, outputs: int = 1, **attributes: Any) -> Any:
        """Appends a node; its output's name, or the list of them when it has several."""
        first = f"{op_type.lower()}{len(self.nodes)}"
        names = [first] if outputs == 1 else [f"{first}.{k}" for k in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, **attributes))
        return names[0] if outputs == 1 else names


def _dequantized(arrays: dict[str, np.ndarray], name: str) -> np.ndarray:
    return arrays[f"{name}.q"].astype(np.float32) * arrays[f"{name}.scale"][:, None]


def _int64s(*values: int) -> np.ndarray:
    """Shapes, axes and starts: ONNX wants int64 (numpy's default integer is 32 bits on some platforms)."""
    return np.array(values, dtype=np.int64)
