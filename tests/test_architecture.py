"""The package's shape: no import circle (imports inside functions included), every import going down the layers of
``LAYERS`` as ``MAY_IMPORT`` allows, errors in a leaf module, training on top, ``python -m poslab`` the same as the
``poslab`` command."""

from __future__ import annotations

import ast
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


#: the layers, bottom up; an entry names a module, or a package and everything under it
LAYERS: dict[str, tuple[str, ...]] = {
    # leaf helpers: no poslab import but each other's (settings reads passkey_settings, plotting fonts and io)
    "leaf": (
        "poslab",  # the package's own __init__ only
        "poslab.errors",
        "poslab.io",
        "poslab.rng",
        "poslab.settings",
        "poslab.passkey_settings",
        "poslab.yaml_values",
        "poslab.targets",
        "poslab.overrides",
        "poslab.fonts",
        "poslab.plotting",
        "poslab.runtime",
        "poslab.loggers",
        "poslab.resources",
    ),
    "encodings": ("poslab.encodings",),
    "model": ("poslab.model",),
    "datamodules": ("poslab.datamodules",),
    "lightning_modules": ("poslab.lightning_modules",),
    # a run on disk: its files, lock, checkpoints, results read back, job folders, local multiruns
    "runs": ("poslab.runs",),
    # what checks or builds a config before and around training; what Hydra calls
    "checks": (
        "poslab.checks",
        "poslab.config",
        "poslab.precheck",
        "poslab.extension",
        "poslab.resolvers",
        "poslab.hydra_callbacks",
        "poslab.builders",
        "poslab.callbacks",
        "poslab.memory",
    ),
    "training": ("poslab.training",),
    "analysis": ("poslab.analysis",),  # reads finished runs; never trains
    "cli": ("poslab.cli", "poslab.__main__"),
}
LEAF = {"leaf"}
#: which layers each layer's modules may import (its own included). No exceptions: an edge that crosses is moved.
MAY_IMPORT: dict[str, set[str]] = {
    "leaf": LEAF,
    "encodings": LEAF | {"encodings"},
    "model": LEAF | {"encodings", "model"},
    "datamodules": LEAF | {"datamodules"},  # preparing data loads no model
    "lightning_modules": LEAF | {"model", "datamodules", "lightning_modules"},  # never runs, launching, analysis
    "runs": LEAF | {"runs"},
    "checks": LEAF | {"encodings", "model", "datamodules", "runs", "checks"},
    "training": LEAF | {"encodings", "model", "datamodules", "lightning_modules", "runs", "checks", "training"},
    "analysis": LEAF | {"encodings", "model", "datamodules", "runs", "checks", "analysis"},
    "cli": LEAF | {"encodings", "checks", "analysis", "cli"},
}


def layer_of(name: str) -> str | None:
    for layer, entries in LAYERS.items():
        if any(name == entry or (entry != "poslab" and name.startswith(entry + ".")) for entry in entries):
            return layer
    return None


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
    planted = {**GRAPH, "poslab.errors": GRAPH["poslab.errors"] | {"poslab.training"}}
    cycle = find_cycle(planted)
    assert cycle is not None and "poslab.errors" in cycle and "poslab.training" in cycle


def test_the_graph_sees_imports_inside_functions():
    # poslab.cli imports the analyses inside its command branches
    assert "poslab.analysis.hrope.report" in GRAPH["poslab.cli"]
    assert {"poslab.encodings.alibi", "poslab.encodings.rope"} <= GRAPH["poslab.encodings"]


def test_errors_are_a_leaf_and_training_is_on_top():
    assert GRAPH["poslab.errors"] == set()
    importers = sorted(name for name, targets in GRAPH.items() if "poslab.training" in targets)
    assert importers == [], f"poslab.training is imported by {importers}; only train.py may import it"


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
