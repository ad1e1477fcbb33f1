"""onnxruntime, imported with its usage reporting off: the only module that imports it.

onnxruntime's Linux builds report usage to Microsoft (a device id written under `~/.cache`, then an
upload) unless `ORT_DISABLE_TELEMETRY` is set before the library initialises, which it does on import.
A memory service that promises to keep everything under FERMIX_HOME and to send nothing anywhere sets it.
"""

import os

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

import onnxruntime  # noqa: E402

__all__ = ["onnxruntime"]
