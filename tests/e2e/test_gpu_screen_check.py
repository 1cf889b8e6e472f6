"""scripts/gpu-check's screen half (scripts/gpu_screen.py) where there is no GPU: the same
capture and comparison, on a real supervisor and real workers with the stand-in NVML library
(testing.libnvml) and scripted allocator views of issue #12's scenario (ranks 0 and 1 on
GPU 0), through tmux and through Textual's headless driver. On a GPU machine the script
runs demo/contention.py instead."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil

import pytest

from tests.helpers import ROOT, wait_for
from tests.libnvml import nvml_env
from tests.record import WORKER, cuda_two_gpus, nvml_two_gpus, unused_pid

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("gpu_screen_check")]  # one contended run, one lane

_spec = importlib.util.spec_from_file_location("gpu_screen", ROOT / "scripts" / "gpu_screen.py")
assert _spec is not None and _spec.loader is not None
gpu_screen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_screen)


@pytest.fixture(scope="module")
def contended_run(headless_module, tmp_path_factory, libnvml):
    """One run the three tests only read."""
    tmp_path = tmp_path_factory.mktemp("contended")
    cuda = tmp_path / "cuda.json"
    cuda.write_text(json.dumps(cuda_two_gpus()))
    env = nvml_env(libnvml, tmp_path, nvml_two_gpus(unused_pid()),
                   base=dict(os.environ, MPWATCH_SCRIPTED_CUDA=str(cuda), SLEEP="0.1", CHILD="0"))
    run = headless_module(WORKER, n=2, opts=["--gpu-interval", "0.5"], env=env)
    # The scenario's memory ramps up for its first 6 s (its last frame: GPU 0 at 93%): a screen
    # read during the ramp would be compared with a later status. The process list (each rank's
    # memory) is queried less often than the device: wait for one taken after the last frame.
    last = wait_for(lambda: (lambda g: g["ts"] if g and g["util_gpu"] == 93 else None)(gpu0(run)), 90,
                    interval=0.25, what="the scenario's last frame")
    want = wait_for(lambda: (lambda st: gpu_screen.expected(st) if (st["gpus"][0]["processes_ts"] or 0) > last
                             else None)(run.status()), 90, interval=0.25,
                    what="both ranks' final GPU memory and the collision in the status")
    return run, want


def gpu0(run) -> dict | None:
    gpus = run.status()["gpus"]
    return gpus[0] if gpus else None


def _check(run, how: str) -> None:
    env = dict(os.environ)

    def done(screen: str) -> bool:
        w = gpu_screen.expected(run.status())
        return w is not None and not gpu_screen.missing(screen, w)

    used, screen = gpu_screen.capture(run.run_dir, (120, 40), env, done, 90.0, how)
    want = gpu_screen.expected(run.status())
    assert want is not None
    assert not gpu_screen.missing(screen, want), f"read through {used}:\n{screen}"
    assert "util N/A" not in screen


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_screen_check_reads_the_collision_and_each_ranks_memory_through_tmux(contended_run):
    _check(contended_run[0], "tmux")


def test_the_screen_check_reads_them_through_the_headless_driver(contended_run):
    _check(contended_run[0], "headless")


def test_the_screen_check_fails_a_screen_without_them(contended_run):
    _, want = contended_run
    assert gpu_screen.missing("", want) == want
    no_row = "\n".join(want)  # every text, but the collision on no GPU row (no '%')
    assert gpu_screen.missing(no_row, want) == [f"{gpu_screen.COLLISION} on a GPU row"]
