"""The package's shape: no import circle (imports inside functions included), every import going down the layers of
``LAYERS`` as ``MAY_IMPORT`` allows, errors in a leaf module, training on top, ``python -m poslab`` the same as the
``poslab`` command."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "poslab"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def imported_modules(name: str) -> set[str]:
    """The poslab modules ``name`` imports anywhere in its file (module level or inside functions): the most
    specific module each import names. A package ``__init__`` that imports its folder's modules dynamically
    (``importlib.import_module``) imports all of them."""
    tree = ast.parse(MODULES[name].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = name if is_package(name) else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and is_package(name)
        ):
            targets = [m for m in MODULES if m.rpartition(".")[0] == name]
        else:
            continue
        found |= {t for t in targets if t in MODULES and t != name}
    return found


GRAPH = {name: imported_modules(name) for name in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for child in sorted(graph[node]):
            if state.get(child) == 1:
                return path[path.index(child) :] + [child]
            if child not in state and (cycle := visit(child)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


#: the layers, bottom up; an entry names a module, or a package and everything under it (the most specific entry
#: that names a module decides its layer: ``poslab.running.training`` is "training", the rest of running "running")
LAYERS: dict[str, tuple[str, ...]] = {
    # the foundation: errors, atomic files, and what a setting is and may be
    "foundation": ("poslab", "poslab.errors", "poslab.io", "poslab.config"),
    "encodings": ("poslab.encodings",),
    "model": ("poslab.model",),
    "datamodules": ("poslab.datamodules",),
    "lightning_modules": ("poslab.lightning_modules",),
    # a run on disk: its files, lock, checkpoints, results read back, job folders, local multiruns
    "runs": ("poslab.runs",),
    # composing and checking a run's config, building its parts, what Hydra calls
    "running": ("poslab.running",),
    "training": ("poslab.running.training",),
    "analysis": ("poslab.analysis",),  # reads finished runs; never trains
    "cli": ("poslab.cli", "poslab.__main__"),
}
FOUNDATION = {"foundation"}
#: which layers each layer's modules may import (its own included). No exceptions: an edge that crosses is moved.
MAY_IMPORT: dict[str, set[str]] = {
    "foundation": FOUNDATION,
    "encodings": FOUNDATION | {"encodings"},
    "model": FOUNDATION | {"encodings", "model"},
    "datamodules": FOUNDATION | {"datamodules"},  # preparing data loads no model
    "lightning_modules": FOUNDATION | {"model", "datamodules", "lightning_modules"},  # never runs, launching, analysis
    "runs": FOUNDATION | {"runs"},
    "running": FOUNDATION | {"encodings", "model", "datamodules", "lightning_modules", "runs", "running"},
    "training": FOUNDATION | {"encodings", "model", "datamodules", "lightning_modules", "runs", "running", "training"},
    "analysis": FOUNDATION | {"encodings", "model", "datamodules", "runs", "running", "analysis"},
    "cli": FOUNDATION | {"encodings", "running", "analysis", "cli"},
}
#: what ``poslab/`` holds at its top level: a package per layer, and the few modules that are a layer alone
TOP_LEVEL = {
    "__init__.py": "foundation",
    "__main__.py": "cli",
    "cli.py": "cli",
    "errors.py": "foundation",
    "io.py": "foundation",
    "config": "foundation",
    "encodings": "encodings",
    "model.py": "model",
    "datamodules": "datamodules",
    "lightning_modules": "lightning_modules",
    "runs": "runs",
    "running": "running",
    "analysis": "analysis",
}


def layer_of(name: str) -> str | None:
    matches = [
        (len(entry), layer)
        for layer, entries in LAYERS.items()
        for entry in entries
        if name == entry or (entry != "poslab" and name.startswith(entry + "."))
    ]
    return max(matches)[1] if matches else None


def crossing_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import ``MAY_IMPORT`` does not allow, as ``importer -> imported (file): layer may not import layer``."""
    crossings = []
    for name in sorted(graph):
        for target in sorted(graph[name]):
            source_layer, target_layer = layer_of(name), layer_of(target)
            if target_layer not in MAY_IMPORT[source_layer]:
                path = MODULES[name].relative_to(ROOT)
                crossings.append(f"{name} -> {target} ({path}): {source_layer} may not import {target_layer}")
    return crossings


def test_the_top_level_shows_the_layers():
    entries = {p.name for p in PACKAGE.iterdir() if p.name != "__pycache__" and not p.name.endswith(".egg-info")}
    extra, missing = sorted(entries - set(TOP_LEVEL)), sorted(set(TOP_LEVEL) - entries)
    assert not extra and not missing, (
        f"poslab/ holds {extra} beyond TOP_LEVEL and lacks {missing}: put a new module in the package of its layer "
        "(docs/architecture.md)"
    )
    for entry, layer in TOP_LEVEL.items():
        name = module_name(PACKAGE / entry) if entry.endswith(".py") else f"poslab.{entry}"
        assert layer_of(name) == layer, f"poslab/{entry} is in layer {layer_of(name)}, not {layer}"


