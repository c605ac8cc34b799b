"""The README's "From Python" examples run, in order, from the repository's root."""
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
