"""Model zoo: torch definitions and ONNX export (torch only at export time), plus torch-free bundles."""