def test_every_module_has_a_layer():
    unplaced = sorted(name for name in MODULES if layer_of(name) is None)
    assert unplaced == [], f"modules in no layer of LAYERS: {unplaced}"


def test_every_import_goes_down_the_layers():
    crossings = crossing_imports(GRAPH)
    assert crossings == [], "imports crossing the layers:\n" + "\n".join(crossings)


def test_the_layer_check_names_a_planted_crossing():
    planted = {**GRAPH, "poslab.model": GRAPH["poslab.model"] | {"poslab.runs.launching"}}
    assert crossing_imports(planted) == [
        "poslab.model -> poslab.runs.launching (poslab/model.py): model may not import runs"
    ]


def test_the_package_has_no_import_circle():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_planted_circle():
    planted = {**GRAPH, "poslab.errors": GRAPH["poslab.errors"] | {"poslab.running.training"}}
    cycle = find_cycle(planted)
    assert cycle is not None and "poslab.errors" in cycle and "poslab.running.training" in cycle


def test_the_graph_sees_imports_inside_functions():
    # poslab.cli imports the analyses inside its command branches
    assert "poslab.analysis.hrope.report" in GRAPH["poslab.cli"]
    assert {"poslab.encodings.alibi", "poslab.encodings.rope"} <= GRAPH["poslab.encodings"]


def test_errors_are_a_leaf_and_training_is_on_top():
    assert GRAPH["poslab.errors"] == set()
    importers = sorted(name for name, targets in GRAPH.items() if "poslab.running.training" in targets)
    assert importers == [], f"poslab.running.training is imported by {importers}; only train.py may import it"


def test_preparing_data_does_not_load_the_encodings():
    code = (
        "import sys; import poslab.datamodules.corpora, poslab.errors; "
        "print(any(m.startswith('poslab.encodings') for m in sys.modules), 'torch.nn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False"


@pytest.mark.parametrize("args", [["--help"], ["analyze", "--help"], ["report", "--help"]])
def test_python_m_poslab_is_the_poslab_command(args):
    module = subprocess.run([sys.executable, "-m", "poslab", *args], capture_output=True, text=True)
    assert module.returncode == 0, module.stderr
    from poslab.cli import build_parser

    assert module.stdout.split()[:2] == ["usage:", "poslab"]
    if args == ["--help"]:
        for command in build_parser()._subparsers._group_actions[0].choices:
            assert command in module.stdout


def test_render_layers_load_no_torch_and_the_corpus_compute_layer_no_matplotlib():
    """``--from SUMMARY`` re-renders without a model: the hRoPE and corpus render layers import no torch; the
    corpus statistics' compute layer imports no matplotlib (only its render layer draws; the hRoPE compute layer
    gets it through Lightning, which loads the run)."""
    code = (
        "import sys; import poslab.analysis.hrope.render, poslab.analysis.corpus_render; "
        "print('torch' in sys.modules); "
        "import poslab.analysis.corpus_statistics; print('matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv", [["encoding=rope", "encoding.base=-5"], ["model.attention=flex", "encoding=fire"]], ids=["range", "path"]
)
def test_an_encodings_refusal_comes_before_lightning_loads(argv, tmp_path):
    """The encodings' check (train.py's pre-check, stage 3) imports torch, not a datamodule: Lightning, seconds more
    before the message, loads only for a config that passes."""
    result = precheck_in_a_fresh_process(argv, tmp_path)
    assert result.stdout.split() == ["exit", "2", "False", "False"], (result.stdout, result.stderr[-1500:])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["task=flip_flop", "task.p_ignore=0.5"], "sum to 1"),
        (["task=lag", "model.d_model=16384", "model.n_layers=64"], "needs at least"),
    ],
    ids=["task setting", "memory"],
)
def test_a_synthetic_tasks_refusal_comes_before_lightning_loads(argv, named, tmp_path):
    """A synthetic task's own settings (stage 3: ``validated_task``, the datamodule's own check, called without
    the datamodule) and its memory estimate are refused before Lightning loads."""
    result = precheck_in_a_fresh_process(argv, tmp_path)
    assert result.stdout.split() == ["exit", "2", "False", "False"], (result.stdout, result.stderr[-1500:])
    assert named in result.stderr


def precheck_in_a_fresh_process(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """train.py's pre-check of ``argv`` in a new interpreter, so that this process's imports do not count; it
    prints ``exit <status> <lightning loaded> <poslab.datamodules.synthetic loaded>``."""
    probe = (
        "import sys\n"
        "from poslab.running.precheck import check_command_line\n"
        "try:\n"
        f"    check_command_line({argv!r}, sources=True)\n"
        "except SystemExit as stop:\n"
        "    print('exit', stop.code, 'lightning' in sys.modules, 'poslab.datamodules.synthetic' in sys.modules)\n"
    )
    environment = {**os.environ, "POSLAB_LOG_DIR": str(tmp_path / "logs")}
    return subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120
    )
