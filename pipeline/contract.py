"""The `sr` custom-op contract: the one place export, engine, ONNX Runtime ops and backends read it from.

Full per-op tables (inputs, outputs, attributes, types, limits): plugins_trt/dynamicResize/README.md and
plugins_trt/deformConv2d/README.md. The C++ side states the same names in plugins_trt/common/srCommon.h.
"""
DOMAIN = "sr"  # ONNX custom domain and TensorRT plugin namespace
VERSION = 1  # ONNX op-set version of the domain and TensorRT plugin version
DYNAMIC_RESIZE = "DynamicResize"
DEFORM_CONV = "DeformConv2d"
OP_TYPES = (DYNAMIC_RESIZE, DEFORM_CONV)
# Attributes DeformConv2d carries, exactly the standard DeformConv ones.
DEFORM_CONV_ATTRS = ("strides", "pads", "dilations", "group", "offset_group", "kernel_shape")
# Lowest default-domain opset whose DeformConv exists (the DeformConv2d body needs it).
DEFORM_CONV_MIN_OPSET = 19
# Cubic Resize semantics equal to torch bicubic with align_corners=False.
RESIZE_ATTRS = {"mode": "cubic", "cubic_coeff_a": -0.75, "coordinate_transformation_mode": "half_pixel"}
# Node attributes the TensorRT ONNX parser reads when it falls back to a plugin.
PLUGIN_NAMESPACE_ATTR = "plugin_namespace"
SHAPE_INPUT_ATTR = "tensorrt_plugin_shape_input_indices"
DYNAMIC_RESIZE_SHAPE_INPUTS = (1,)  # DynamicResize's `size` is a shape input
# DeformConv2d plugin field (not an ONNX DeformConv attribute): 1 lets FP32 GEMMs use TF32 (engine --tf32).
ALLOW_TF32_ATTR = "allow_tf32"
