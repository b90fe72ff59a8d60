"""A static check of a submitted repository state against the pristine project, before anything runs.

A repair of a synthesised bug changes expressions inside existing functions. What a forgery needs is something
else: new modules (a ``queue.py`` shadowing the standard library), code that runs at import time, and the
introspection and process machinery that reaches into the judge (``sys``, ``gc``, frames, ``ctypes``, threads,
signals, ``__globals__``/``__subclasses__`` walks, ``eval``/``exec``). This check refuses such a state with a
reason before the tests run; the runtime gatekeeper in :mod:`pivotgym_swe.judge_runner` stands behind it for
whatever the check cannot see (it is a static check of Python: a determined author can always write code it
does not recognise, which is why it is one layer of several, see docs/architecture.md).

Rules, each with the reason code a rejection carries:

* ``new_module`` / ``removed_module``: a ``.py`` file outside the tests was added or deleted (tests and
  test configuration are restored from the pristine copy anyway), or a bytecode/extension file was added;
* ``module_level_code``: a top-level statement (or a statement in a class body) that is not a ``def``/``class``,
  a docstring or an import was added or changed, or what runs when a ``def`` is executed changed: its
  decorators, defaults, argument or return annotations, type parameters;
* ``new_import``: a changed file imports a module its pristine version did not, and that module is one of the
  introspection/process/framework modules in :data:`FORBIDDEN_MODULES`;
* ``introspection``: a changed function uses a forbidden builtin (:data:`FORBIDDEN_NAMES`), a dunder attribute
  outside :data:`ALLOWED_DUNDERS`, an attribute named like an escape hatch (``sys``, ``modules``,
  ``f_back``...), a string naming a forbidden dunder, or ``getattr``/``setattr``/``delattr`` with a name that is
  not a plain literal;
* ``encoding``: a changed file declares a source encoding other than UTF-8 (PEP 263: ``# coding: utf-7`` turns
  what a UTF-8 reader takes for a comment into code), or changes its declaration;
* ``syntax``: a changed file does not parse; ``too_large``: it is over :data:`MAX_SOURCE_CHARS` characters.

Every file is parsed from its bytes, as the import system reads it (declared encoding, BOM), never from a
decoding of our own, so what the check compares is what Python will run.

Only what changed is judged: code the pristine project already has is never a reason for rejection.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

#: modules that reach the interpreter, other processes, the judge's framework or raw memory
FORBIDDEN_MODULES = frozenset(
    {
        "sys", "os", "posix", "gc", "inspect", "ctypes", "_ctypes", "threading", "_thread", "multiprocessing",
        "concurrent", "subprocess", "_posixsubprocess", "signal", "atexit", "weakref", "_weakref", "importlib",
        "imp", "pkgutil", "zipimport", "runpy", "site", "builtins", "types", "marshal", "pickle", "_pickle",
        "copyreg", "code", "codeop", "traceback", "faulthandler", "tracemalloc", "sysconfig", "io", "_io",
        "pathlib", "shutil", "tempfile", "glob", "fcntl", "mmap", "resource", "pty", "socket", "select",
        "selectors", "asyncio", "json", "pytest", "_pytest", "pluggy", "unittest", "doctest", "dis", "ast",
        "bdb", "pdb", "trace", "cProfile", "profile", "logging", "warnings", "contextvars", "_testcapi",
    }
)  # fmt: skip
#: builtins that evaluate code, reach namespaces or the file system
FORBIDDEN_NAMES = frozenset(
    {"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "breakpoint", "open", "input", "help"}
)
#: dunder attributes ordinary code uses; every other one (``__globals__``, ``__subclasses__``, ``__code__``,
#: ``__closure__``, ``__dict__``, ``__class__``, ``__builtins__``...) leads out of the function
ALLOWED_DUNDERS = frozenset(
    {
        "__init__", "__name__", "__qualname__", "__doc__", "__len__", "__iter__", "__next__", "__contains__",
        "__getitem__", "__setitem__", "__delitem__", "__call__", "__enter__", "__exit__", "__repr__", "__str__",
        "__hash__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__add__", "__sub__", "__mul__",
        "__bool__", "__reversed__", "__missing__", "__slots__", "__all__",
    }
)  # fmt: skip
#: attribute names that are escape hatches whatever object they are read from (``logging.sys``, ``frame.f_back``)
FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "sys", "os", "gc", "modules", "_getframe", "settrace", "setprofile", "f_back", "f_globals", "f_locals",
        "f_code", "tb_frame", "tb_next", "gi_frame", "cr_frame", "ag_frame", "co_code", "cell_contents",
        "_current_frames", "meta_path", "path_hooks", "_exit", "system", "popen", "fork", "audit",
        "addaudithook", "attrgetter", "methodcaller",
    }
)  # fmt: skip
_DUNDER = re.compile(r"__[A-Za-z][A-Za-z0-9_]{0,40}__")
BYTECODE_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".pth")
#: the largest changed source file the check parses (larger ones are refused: ``too_large``)
MAX_SOURCE_CHARS = 1_000_000


@dataclass(frozen=True)
class Rejection:
    """Why a state was refused: a reason code, the file and line, and a sentence an agent can act on."""

    code: str
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message} [{self.code}]"


def check_patch(workdir: Path, pristine: Path, is_test_path) -> list[Rejection]:
    """Every rule the state in ``workdir`` breaks against ``pristine`` (empty: nothing to refuse).

    ``is_test_path(rel)`` says which files are tests or test configuration (ignored: restored before judging).
    Symlinks are never followed; unreadable files count as changed and are judged on what can be read."""
    rejections: list[Rejection] = []
    ours, theirs = _python_files(workdir, is_test_path), _python_files(pristine, is_test_path)
    for rel in sorted(ours.keys() - theirs.keys()):
        kind = "bytecode or extension module" if rel.endswith(BYTECODE_SUFFIXES) else "module"
        rejections.append(Rejection("new_module", rel, 1, f"adds the {kind} {rel}; a fix changes existing source"))
    for rel in sorted(theirs.keys() - ours.keys()):
        if not rel.endswith(BYTECODE_SUFFIXES):
            rejections.append(Rejection("removed_module", rel, 1, f"removes {rel}; a fix changes existing source"))
    for rel in sorted(ours.keys() & theirs.keys()):
        if rel.endswith(".py"):
            new, old = _read(ours[rel]), _read(theirs[rel])
            if new != old:
                rejections += check_source(rel, new, old)
    return rejections


def check_source(rel: str, new: str | bytes, old: str | bytes) -> list[Rejection]:
    """The rules above for one changed file: ``new`` is the submitted source, ``old`` the pristine one (bytes as
    on disk, parsed as the import system decodes them; text is taken as UTF-8)."""
    new, old = _as_bytes(new), _as_bytes(old)
    if len(new) > MAX_SOURCE_CHARS:  # parsing is the host's time and memory (1 MB of literal: 1.2 s, 330 MB)
        return [Rejection("too_large", rel, 1, f"is {len(new):,} bytes; the limit is {MAX_SOURCE_CHARS:,}")]
    declared, was = declared_encoding(new), declared_encoding(old)
    if declared not in ("utf-8", "utf-8-sig") or declared != was:
        what = f"declares the source encoding {declared}" if declared != was else "changes its source encoding"
        return [Rejection("encoding", rel, 1, f"{what}; a fix keeps the file UTF-8 as it was")]
    try:
        new_tree = python_view(new)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return [Rejection("syntax", rel, getattr(exc, "lineno", 1) or 1, f"does not parse ({type(exc).__name__})")]
    try:
        old_tree = python_view(old)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        old_tree = ast.Module(body=[], type_ignores=[])
    out: list[Rejection] = []
    old_imports = _imports(old_tree)
    for stmt, module in _import_nodes(new_tree):
        if module not in old_imports and module.split(".")[0] in FORBIDDEN_MODULES:
            out.append(Rejection("new_import", rel, stmt.lineno, f"imports {module}, which a fix has no use for"))
    out += _module_level(rel, new_tree.body, old_tree.body)
    old_functions = _functions(old_tree)
    for name, fn in _functions(new_tree).items():
        before = old_functions.get(name)
        if before is not None and ast.dump(before) == ast.dump(fn):
            continue
        already = Counter(message for _node, message in _introspection(before)) if before is not None else Counter()
        for node, message in _introspection(fn):
            if already[message] > 0:  # the pristine function does this too: not the fix's doing
                already[message] -= 1
            else:
                out.append(Rejection("introspection", rel, getattr(node, "lineno", 1), message))
    return out


def _python_files(root: Path, is_test_path) -> dict[str, str]:
    found: dict[str, str] = {}
    stack = [root]
    while stack:  # iterative, no links followed: the tree is the agent's
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            rel = os.path.relpath(entry.path, root)
            if entry.is_symlink() or entry.name in ("__pycache__", ".git") or is_test_path(rel):
                continue
            if entry.is_dir(follow_symlinks=False):
                if rel.count(os.sep) < 64:
                    stack.append(Path(entry.path))
            elif entry.name.endswith((".py", *BYTECODE_SUFFIXES)):
                found[rel] = entry.path
    return found


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_SOURCE_CHARS + 1)
    except OSError:
        return b""


def _as_bytes(source: str | bytes) -> bytes:
    return source if isinstance(source, bytes) else source.encode("utf-8", "surrogatepass")


def python_view(source: bytes) -> ast.Module:
    """The module's syntax tree as the interpreter builds it from the file's bytes (declared encoding and BOM
    honoured): the check judges exactly the code that will run. Raises what ``compile`` raises."""
    return ast.parse(source)


def declared_encoding(source: bytes) -> str:
    """The encoding Python decodes ``source`` with (PEP 263 declaration or BOM; ``utf-8`` without either), or
    ``invalid`` for a declaration Python refuses."""
    try:
        return tokenize.detect_encoding(io.BytesIO(source).readline)[0]
    except SyntaxError:
        return "invalid"


def _import_nodes(tree: ast.AST) -> list[tuple[ast.stmt, str]]:
    out: list[tuple[ast.stmt, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node, node.module))
            out += [(node, f"{node.module}.{alias.name}") for alias in node.names]
    return out


def _imports(tree: ast.AST) -> set[str]:
    return {module for _node, module in _import_nodes(tree)}


def _signature(node: ast.stmt) -> str:
    """What of a ``def``/``class`` runs when it is executed: decorators, the arguments with their defaults and
    annotations, the return annotation, type parameters, bases and keywords (the body of a def does not)."""
    params = [ast.dump(p) for p in getattr(node, "type_params", ())]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        returns = ast.dump(node.returns) if node.returns is not None else ""
        return repr([ast.dump(d) for d in node.decorator_list] + [ast.dump(node.args), returns, *params])
    if isinstance(node, ast.ClassDef):
        parts = node.decorator_list + node.bases
        return repr([ast.dump(d) for d in parts] + [ast.dump(k) for k in node.keywords] + params)
    return ast.dump(node)


def _module_level(rel: str, new: list[ast.stmt], old: list[ast.stmt]) -> list[Rejection]:
    """Statements that run at import time and are not in the pristine body (recursing into class bodies)."""
    old_by_name = {
        getattr(n, "name", None): n for n in old if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    old_plain = {ast.dump(n) for n in old}
    out: list[Rejection] = []
    for node in new:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue  # a docstring
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            before = old_by_name.get(node.name)
            if before is None and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _inert_def(node):
                continue  # a new helper function: defining it runs nothing (its body is judged as changed)
            if before is None or type(before) is not type(node):
                out.append(Rejection("module_level_code", rel, node.lineno, f"adds the definition {node.name}"))
            elif _signature(node) != _signature(before):
                out.append(
                    Rejection("module_level_code", rel, node.lineno, f"changes what runs when {node.name} is defined")
                )
            elif isinstance(node, ast.ClassDef):
                assert isinstance(before, ast.ClassDef)
                out += _module_level(rel, node.body, before.body)
            continue
        if ast.dump(node) not in old_plain:
            out.append(
                Rejection("module_level_code", rel, node.lineno, "adds code that runs when the module is imported")
            )
    return out


_INERT = (ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.Tuple, ast.List, ast.Load, ast.BinOp, ast.BitOr)


def _inert_def(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A ``def`` whose definition evaluates nothing that could run code: no decorators, and defaults and
    annotations made of names, attributes, literals and ``X | Y``."""
    exprs: list[ast.AST] = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
    args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]
    exprs += [a.annotation for a in args if a is not None and a.annotation is not None]
    if node.returns is not None:
        exprs.append(node.returns)
    return not node.decorator_list and all(isinstance(n, _INERT) for e in exprs for n in ast.walk(e))


