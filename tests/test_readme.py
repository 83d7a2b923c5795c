"""The Python examples of docs/variants.md (recurrent and multi-agent DQN), docs/design.md and the
README's quickstart run as written (slow suite)."""

import pathlib
import re

import pytest

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).parents[1]
VARIANTS = ROOT / "docs" / "variants.md"


def python_blocks(section: str, page: pathlib.Path = VARIANTS) -> list[str]:
    text = page.read_text()
    start = text.index(f"## {section}")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)


@pytest.mark.parametrize("section", ["Recurrent DQN (sequence replay)", "Multi-agent DQN"])
def test_readme_examples_run(section):
    blocks = python_blocks(section)
    assert blocks, section
    for code in blocks:
        exec(compile(code, f"docs/variants.md: {section}", "exec"), {})


@pytest.mark.parametrize("section", ["Replay buffers", "Learners", "Execution plan"])
def test_design_examples_run(section):
    blocks = python_blocks(section, ROOT / "docs" / "design.md")
    assert blocks, section
    for code in blocks:
        exec(compile(code, f"docs/design.md: {section}", "exec"), {})
