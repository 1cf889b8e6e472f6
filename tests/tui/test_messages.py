"""The TUI's own Textual messages are dataclasses (issue 18): their fields are declared, typed,
and shown by repr; made and handled as before (the TUI tests post and handle each of them)."""
import dataclasses
import importlib
import pkgutil

from textual.message import Message

import mpwatch.tui


def own_messages() -> list[type[Message]]:
    found = {}
    for mod in pkgutil.walk_packages(mpwatch.tui.__path__, "mpwatch.tui."):
        for obj in vars(importlib.import_module(mod.name)).values():
            for cls in [obj, *vars(obj).values()] if isinstance(obj, type) else []:
                if isinstance(cls, type) and issubclass(cls, Message) \
                        and cls.__module__.startswith("mpwatch"):
                    found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return list(found.values())


def test_every_message_of_the_tui_is_a_dataclass():
    messages = own_messages()
    assert len(messages) >= 9
    assert [m.__qualname__ for m in messages if not dataclasses.is_dataclass(m)] == []


def test_a_message_keeps_its_fields_and_its_handler_name():
    from mpwatch.tui.actions import ActionDone
    from mpwatch.tui.widgets.worker_table import WorkerTable

    done = ActionDone("paused rank 0", "information")
    assert (done.text, done.severity, done.then) == ("paused rank 0", "information", None)
    assert "paused rank 0" in repr(done) and done.time > 0  # Message's own fields set too
    assert WorkerTable.RowSelected("3").key == "3"
    assert WorkerTable.RowSelected.handler_name == "on_worker_table_row_selected"
