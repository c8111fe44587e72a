"""What the stages hand each other: the artifact cache (ONNX files, engines), ONNX metadata, atomic writes."""
