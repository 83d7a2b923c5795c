"""The README is a front door: short, two set-up commands, links that resolve."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_readme_is_short_and_has_the_two_setup_commands():
    assert len(README.splitlines()) <= 200
    block = re.search(r"\*\*Set up and go\*\*.*?```bash\n(.*?)```", README, flags=re.S).group(1)
    commands = [line for line in block.splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[0].startswith('pip install -e ".[cli]" && jaxdqn train')
    assert commands[1].startswith('pip install -e ".[test]" && python -m pytest')
    assert commands[1].split("#")[0].strip() in (ROOT / ".ci" / "run").read_text()


def test_every_local_link_of_the_readme_and_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#]+)\)", page.read_text()):
            if target.startswith("http"):
                continue
            assert (page.parent / target).exists(), f"{page.name} links to a missing {target}"
    for name in re.findall(r"docs/[a-z_]+\.md", README):
        assert (ROOT / name).exists(), name
