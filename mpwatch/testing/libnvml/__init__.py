"""TEST-ONLY: a stand-in libnvidia-ml.so.1, in C against NVIDIA's own nvml.h, for the real
nvidia-ml-py to load where there is no GPU. Runs in the test process (building, writing the
script); the library itself runs inside whichever process loads pynvml (the supervisor).

Unlike testing.nvml (a scripted backend in Python, in place of probes.nvml's), this runs
probes.nvml.NvmlBackend and pynvml's own code: its ctypes structs, the versioned entry points
(nvmlDeviceGetComputeRunningProcesses_v3, and its _v2 fallback on a library built without
_v3), NVML_VALUE_NOT_AVAILABLE, the two-call buffer protocol, MIG handles, NVML's error codes.

- `build.build(out_dir)` compiles stand_in.c and script.c with gcc into
  out_dir/<variant>/libnvidia-ml.so.1 (nothing is built at install; `build.missing()` says why
  it cannot be: no gcc, or no nvml.h, which the test extra's nvidia-nvml-dev package ships).
- `script.write_script(scenario, path)` turns a scenario (the JSON testing.nvml reads)
  into the line format script.c reads, so the C side needs no JSON parser.
- The library reads that file, at nvmlInit, from MPWATCH_NVML_STAND_IN_SCRIPT (`SCRIPT_ENV`), and is
  found by pynvml's own `CDLL("libnvidia-ml.so.1")` through LD_LIBRARY_PATH (`script.env_for`).
"""
from __future__ import annotations

SCRIPT_ENV = "MPWATCH_NVML_STAND_IN_SCRIPT"  # read by the C library only
