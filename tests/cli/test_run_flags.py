"""The run command's flags, declared once each (cli.args.FLAGS): every torchrun flag takes its
default from its PET_* variable as torchrun names it, a flag on the command line beats it, and
every relayed flag reaches a supervisor started apart with the value it had."""
from __future__ import annotations

import pytest

from mpwatch.cli.args import FLAGS, relayed_flags, run_parser

# a value of each torchrun flag, as typed
TYPED = {"nprocs": "3", "max_restarts": "2", "role": "trainer", "log_dir": "/tmp/logs",
         "shutdown_timeout": "7", "nnodes": "1:4", "node_rank": "1", "master_addr": "10.0.0.1",
         "master_port": "29501",
         "rdzv_backend": "c10d", "rdzv_endpoint": "head:29400", "rdzv_id": "job9",
         "rdzv_conf": "join_timeout=60,is_host=1", "local_addr": "127.0.0.2", "preload": "transformers"}
# another value of each, for the flag that beats its variable
OTHER = {"nprocs": "5", "max_restarts": "0", "role": "r2", "log_dir": "/tmp/l2", "shutdown_timeout": "1",
         "nnodes": "2", "node_rank": "0", "master_addr": "h2", "master_port": "29502",
         "rdzv_backend": "static",
         "rdzv_endpoint": "h2:1", "rdzv_id": "j2", "rdzv_conf": "a=b", "local_addr": "h3"}
PET = [f for f in FLAGS if f.env]


def test_every_torchrun_variable_is_named_as_torchrun_names_it():
    """torch's argparse_util names the variable PET_ and the flag's longest spelling."""
    assert len(PET) == 19
    for f in PET:
        assert f.env == "PET_" + f.names[-1].lstrip("-").upper().replace("-", "_"), f.names


@pytest.mark.parametrize("flag", PET, ids=[f.env for f in PET])
def test_a_pet_variable_is_the_default_and_the_flag_beats_it(flag):
    switch = flag.kw.get("action") == "store_true"
    typed = "1" if switch else TYPED[flag.dest]
    from_flag = run_parser({}).parse_args([flag.names[-1], *([] if switch else [typed]), "train.py"])
    from_env = run_parser({flag.env: typed}).parse_args(["train.py"])
    assert getattr(from_env, flag.dest) == getattr(from_flag, flag.dest) != getattr(
        run_parser({}).parse_args(["train.py"]), flag.dest)
    if switch:
        assert getattr(run_parser({flag.env: "0"}).parse_args(["train.py"]), flag.dest) is False
        return
    beaten = run_parser({flag.env: typed}).parse_args([flag.names[-1], OTHER[flag.dest], "train.py"])
    assert getattr(beaten, flag.dest) == getattr(run_parser({}).parse_args(
        [flag.names[-1], OTHER[flag.dest], "train.py"]), flag.dest) != getattr(from_env, flag.dest)


def test_a_preload_is_a_module_name_or_one_line_and_exit_code_2(tmp_path):
    from tests.helpers import mpwatch, one_line_error

    script = tmp_path / "train.py"
    script.write_text("print('never')\n")
    for bad in ("os;rm", "", "a..b", "1mod"):
        one_line_error(mpwatch("--headless", "--preload", bad, script), "--preload: not a module name")


def test_every_relayed_flag_reaches_the_supervisor_with_its_value():
    argv = []
    for f in FLAGS:
        if f.relay:
            switch = f.kw.get("action") == "store_true"
            argv += [f.names[-1]] if switch else [f.names[-1], TYPED[f.dest]]
            if f.kw.get("action") == "append":  # a repeatable flag: each of its values travels
                argv += [f.names[-1], "timm.models"]
    ns = run_parser({}).parse_args([*argv, "train.py"])
    again = run_parser({}).parse_args([*relayed_flags(ns), "train.py"])
    relayed = [f.dest for f in FLAGS if f.relay]
    assert len(relayed) == 19 and again.preload == ["transformers", "timm.models"]
    assert {d: getattr(again, d) for d in relayed} == {d: getattr(ns, d) for d in relayed}
    assert relayed_flags(run_parser({}).parse_args(["train.py"])) == []  # defaults stay home
