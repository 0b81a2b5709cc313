"""Rewrites of exported ONNX graphs that keep their results and drop work onnxruntime would do for nothing.

The exporter turns ``max_pool2d_with_indices`` into a MaxPool with indices plus a second, 1x1
MaxPool over the whole input whose only use is the index of each plane's first element, sliced to
shape (N, C, 1, 1), i.e. ``(n·C + c)·H·W``. That 1x1 pass costs as much as the pooling itself; the
same offsets come from the input's shape with a Range, which is what ``drop_offset_pools`` builds.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _attributes(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def drop_offset_pools(model: onnx.ModelProto) -> onnx.ModelProto:
    """Replace each 1x1 MaxPool used only for plane offsets (through one Slice) by Shape/Range ops."""
    graph = model.graph
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    replaced = 0
    new_nodes: list[onnx.NodeProto] = []
    skip: set[int] = set()
    constants: list[onnx.TensorProto] = []
    for node in graph.node:
        if id(node) in skip:
            continue
        attrs = _attributes(node)
        one_by_one = list(attrs.get("kernel_shape", [])) == [1, 1] and list(attrs.get("strides", [1, 1])) == [
            1,
            1,
        ]
        if not (node.op_type == "MaxPool" and len(node.output) == 2 and one_by_one):
            new_nodes.append(node)
            continue
        values, indices = node.output
        users = consumers.get(indices, [])
        if consumers.get(values) or values in outputs or len(users) != 1 or users[0].op_type != "Slice":
            new_nodes.append(node)
            continue
        skip.add(id(users[0]))
        prefix = f"plane_offsets_{replaced}"
        replaced += 1
        constants += [
            numpy_helper.from_array(np.array([0], np.int64), f"{prefix}_0"),
            numpy_helper.from_array(np.array([2], np.int64), f"{prefix}_2"),
            numpy_helper.from_array(np.array([4], np.int64), f"{prefix}_4"),
            numpy_helper.from_array(np.array(0, np.int64), f"{prefix}_zero"),
            numpy_helper.from_array(np.array(1, np.int64), f"{prefix}_one"),
            numpy_helper.from_array(np.array([1, 1], np.int64), f"{prefix}_ones"),
        ]
        p = prefix
        new_nodes += [
            helper.make_node("Shape", [node.input[0]], [f"{p}_shape"]),
            helper.make_node("Slice", [f"{p}_shape", f"{p}_0", f"{p}_2"], [f"{p}_nc"]),
            helper.make_node("Slice", [f"{p}_shape", f"{p}_2", f"{p}_4"], [f"{p}_hw"]),
            helper.make_node("ReduceProd", [f"{p}_nc"], [f"{p}_planes"], keepdims=0),
            helper.make_node("ReduceProd", [f"{p}_hw"], [f"{p}_area"], keepdims=0),
            helper.make_node("Range", [f"{p}_zero", f"{p}_planes", f"{p}_one"], [f"{p}_range"]),
            helper.make_node("Mul", [f"{p}_range", f"{p}_area"], [f"{p}_flat"]),
            helper.make_node("Concat", [f"{p}_nc", f"{p}_ones"], [f"{p}_target"], axis=0),
            helper.make_node("Reshape", [f"{p}_flat", f"{p}_target"], [users[0].output[0]]),
        ]
    if not replaced:
        return model
    del graph.node[:]
    graph.node.extend(new_nodes)
    graph.initializer.extend(constants)
    used = {name for node in graph.node for name in node.input}
    kept = [t for t in graph.initializer if t.name in used]  # the removed Slices' bounds
    del graph.initializer[:]
    graph.initializer.extend(kept)
    onnx.checker.check_model(model, full_check=True)
    return model
