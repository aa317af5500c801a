"""The type stubs match the module: every stubbed class, method and property exists, every
public runtime name is stubbed, and the stubbed parameters are the runtime's."""

import ast
import inspect
import pathlib

import cudagraph
from cudagraph import _cudagraph

STUB = pathlib.Path(cudagraph.__file__).with_name("_cudagraph.pyi")


def stub_tree():
    return ast.parse(STUB.read_text())


def stub_classes():
    return {n.name: n for n in stub_tree().body if isinstance(n, ast.ClassDef)}


def test_every_public_runtime_name_is_stubbed():
    stubbed = {n.name for n in stub_tree().body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    stubbed |= {
        t.id
        for n in stub_tree().body
        if isinstance(n, (ast.AnnAssign, ast.Assign))
        for t in ([n.target] if isinstance(n, ast.AnnAssign) else n.targets)
        if isinstance(t, ast.Name)
    }
    runtime = {n for n in dir(_cudagraph) if not n.startswith("__") or n == "__version__"}
    missing = runtime - stubbed
    assert not missing, missing


def test_every_stubbed_member_exists_with_the_same_parameters():
    for name, cls in stub_classes().items():
        rt = getattr(_cudagraph, name)
        for item in cls.body:
            if not isinstance(item, ast.FunctionDef):
                continue
            if item.name == "__init__":
                target = rt
            else:
                assert hasattr(rt, item.name), f"{name}.{item.name}"
                target = getattr(rt, item.name)
                if item.name.startswith("__"):
                    continue  # Python's own protocol methods: their parameter names vary
            try:
                sig = inspect.signature(target)
            except (TypeError, ValueError):
                continue  # properties, slot wrappers
            stub_params = [a.arg for a in item.args.args + item.args.kwonlyargs]
            stub_params = [p for p in stub_params if p not in ("self", "cls")]
            rt_params = [p for p in sig.parameters if p not in ("self", "cls", "slf")]
            assert stub_params == rt_params, f"{name}.{item.name}: {stub_params} vs {rt_params}"


def test_the_package_ships_its_typing_marker():
    assert STUB.with_name("py.typed").exists()
    assert STUB.with_name("__init__.pyi").exists()
