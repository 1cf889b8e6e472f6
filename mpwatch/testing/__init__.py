"""TEST-ONLY: what tests, benches and the recorders put in the GPU's place where there is none.
The product never imports this package (tests/test_structure.py checks it): it reaches a double
through the GPU seam alone, a switch naming a scenario file, read by one loader on each side of the
process boundary, which imports the module serving it by name and calls its `serve()`:

- MPWATCH_SCRIPTED_NVML (probes.seam, the supervisor's): `nvml`, NVML answering from the scenario;
- MPWATCH_SCRIPTED_CUDA (worker.seam, the worker's): `cuda`, the rank's allocator view, with
  `torch_cuda` (torch's CUDA calls, its OOMs) and `torch_snapshot` (its allocator snapshot).

`libnvml` is the other way in: a C libnvidia-ml.so.1 the real nvidia-ml-py loads, playing the
same scenarios under the real backend (no seam: the library is found as the driver's would be).
"""
