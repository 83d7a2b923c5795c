"""The Python examples run: the README's quickstart at a tiny size (default suite); those of
docs/variants.md (recurrent and multi-agent DQN) and docs/design.md as written (slow suite)."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).parents[1]
VARIANTS = ROOT / "docs" / "variants.md"


def python_blocks(section: str, page: pathlib.Path = VARIANTS) -> list[str]:
    text = page.read_text()
    start = text.index(f"## {section}")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)


@pytest.mark.slow
@pytest.mark.parametrize("section", ["Recurrent DQN (sequence replay)", "Multi-agent DQN"])
def test_readme_examples_run(section):
    blocks = python_blocks(section)
    assert blocks, section
    for code in blocks:
        exec(compile(code, f"docs/variants.md: {section}", "exec"), {})


@pytest.mark.slow
@pytest.mark.parametrize("section", ["Replay buffers", "Learners", "Execution plan"])
def test_design_examples_run(section):
    blocks = python_blocks(section, ROOT / "docs" / "design.md")
    assert blocks, section
    for code in blocks:
        exec(compile(code, f"docs/design.md: {section}", "exec"), {})


def test_the_readme_python_quickstart_runs_at_a_tiny_size(tmp_path, monkeypatch):
    """The README's first Python block as written, with every ``DQNConfig`` it builds shrunk
    (small networks and buffer, 256-step iterations, at most 2048 env steps)."""
    import jaxdqn
    from jaxdqn import ModelConfig

    real = jaxdqn.DQNConfig
    built = []

    def tiny(**keys):
        small = dict(buffer_size=2000, learning_starts=64, timesteps_per_iteration=256, train_batch_size=16,
                     model=ModelConfig(fcnet_hiddens=(16,)), hiddens=(16,), evaluation_num_episodes=2)
        config = real(**{**small, **keys, "total_timesteps": min(keys.get("total_timesteps", 2048), 2048)})
        built.append(config)
        return config

    monkeypatch.setattr(jaxdqn, "DQNConfig", tiny)
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "README.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, flags=re.S)[0]
    namespace: dict = {}
    exec(compile(code, "README.md: quickstart", "exec"), namespace)
    assert len(built) == 2 and built[0].n_step == 3 and built[0].training_intensity == 16
    assert namespace["result"]["training_iteration"] == 10
    assert namespace["trainer"].iteration == 10 and (tmp_path / "ckpt").is_dir()
    assert namespace["reports"]["episode_reward_mean"].shape[0] == 8  # the 8 vmapped seeds
