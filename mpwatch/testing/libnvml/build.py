"""TEST-ONLY: compiles the stand-in libnvidia-ml.so.1 (testing.libnvml) with gcc, at test
time, against NVIDIA's nvml.h found where a package installed it. Runs in the test process.

nvml.h is not copied into this repository: the test extra installs NVIDIA's nvidia-nvml-dev
package, which ships it (site-packages/nvidia/<cu>/include/nvml.h); a CUDA toolkit's
/usr/local/cuda/include or a distribution's /usr/include serve too.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = ("stand_in.c", "stand_in_counters.c", "stand_in_procs.c", "stand_in_mig.c", "stand_in_clocks.c",
           "script.c")
LIB_NAME = "libnvidia-ml.so.1"
# Variants: the library of a current driver, and of one older than R510 (no _v3 process list,
# no MemoryInfo_v2, no clock event reasons).
VARIANTS = {"full": [], "no_v3": ["-DSTAND_IN_WITHOUT_V3"]}
SYSTEM_HEADERS = ("/usr/local/cuda/include/nvml.h", "/usr/include/nvml.h")


class BuildError(Exception):
    """gcc failed; the message holds its output."""


def find_header() -> Path | None:
    """nvml.h from an installed nvidia-nvml-dev (any CUDA major), else a system one."""
    for entry in sys.path:
        base = Path(entry or ".") / "nvidia"
        if base.is_dir():
            found = sorted(base.glob("*/include/nvml.h"))
            if found:
                return found[-1]
    return next((Path(p) for p in SYSTEM_HEADERS if os.path.isfile(p)), None)


def compiler() -> str | None:
    return shutil.which("gcc") or shutil.which("cc")


def missing() -> str | None:
    """Why the library cannot be built here (a test's skip reason), or None."""
    if compiler() is None:
        return "no C compiler (gcc) to build the stand-in libnvidia-ml.so.1"
    if find_header() is None:
        return "no nvml.h to build the stand-in libnvidia-ml.so.1 against (pip install nvidia-nvml-dev)"
    return None


def build(out_dir: Path, variant: str = "full") -> Path:
    """The folder holding a built libnvidia-ml.so.1 of that variant (built once per inputs)."""
    cc, header = compiler(), find_header()
    if cc is None or header is None:
        raise BuildError(missing() or "cannot build")
    flags = VARIANTS[variant]
    digest = hashlib.sha256()
    for name in SOURCES + ("script.h", "stand_in.h"):
        digest.update((HERE / name).read_bytes())
    digest.update(header.read_bytes())
    digest.update(" ".join(flags).encode())
    folder = out_dir / f"{variant}-{digest.hexdigest()[:12]}"
    lib = folder / LIB_NAME
    if lib.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{LIB_NAME}.{os.getpid()}"  # then renamed: a concurrent build never sees half a file
    # No soname: a test that loads it by path must not make a later dlopen("libnvidia-ml.so.1")
    # in the same process find it (pynvml's loader, and "is there a driver here?" checks).
    cmd = [cc, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-fvisibility=hidden", *flags,
           f"-I{header.parent}", "-o", str(tmp),
           *(str(HERE / s) for s in SOURCES), "-lpthread"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise BuildError(f"{' '.join(cmd)}\n{res.stdout}{res.stderr}")
    os.replace(tmp, lib)
    return folder
