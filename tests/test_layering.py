"""Every module has a layer and imports only from its own layer or below; the core never imports
the shell, has no import cycles, and has no I/O or printing."""

import ast
import pathlib
import subprocess
import sys

import jaxdqn

PACKAGE = pathlib.Path(jaxdqn.__file__).parent
SHELL = {"jaxdqn.cli", "jaxdqn.cli.__main__", "jaxdqn.cli.commands", "jaxdqn.cli.documents", "jaxdqn.cli.folders",
         "jaxdqn.cli.info",
         "jaxdqn.cli.loop", "jaxdqn.cli.plot", "jaxdqn.cli.sweeps", "jaxdqn.cli.usage", "jaxdqn.trainer",
         "jaxdqn.results", "jaxdqn.resources", "jaxdqn.checkpoint", "jaxdqn.logging", "jaxdqn.distributed",
         "jaxdqn.hostenv", "jaxdqn.hostpool", "jaxdqn.hostrun", "jaxdqn.hostatari", "jaxdqn.hostagents"}
FORBIDDEN_IN_CORE = {"time", "logging", "os", "pathlib", "builtins"}
# The native library's loader reads its one switch (JAXDQN_CPU_KERNELS) and checks its file.
NATIVE_LOADER = {"jaxdqn.buffers.tree_kernels": {"os"}}


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}

# The layers of the team's DESIGN.md, lowest first. A module imports from its own layer or a lower
# one (the package facade ``jaxdqn`` aside). Every module must be listed: a new one is placed here
# on purpose.
LAYERS = {
    "L0 vocabulary": ["jaxdqn.types", "jaxdqn.errors", "jaxdqn.config", "jaxdqn.config.fields", "jaxdqn.config.sections",
                      "jaxdqn.config.dqn", "jaxdqn.rllib"],
    "L1 kernels": ["jaxdqn._platform", "jaxdqn.atari", "jaxdqn.buffers", "jaxdqn.buffers.dispatch",
                   "jaxdqn.buffers.segment_tree", "jaxdqn.buffers.tree_kernels", "jaxdqn.buffers.uniform_replay",
                   "jaxdqn.buffers.prioritized_replay", "jaxdqn.buffers.sequence", "jaxdqn.buffers.frames",
                   "jaxdqn.losses", "jaxdqn.networks", "jaxdqn.exploration", "jaxdqn.envs", "jaxdqn.multiagent.envs"],
    "L2 steps": ["jaxdqn.learner", "jaxdqn.rollout", "jaxdqn.evaluation", "jaxdqn.policy", "jaxdqn.worker",
                 "jaxdqn.multiagent", "jaxdqn.multiagent.worker"],
    "L3 composition": ["jaxdqn.schedule", "jaxdqn.metrics", "jaxdqn.plan", "jaxdqn.sweep", "jaxdqn.parallel"],
    "L4 shell": sorted(SHELL),
}
LAYER_OF = {m: i for i, (_, modules) in enumerate(LAYERS.items()) for m in modules}


def test_every_module_has_a_layer_and_imports_only_down():
    assert set(LAYER_OF) == set(MODULES) - {"jaxdqn"}, "classify every module in LAYERS"
    names = list(LAYERS)
    for name, path in MODULES.items():
        if name == "jaxdqn":
            continue
        for imported in imports_of(path) & set(LAYER_OF):
            assert LAYER_OF[imported] <= LAYER_OF[name], (
                f"{name} ({names[LAYER_OF[name]]}) imports {imported} ({names[LAYER_OF[imported]]}), a higher layer")


def test_core_does_not_import_the_shell_or_do_io():
    # The package namespace (jaxdqn/__init__.py) is the public facade: it may hand out the shell's
    # Trainer, lazily (PEP 562), so importing any core module never loads the shell.
    core = {name: path for name, path in MODULES.items() if name not in SHELL and name != "jaxdqn"}
    assert "jaxdqn.buffers.prioritized_replay" in core
    for name, path in core.items():
        imported = imports_of(path)
        assert not imported & SHELL, f"{name} imports the shell: {imported & SHELL}"
        allowed = NATIVE_LOADER.get(name, set())
        assert not {i.split(".")[0] for i in imported} & (FORBIDDEN_IN_CORE - allowed), f"{name} does I/O"
        calls = [n.func.id for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        assert "print" not in calls and "open" not in calls, f"{name} prints or opens files"


def test_no_import_cycles():
    graph = {name: {m for m in imports_of(path) if m in MODULES and m != name} for name, path in MODULES.items()}
    # A package importing its own submodules is the usual re-export, not a cycle.
    for name in graph:
        graph[name] = {m for m in graph[name] if not m.startswith(name + ".")}
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in graph[node]:
            if state.get(nxt) == "open":
                raise AssertionError(f"import cycle: {' -> '.join(stack + [nxt])}")
            if nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for name in graph:
        if name not in state:
            visit(name, [name])


def test_the_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "jaxdqn.cli", "info"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"jaxdqn {jaxdqn.__version__}" in out.stdout and "backend" in out.stdout
    from jaxdqn.buffers import tree_kernels

    assert f"fused CPU tree kernels: {'built' if tree_kernels.available() else 'not built'}" in out.stdout
    out = subprocess.run([sys.executable, "-m", "jaxdqn.cli", "--version"], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == jaxdqn.__version__


def test_importing_the_core_does_not_load_the_shell():
    code = ("import sys, jaxdqn, jaxdqn.plan; assert not {'jaxdqn.trainer', 'jaxdqn.cli', 'jaxdqn.checkpoint'} "
            "& set(sys.modules), sorted(m for m in sys.modules if m.startswith('jaxdqn'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert jaxdqn.Trainer.__module__ == "jaxdqn.trainer"


def test_modules_and_functions_stay_readable():
    """No module of the package over 450 lines, no function over 100: a subject per module, a
    step per function."""
    for name, path in MODULES.items():
        source = path.read_text()
        assert len(source.splitlines()) <= 450, f"{name} has {len(source.splitlines())} lines"
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                assert length <= 100, f"{name}.{node.name} has {length} lines"
