"""The manual holds together (issue 28): README.md is what a newcomer reads in five minutes (300
lines at most) and the index of docs/; every page of docs/ is linked from it; every relative link
of README.md and docs/*.md reaches a file, and its `#anchor` a heading there as GitHub names it.
And the README's training loop runs as written, under mpwatch, with a value set and a checkpoint
asked while it runs."""
import re
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, ROOT, wait_for
from tests.manual import DOCS, README, anchors, links, pages, slug

README_LINES = 300


def _external(target: str) -> bool:
    return re.match(r"[a-z][a-z0-9+.-]*:", target) is not None  # https:, mailto:, ...


def _resolve(page: Path, target: str) -> tuple[Path, str]:
    path, _, anchor = target.partition("#")
    return (page if not path else (page.parent / path).resolve()), anchor


def test_the_readme_is_read_in_five_minutes():
    lines = README.read_text().count("\n")
    assert lines <= README_LINES, f"README.md has {lines} lines: move the rest to docs/"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {_resolve(README, t)[0] for t in links(README.read_text()) if not _external(t)}
    unlinked = [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked]
    assert list(DOCS.glob("*.md")), "docs/ has no page"
    assert not unlinked, f"docs pages the README's index does not link: {unlinked}"


def broken(page: Path, root: Path = ROOT) -> list[str]:
    """The relative links of a page that reach no file under root, or no heading of it."""
    out = []
    for target in links(page.read_text()):
        if _external(target):
            continue
        path, anchor = _resolve(page, target)
        if not path.is_relative_to(root) or not path.exists():
            out.append(f"{target}: no such file")
        elif anchor and (path.suffix != ".md" or anchor not in anchors(path.read_text())):
            out.append(f"{target}: no heading #{anchor} in {path.name}")
    return out


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert page.read_text().startswith("# "), f"{page.name} does not open with its title"
    assert not broken(page), broken(page)


def test_a_missing_page_or_heading_is_a_broken_link(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# B\n\n## The replay: mpwatch show\n")
    page = tmp_path / "a.md"
    page.write_text("# A\n[ok](docs/b.md#the-replay-mpwatch-show) [top](#a) [web](https://x.org/y.md)\n"
                    "[gone](docs/c.md) [no heading](docs/b.md#the-replay) [self](#b) [out](../../etc)\n"
                    "`[in code](docs/d.md)`\n")
    assert broken(page, tmp_path) == ["docs/c.md: no such file",
                                      "docs/b.md#the-replay: no heading #the-replay in b.md",
                                      "#b: no heading #b in a.md", "../../etc: no such file"]


def test_anchors_are_named_as_github_names_them():
    assert slug("The replay: mpwatch show") == "the-replay-mpwatch-show"
    assert slug("torchrun's flags and environment") == "torchruns-flags-and-environment"
    assert slug("When something fails (as torchrun does)") == "when-something-fails-as-torchrun-does"
    assert slug("`MPWATCH_AUTO` and [its page](x.md)") == "mpwatch_auto-and-its-page"
    assert anchors("# A\n## B\n```\n# not a heading\n```\n## B\n") == {"a", "b", "b-1"}
    assert links("[a](x.md) `[b](y.md)`\n```\n[c](z.md)\n```\n[d\ne](w.md#f)") == ["x.md", "w.md#f"]


def test_the_readme_training_loop_runs_as_written(headless):
    run = headless(FIXTURES / "readme_loop.py", "0.05", n=2)
    run.wait_event("tunable_declared", timeout=60)
    wait_for(lambda: all((w["step"] or 0) >= 3 and w["polls_checkpoint"] for w in run.status()["workers"]),
             timeout=120, what="both ranks in the loop")
    said = run.ctl("set", "lr", "0.001").stdout
    m = re.match(r"lr = 0.001 from step (\d+) on ranks 0-1 \(now 0.0003\)", said)
    assert m, said
    run.wait_event("tunable_applied", timeout=60, count=2)
    said = run.ctl("checkpoint", "all").stdout
    m = re.match(r"checkpoint asked of ranks 0-1 at step (\d+)", said)
    assert m, said
    taken = run.wait_event("checkpoint_taken", timeout=60, count=2)
    [at] = {e["step"] for e in taken}
    for rank in (0, 1):
        wait_for(lambda r=rank: f"SAVED {at} lr=0.001" in run.log(r), timeout=30, what=f"rank {rank}'s save")
        assert run.log(rank).count("SAVED") == 1
    for w in run.status()["workers"]:
        assert w["steps_from"] == "report" and w["loss"] == 0.5 and "data" in w["phases"], w
