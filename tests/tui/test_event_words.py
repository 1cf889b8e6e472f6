"""An event says what it is (issue 31): the end of a hang finding read "run alert" in the
events screen (and the replay's strip). The shared real 3-rank gloo run (tests/supervisor/
three_ranks.py: demo/hang.py, torch): rank 1 paused, its peers stall, the finding names it;
resumed, the finding ends, and its event reads "hang alert no longer holds: ranks 0,2 wait ... for
rank 1 ...", in the events screen of a TUI attached to the live run, at 80x24 and 160x48."""
from __future__ import annotations

import pytest

from tests.helpers import need
from tests.supervisor.three_ranks import act

need("torch", "demo/hang.py needs torch (the demo extra)")
pytestmark = [pytest.mark.torch]


@pytest.mark.timeout(600)  # the shared run's two acts, when it starts here
def test_the_end_of_a_hang_finding_says_which_alert_ended(three_ranks):
    act(three_ranks, three_ranks.paused)
    a = three_ranks.paused
    [ended] = [e for e in a.events if e["event"] == "alert" and e.get("kind") == "hang" and e.get("ended")]
    for size in ((80, 24), (160, 48)):
        lines = a.events_screen[size]
        if isinstance(lines, BaseException):
            raise lines
        assert not [ln for ln in lines if ln.rstrip().endswith(" alert")], lines
        said = [ln for ln in lines if "hang alert no longer holds: " in ln]
        assert len(said) == 1 and said[0].endswith(ended["message"]) and "for rank 1" in said[0], lines