def _functions(tree: ast.AST) -> dict[str, ast.AST]:
    """Every function of a module by its dotted path of enclosing definitions (``Class.method``)."""
    found: dict[str, ast.AST] = {}
    stack: list[tuple[str, ast.AST]] = [("", tree)]
    while stack:
        prefix, node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    found[name] = child
                stack.append((name + ".", child))
            else:
                stack.append((prefix, child))
    return found


def _introspection(fn: ast.AST) -> list[tuple[ast.AST, str]]:
    """Each use of an escape hatch in ``fn``, as (node, what it is)."""
    out: list[tuple[ast.AST, str]] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            out.append((node, f"uses {node.id}(), which reaches beyond the function"))
        elif isinstance(node, ast.Attribute):
            if _DUNDER.fullmatch(node.attr) and node.attr not in ALLOWED_DUNDERS:
                out.append((node, f"reads .{node.attr}, a way into the interpreter's internals"))
            elif node.attr in FORBIDDEN_ATTRIBUTES:
                out.append((node, f"reads .{node.attr}, an escape hatch to the interpreter or the process"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = next((n for n in _DUNDER.findall(node.value[:10_000]) if n not in ALLOWED_DUNDERS), None)
            if name:
                out.append((node, f"names {name} in a string"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            func = node.func.id
            if func in ("getattr", "setattr", "delattr", "hasattr"):
                literal = len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                name = str(node.args[1].value) if literal else ""  # type: ignore[attr-defined]
                if not literal:
                    out.append((node, f"calls {func} with a computed attribute name"))
                elif (_DUNDER.fullmatch(name) and name not in ALLOWED_DUNDERS) or name in FORBIDDEN_ATTRIBUTES:
                    out.append((node, f"calls {func} for .{name}"))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for _n, module in _import_nodes(node):
                if module.split(".")[0] in FORBIDDEN_MODULES:
                    out.append((node, f"imports {module} inside a function"))
    return out
