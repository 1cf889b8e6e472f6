"""What the forkserver preloads (supervisor.preload.detect), read from the sources alone: torch
where every run of the script imports it (at its top, in a `try`, under its main guard, or in one
of its own modules it imports so), never where a run may not (a condition, a function); -m's
module found without importing its package; bounded, regular files only."""
from __future__ import annotations

import os

import pytest

from mpwatch.supervisor.options import Options
from mpwatch.supervisor.preload import detect


def opts(tmp_path, script, **kw) -> Options:
    return Options(script=str(script), args=[], nprocs=1, cwd=str(tmp_path), **kw)


@pytest.mark.parametrize("source, preloaded", [
    ("import torch\n", True),
    ("from torch import nn\n", True),
    ("import torch.distributed as dist\n", True),
    ("import lightning as L\n", True),
    ("try:\n    import torch\nexcept ImportError:\n    torch = None\n", True),
    ("def main():\n    pass\nif __name__ == '__main__':\n    import transformers\n    main()\n", True),
    ("import os\nif os.environ.get('GPU'):\n    import torch\n", False),
    ("def main():\n    import torch\n", False),
    ("import numpy, json\n", False),
    ("import torchy\n", False),
    ("def (\n", False),
])
def test_torch_is_preloaded_where_every_run_imports_it(tmp_path, source, preloaded):
    (tmp_path / "train.py").write_text(source)
    assert detect.imports_torch(opts(tmp_path, "train.py")) is preloaded


@pytest.mark.parametrize("source, follows", [
    ("import torch\ndef main():\n    opt = torch.optim.SGD(net.parameters(), lr=0.1)\n", True),
    ("from torch.optim import AdamW\n", True),
    ("from torch import optim\n", True),
    ("import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n", True),
    ("import torch\nmodel = torch.compile(model)\n", True),
    ("import lightning as L\n", True),
    ("from transformers import Trainer\n", True),
    ("import torch\nprint(torch.ones(2).sum())\n", False),  # no optimizer, no DDP: nothing imports it
    ("import torch, torchvision\nmodel = torchvision.models.resnet18().eval()\n", False),
    ("import torch as th\nmodel = th.compile(model)\n", True),
    ("from torch import compile\nmodel = compile(model)\n", True),
    # compile that is not torch's builds no model: a regex, the builtin, another module's
    ("import re, torch\nSTEP = re.compile(r'step (\\d+)')\n", False),
    ("import torch\ncode = compile('1 + 1', '<s>', 'eval')\n", False),
    ("import torch\nfrom re import compile\nSTEP = compile('step')\n", False),
])
def test_torchs_compiler_front_end_follows_where_the_sources_build_what_imports_it(tmp_path, source, follows):
    """torch._dynamo, which torch imports at a worker's first optimizer, DDP model or torch.compile,
    is preloaded after torch where the script (or a module of its own) names one, or imports a
    framework that trains; an inference script's forkserver does not pay for it."""
    (tmp_path / "model.py").write_text(source)
    (tmp_path / "train.py").write_text("import model\n")
    assert detect.builds_models(opts(tmp_path, "train.py")) is follows


def test_the_scripts_own_modules_are_read_too(tmp_path):
    (tmp_path / "model.py").write_text("import torch.nn as nn\n")
    (tmp_path / "train.py").write_text("from model import Net\n")
    assert detect.imports_torch(opts(tmp_path, "train.py"))
    (tmp_path / "model.py").write_text("def net():\n    import torch\n")
    assert not detect.imports_torch(opts(tmp_path, "train.py"))


def test_a_module_is_found_without_importing_its_package(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise SystemExit('a package imported in the supervisor')\n")
    (pkg / "train.py").write_text("from .model import Net\n")
    (pkg / "model.py").write_text("import torch\n")
    (pkg / "__main__.py").write_text("from . import model\n")
    assert detect.imports_torch(opts(tmp_path, "pkg.train", launch="module"))
    assert detect.imports_torch(opts(tmp_path, "pkg", launch="module"))  # python -m pkg: its __main__
    assert not detect.imports_torch(opts(tmp_path, "pkg.nothing_here", launch="module"))


def test_only_regular_files_of_bounded_size_are_read(tmp_path):
    os.mkfifo(tmp_path / "fifo.py")  # opened without blocking, never read
    assert not detect.imports_torch(opts(tmp_path, "fifo.py"))
    (tmp_path / "big.py").write_text("import torch\n" + "#" * detect.MAX_BYTES)
    assert not detect.imports_torch(opts(tmp_path, "big.py"))


def test_what_is_asked_and_what_cannot_be(tmp_path):
    (tmp_path / "train.py").write_text("import json\n")
    assert detect.modules(opts(tmp_path, "train.py", preload=["json", "csv", "json"])) == (["json", "csv"], None)
    assert detect.modules(opts(tmp_path, "train.py", preload=["json"], preload_on=False)) == ([], None)
    mods, why = detect.modules(opts(tmp_path, "/bin/true", preload=["json"], launch="exec"))
    assert mods == [] and why is not None and "--no-python" in why
    assert detect.modules(opts(tmp_path, "/bin/true", launch="exec")) == ([], None)  # nothing asked: nothing said
