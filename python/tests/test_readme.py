"""The README's Python examples run as written, from the repository's root: "From
Python"'s in order, and "The episode"'s trainer loop."""
import re

from conftest import REPO


def test_the_readme_python_examples_run(monkeypatch):
    text = (REPO / "README.md").read_text()
    section = text.split("## From Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 3
    monkeypatch.chdir(REPO)
    scope = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), scope)


def test_the_readme_episode_example_runs(monkeypatch):
    text = (REPO / "README.md").read_text()
    section = text.split("## The episode", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1
    monkeypatch.chdir(REPO)
    exec(compile(blocks[0], "README.md", "exec"), {})
