"""The GPU probe on the real backend: probes.nvml.NvmlBackend over nvidia-ml-py over the
stand-in libnvidia-ml.so.1 (testing.libnvml) loaded into this process."""
import pytest

from mpwatch.probes import gpu, nvml
from tests.libnvml import loaded


@pytest.fixture
def probe(libnvml, tmp_path, monkeypatch):
    """probe(scenario, lib=libnvml) -> an opened GpuProbe on the real backend; closed after."""
    made = []

    def make(data, lib=libnvml):
        ctx = loaded(lib, monkeypatch, tmp_path, data)
        ctx.__enter__()
        made.append(ctx)
        backend, why = gpu.open_backend(None)
        assert why is None and isinstance(backend, nvml.NvmlBackend), why
        p = gpu.GpuProbe(backend)
        p.open()
        made.append(p)
        return p
    yield make
    for x in reversed(made):
        x.close() if isinstance(x, gpu.GpuProbe) else x.__exit__(None, None, None)
