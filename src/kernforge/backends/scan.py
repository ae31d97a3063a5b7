"""A static scan of a candidate's source, before any worker runs: an allow-list of what kernels need.

Each finding names its rule, the line and why it is rejected. The scan reads text only.

Python (Triton) candidates are walked as a syntax tree and must stay inside an
allow-list, so that a trick nobody listed still fails:

- imports: __future__, math, torch, triton, triton.language and its libdevice;
- every name resolves to the file's own functions, parameters and locals, an allowed
  builtin, or an allowed library name: tl.* (of tl.extra only libdevice), math.*,
  triton's kernel-writing API, torch's allocation and metadata names;
- outside @triton.jit code, methods and attributes of other objects (tensors, devices)
  come from a metadata-and-view list, and operators, numeric builtins, math.* and
  triton.cdiv take only values that cannot be tensors (_Scalars): `x + y` on tensors
  is torch computing the op;
- no dunder names, no global/nonlocal, no classes, no writes to attributes, no writes
  into tensors outside kernels, and no module-level state: a module-level name holds a
  constant (or a list of constants), a kernel, or a pure device-property memo (_memos).

C and CUDA candidates are read line by line with comments removed: headers from an
allow-list, no token pasting, no inline asm in C, no extern declarations, CUDA asm
that reads no clock, and spelled rules for known tricks with plainer messages. What
text cannot show (a prototype written by hand, a function pointer to fopen, a plain
global) is caught by construction in the compiled object: kernforge.backends.object_scan.

Limits: Python values are typed by proof, not by running them, so a scalar argument of
kf_forward (or a value a @triton.heuristics lambda is given) used in arithmetic must be
wrapped in int() or float(), and a @triton.jit function passed to a kernel as a value is
rejected with the direct calls; asm text passed to tl.inline_asm_elementwise through a
kernel parameter is checked only where it is spelled as a string. Neither scan can stop
a kernel that reaches memory or code by address (a Triton pointer made from data_ptr(),
C pointer arithmetic on memcpy) or reads memory left uninitialised by an earlier call.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Finding:
    rule: str
    line: int
    text: str
    reason: str

    def __str__(self) -> str:
        return f"{self.rule} (line {self.line}: {self.text.strip()[:80]}): {self.reason}"


# ---------------------------------------------------------------- Python / Triton: the allow-lists

# The built-in templates import torch, triton and triton.language as tl; libdevice is what a
# hand-written kernel reaches for next (erf, tanh, rint).
_MODULES = {"__future__", "math", "torch", "triton", "triton.language", "triton.language.extra",
            "triton.language.extra.libdevice", "triton.language.extra.cuda",
            "triton.language.extra.cuda.libdevice"}
_LIBDEVICE = ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice")

_DTYPES = {"float32", "float64", "float16", "bfloat16", "half", "float", "double", "int8", "int16",
           "int32", "int64", "uint8", "bool", "long", "int", "float8_e4m3fn", "float8_e5m2"}
# torch names a launcher may use: allocation and metadata, no computation. The templates use
# empty, empty_like, empty_strided, the dtypes and cuda.get_device_properties (their SM count).
# zeros: a buffer a kernel accumulates into with tl.atomic_add starts from zero.
_TORCH_ALLOCATORS = {"torch.empty", "torch.empty_like", "torch.empty_strided", "torch.Tensor", "torch.zeros",
                     "torch.zeros_like"}
_TORCH = _TORCH_ALLOCATORS | {"torch." + n for n in {"device", "Size", "dtype", *_DTYPES}} | \
    {"torch.cuda." + n for n in ("current_device", "get_device_properties", "get_device_capability",
                                 "is_available", "device_count")}
# triton's kernel-writing API (not triton.testing, .runtime, .compiler, .knobs).
_TRITON_SHAPES = {"triton.cdiv", "triton.next_power_of_2"}
_TRITON = _TRITON_SHAPES | {"triton." + n for n in ("jit", "Config", "autotune", "heuristics")}
_KERNEL_DECORATORS = {"triton.jit", "triton.autotune", "triton.heuristics"}

_BUILTINS = {"len", "range", "min", "max", "int", "float", "bool", "tuple", "list", "dict", "isinstance",
             "enumerate", "zip", "abs", "divmod", "round", "all", "any", "sorted", "reversed", "sum", "next",
             "print",
             "str", "Exception", "ValueError", "RuntimeError", "TypeError", "NotImplementedError",
             "AssertionError", "IndexError", "KeyError", "ZeroDivisionError", "OverflowError",
             "ArithmeticError"}
_DYNAMIC_BUILTINS = {"exec", "eval", "compile", "getattr", "setattr", "delattr", "hasattr", "vars",
                     "globals", "locals", "dir", "id", "hash", "type", "object", "super", "memoryview",
                     "breakpoint", "input", "help", "exit", "quit", "classmethod", "staticmethod",
                     "property"}
# Builtins that compute with their arguments (max(t) reduces a tensor with torch's comparisons,
# round(t) is torch.round): outside kernels their arguments must be scalars.
# Builtins that make constants of constants (module-level values).
_CONSTANT_BUILTINS = {"float", "int", "bool", "str", "tuple", "len", "min", "max", "abs", "round"}
_NUMERIC_BUILTINS = {"min", "max", "abs", "divmod", "round", "all", "any", "sorted", "reversed", "sum"}
# Builtins whose results are scalars when their contents are.
_CONTAINER_BUILTINS = {"tuple", "list", "dict", "enumerate", "zip", "next"}

# Outside kernels, what a tensor, a device or device properties may be asked: metadata and views
# (view, reshape and contiguous may copy; a copy computes nothing).
_SCALAR_METHODS = {"stride", "size", "dim", "numel", "element_size", "data_ptr", "item", "is_contiguous",
                   "is_floating_point", "get_device", "nelement"}
_METHODS = _SCALAR_METHODS | {"view", "view_as", "reshape", "as_strided", "unsqueeze", "squeeze", "permute",
                              "transpose", "t", "expand", "expand_as", "contiguous", "new_empty",
                              "new_empty_strided"}
# Attributes, read and never called (a tensor's .type() casts it).
_SCALAR_ATTRIBUTES = {"shape", "ndim", "dtype", "device", "is_cuda", "itemsize", "type", "index",
                      "multi_processor_count", "max_shared_memory_per_block_optin", "regs_per_multiprocessor",
                      "max_threads_per_multi_processor", "warp_size", "L2_cache_size", "total_memory",
                      "major", "minor"}

_LOW_PRECISION = {"float16", "half", "bfloat16", "float8e4nv", "float8e5", "float8_e4m3fn", "float8_e5m2"}
# PTX special registers that read a clock or a performance counter.
_CLOCK_REGISTER = re.compile(r"%(clock|globaltimer|pm\d)")
_OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
              ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|", ast.BitXor: "^",
              ast.BitAnd: "&", ast.USub: "-", ast.UAdd: "+", ast.Invert: "~", ast.Eq: "==",
              ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.In: "in",
              ast.NotIn: "not in"}


def scan_python(source: str, task_dtype: str) -> list[Finding]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # the build reports it, with the compiler's words
    return _PythonScan(tree, source.splitlines(), task_dtype).findings


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _chain_problem(chain: str, called: bool) -> tuple[str, str] | None:
    """(rule, reason) when the library name `chain` (torch.cuda.stream: fully qualified) is not
    allowed."""
    parts = chain.split(".")
    private = next((".".join(parts[:i + 1]) for i in range(1, len(parts))
                    if parts[i].startswith("_")), None)
    if parts[0] == "torch":
        if private and (private != chain or not called):
            return "banned-attribute", f"{private}: reaches torch internals"
        if chain in _TORCH:
            return None
        return "library-op", (f"{'calls' if called else 'refers to'} {chain}: the kernel must compute "
                              "the op itself (of torch only allocation and metadata: empty, empty_like, "
                              "empty_strided, dtypes, cuda.get_device_properties)")
    if parts[0] not in ("math", "triton"):
        return "banned-attribute", f"{chain}: from a module a kernel may not import"
    if private:
        return "banned-attribute", f"{private}: reaches {parts[0]} internals"
    if parts[0] == "math" or chain in _TRITON or chain == "triton":
        return None
    if chain.startswith("triton.language"):
        if chain.startswith("triton.language.extra") and \
                not any(chain == m or chain.startswith(m + ".") for m in _LIBDEVICE):
            return "banned-attribute", f"{chain}: of triton.language.extra only libdevice is allowed"
        return None
    return "banned-attribute", (f"{'.'.join(parts[:2])}: not among triton's kernel-writing API "
                                f"({', '.join(sorted(n.split('.')[1] for n in _TRITON))}, language)")


def _root(node: ast.AST) -> ast.AST:
    """The expression at the root of an attribute or subscript chain (`y` of y.view(-1)[0])."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node


def _root_name(node: ast.AST) -> str | None:
    root = _root(node)
    return root.id if isinstance(root, ast.Name) else None


def _unpack(target: ast.AST, value: ast.AST | None) -> Iterator[tuple[str, ast.AST | None]]:
    """(name, value) for each name an assignment target binds; `a, b = 1, 2` pairs them up, and
    a name whose own value cannot be told apart gets None."""
    if isinstance(target, ast.Name):
        yield target.id, value
    elif isinstance(target, (ast.Tuple, ast.List)):
        pairs = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
        for i, element in enumerate(target.elts):
            yield from _unpack(element, value.elts[i] if pairs else None)  # type: ignore[union-attr]
    elif isinstance(target, ast.Starred):
        yield from _unpack(target.value, None)


def _parent(node: ast.AST) -> ast.AST | None:
    return getattr(node, "_kf_parent", None)


def _scope_node(node: ast.AST) -> ast.AST | None:
    """The function or lambda whose body holds `node` (None: module level)."""
    return node._kf_scope  # type: ignore[attr-defined]


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_SINGLETONS = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


def _index(tree: ast.Module) -> list[ast.AST]:
    """Every node, parents first, each given its parent and its scope (_parent, _scope_node): one
    walk that the rest of the scan reads instead of walking again (a 300-line group norm source
    has 3000 nodes; each ast.walk of them costs ~4 ms). Contexts and operators (shared
    singletons) are left out."""
    tree._kf_parent = tree._kf_scope = None  # type: ignore[attr-defined]
    nodes, stack = [], [tree]
    while stack:
        node = stack.pop()
        nodes.append(node)
        scope = node._kf_scope  # type: ignore[attr-defined]
        own = node if isinstance(node, _FUNCTIONS) else scope
        # a function's decorators and return annotation belong to the scope around it
        outside = [*getattr(node, "decorator_list", []), getattr(node, "returns", None)] \
            if own is node else ()
        for field in node._fields:
            value = getattr(node, field, None)
            for child in value if isinstance(value, list) else (value,):
                if isinstance(child, ast.AST) and not isinstance(child, _SINGLETONS):
                    inner = scope if outside and any(child is o for o in outside) else own
                    child._kf_parent, child._kf_scope = node, inner  # type: ignore[attr-defined]
                    stack.append(child)
    return nodes


_BINDERS = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.comprehension, ast.NamedExpr,
            ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler, ast.withitem,
            ast.MatchAs, ast.MatchStar, ast.MatchMapping)


def _bindings(node: ast.AST) -> Iterator[tuple[str, str, ast.AST | None]]:
    """(name, kind, expr) for each name `node` binds. kind: value (expr is its value), element
    (expr is an iterable the name runs over or unpacks), scalar (a function or class), unknown."""
    if not isinstance(node, _BINDERS):
        return
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
            for name, value in _unpack(target, node.value):
                yield (name, "value", value) if value is not None else (name, "element", node.value)
    elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        old = ast.Name(node.target.id, ast.Load())
        yield node.target.id, "value", ast.BinOp(old, node.op, node.value)
    elif isinstance(node, (ast.For, ast.comprehension)):
        for name in (n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)):
            yield name, "element", node.iter
    elif isinstance(node, ast.NamedExpr):
        yield node.target.id, "value", node.value
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name, "scalar", None
    elif isinstance(node, ast.ExceptHandler) and node.name:
        yield node.name, "unknown", None
    elif isinstance(node, (ast.withitem, ast.MatchAs, ast.MatchStar, ast.MatchMapping)):
        stored = [n.id for n in ast.walk(node)
                  if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
        captured = [getattr(node, a) for a in ("name", "rest")
                    if isinstance(getattr(node, a, None), str)]
        for name in stored + captured:
            yield name, "unknown", None


class _Module:
    """What the whole file defines: import aliases, functions (kernels or not), constants, memos."""

    def __init__(self, tree: ast.Module, nodes: list[ast.AST]):
        self.tree = tree
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.bindings: dict[str, list[ast.AST | None]] = {}  # module level
        self.loads: dict[str, list[ast.Name]] = {}
        self.binders: list[ast.AST] = []  # what _scopes reads: functions, lambdas, bindings, returns
        imports = []
        for node in nodes:
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Load):
                    self.loads.setdefault(node.id, []).append(node)
            elif isinstance(node, (*_BINDERS, ast.Lambda, ast.Return)):
                self.binders.append(node)
                if _scope_node(node) is None:
                    for name, kind, value in _bindings(node):
                        self.bindings.setdefault(name, []).append(value if kind == "value" else None)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                imports.append(node)
        self.aliases, self.module_aliases = _aliases(imports)
        wrapping = [n for n in tree.body if isinstance(n, ast.Assign) and self.wraps_kernel(n.value)]
        # kernels: decorated with triton.jit, wrapped by a module-level triton.jit(fn), or bound to one
        # (only fn: a pruning or hook function given to triton.autotune runs on the host)
        wrapped = {c.args[0].id for n in wrapping for c in ast.walk(n.value)
                   if isinstance(c, ast.Call) and self.chain(c.func) == "triton.jit" and c.args and
                   isinstance(c.args[0], ast.Name)}
        self.kernel_defs = {n for n, f in self.functions.items() if n in wrapped or
                            any(self.decorator_chain(d) == "triton.jit" for d in f.decorator_list)}
        self.kernels = self.kernel_defs | {t.id for n in wrapping for t in n.targets
                                           if isinstance(t, ast.Name)}
        self.memos = _memos(self)
        self.constants = {name for name, values in self.bindings.items() if name not in self.memos and
                          all(v is not None and self.value_ok(v) for v in values)}
        self.lists = {n for n in self.constants
                      if any(isinstance(v, ast.List) for v in self.bindings[n])}

    def chain(self, node: ast.AST) -> str | None:
        """`tl.extra.cuda.libdevice.erf` -> 'triton.language.extra.cuda.libdevice.erf' where the root
        is an import alias; None for anything else."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return ".".join([self.aliases[node.id], *reversed(parts)])

    def decorator_chain(self, node: ast.AST) -> str | None:
        return self.chain(node.func if isinstance(node, ast.Call) else node)

    def wraps_kernel(self, value: ast.AST | None) -> bool:
        """`triton.jit(fn)`, `triton.autotune(...)(triton.jit(fn))`: a kernel made by a call."""
        return isinstance(value, ast.Call) and (
            self.decorator_chain(value.func) in _KERNEL_DECORATORS or
            any(self.wraps_kernel(a) for a in value.args))

    def value_ok(self, node: ast.AST, in_call: bool = False,
                 seen: frozenset[str] = frozenset()) -> bool:
        """Whether a module-level value holds no state: constants and their arithmetic, tuples and
        lists of them (no rule lets anything mutate a list), dtypes, kernels, Configs. Dicts only
        as arguments (a Config's)."""
        if isinstance(node, (ast.Constant, ast.Lambda)):
            return True
        if isinstance(node, ast.Name):
            if node.id in self.functions or node.id in self.aliases:
                return True
            values = self.bindings.get(node.id, [None])
            return node.id not in seen and all(
                v is not None and self.value_ok(v, in_call, seen | {node.id}) for v in values)
        if isinstance(node, ast.Attribute):
            chain = self.chain(node)
            return chain is not None and _chain_problem(chain, called=False) is None
        if isinstance(node, ast.Dict) and not in_call:
            return False
        if isinstance(node, ast.Call):
            chain = self.chain(node.func)
            name = node.func.id if isinstance(node.func, ast.Name) else None
            constant = chain in _TRITON or chain == "triton.language.constexpr" or \
                (chain or "").startswith("math.") or name in _CONSTANT_BUILTINS
            if not (constant or self.wraps_kernel(node)):
                return False
            in_call = True
        if isinstance(node, (ast.Call, ast.Dict, ast.Tuple, ast.List, ast.BinOp, ast.UnaryOp, ast.BoolOp,
                             ast.Compare, ast.IfExp, ast.JoinedStr, ast.FormattedValue, ast.keyword)):
            children = [c for c in ast.iter_child_nodes(node)
                        if isinstance(c, (ast.expr, ast.keyword))]
            if isinstance(node, ast.Call):
                children = children[1:]  # the function itself was judged above
            return all(self.value_ok(c, in_call, seen) for c in children)
        return False


def _aliases(nodes: list[ast.Import | ast.ImportFrom]) -> tuple[dict[str, str], set[str]]:
    """Each name an import binds -> the qualified name it stands for (banned imports too, so that
    patching them is named as such); and which of those names are modules."""
    aliases, modules = {}, set()
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                name = a.asname or a.name.split(".")[0]
                aliases[name] = a.name if a.asname else name
                modules.add(name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                if f"{node.module}.{a.name}" in _MODULES:
                    modules.add(a.asname or a.name)
    return aliases, modules


def _memos(module: _Module) -> set[str]:
    """Module-level dicts that are pure memos of device facts, as the templates' SM count:

        _SMS = {}
        def sm_count(device):
            if device not in _SMS:
                _SMS[device] = <device.type, device.index, torch.cuda.get_device_properties(device)...>
            return _SMS[device]

    used nowhere else. What it returns for a key is a fixed function of the key's device, cached
    or not: it carries nothing from one call to the next."""
    memos = set()
    for name, values in module.bindings.items():
        if len(values) != 1 or not isinstance(values[0], ast.Dict) or values[0].keys:
            continue
        uses = module.loads.get(name, [])
        users = {id(_outermost_function(u)): _outermost_function(u) for u in uses}
        user = next(iter(users.values()), None)
        if len(users) == 1 and len(uses) == 3 and isinstance(user, ast.FunctionDef) and \
                _is_memo_function(user, name, module):
            memos.add(name)
    return memos


def _outermost_function(node: ast.AST) -> ast.AST | None:
    scope = _scope_node(node)
    while scope is not None and _scope_node(scope) is not None:
        scope = _scope_node(scope)
    return scope


def _is_memo_function(fn: ast.FunctionDef, memo: str, module: _Module) -> bool:
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    args = fn.args
    if len(args.args) != 1 or args.posonlyargs or args.kwonlyargs or args.vararg or args.kwarg or \
            len(body) != 2:
        return False
    key, (test, ret) = args.args[0].arg, body
    lookup = f"{memo}[{key}]"
    return (isinstance(test, ast.If) and not test.orelse
            and ast.unparse(test.test) == f"{key} not in {memo}"
            and len(test.body) == 1 and isinstance(test.body[0], ast.Assign)
            and [ast.unparse(t) for t in test.body[0].targets] == [lookup]
            and isinstance(ret, ast.Return) and ret.value is not None
            and ast.unparse(ret.value) == lookup
            and _device_fact(test.body[0].value, key, module))


def _device_fact(node: ast.AST, key: str, module: _Module) -> bool:
    """Whether `node` depends only on constants, and on the device `key` through .type, .index
    and torch.cuda's device queries."""
    if isinstance(node, ast.Name):
        return node.id != key and module.value_ok(node)
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == key:
            return node.attr in ("type", "index")
        chain = module.chain(node)
        if chain is not None:
            return _chain_problem(chain, called=False) is None
        return node.attr in _SCALAR_ATTRIBUTES and _device_fact(node.value, key, module)
    if isinstance(node, ast.Call):
        chain = module.chain(node.func) or ""
        return chain.startswith("torch.cuda.") and chain in _TORCH and not node.keywords and \
            all(isinstance(a, ast.Name) and a.id == key or _device_fact(a, key, module)
                for a in node.args)
    if isinstance(node, (ast.Constant, ast.Compare, ast.IfExp, ast.BoolOp, ast.BinOp, ast.UnaryOp)):
        return all(_device_fact(c, key, module) for c in ast.iter_child_nodes(node)
                   if isinstance(c, ast.expr))
    return False


@dataclass
class _Scope:
    """A function's or lambda's body: what it binds, whether it is kernel code, where it sits."""
    node: ast.AST
    parent: _Scope | None
    kernel: bool
    params: set[str]
    bindings: dict[str, list[tuple[str, ast.AST | None]]] = field(default_factory=dict)
    returns: list[ast.AST] = field(default_factory=list)

    def binds(self, name: str) -> bool:
        return name in self.params or name in self.bindings


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    args = fn.args
    return {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}


def _scopes(module: _Module) -> dict[ast.AST, _Scope]:
    """A _Scope per function and lambda, with the names its own body binds and its returns."""
    scopes: dict[ast.AST, _Scope] = {}
    for node in module.binders:  # parents first
        if isinstance(node, _FUNCTIONS):
            parent = scopes.get(_scope_node(node))  # type: ignore[arg-type]
            kernel = parent.kernel if parent else getattr(node, "name", None) in module.kernel_defs
            scopes[node] = _Scope(node, parent, kernel, _params(node))
        scope = scopes.get(_scope_node(node))  # type: ignore[arg-type]
        if scope is not None:
            for name, kind, expr in _bindings(node):
                scope.bindings.setdefault(name, []).append((kind, expr))
            if isinstance(node, ast.Return) and node.value is not None:
                scope.returns.append(node.value)
    return scopes


class _Scalars:
    """Which expressions of non-kernel code can never be tensors ("scalars": ints, shapes, devices,
    strings, functions). Types cannot be read off a syntax tree, so this proves instead, as a least
    fixpoint: a name is a scalar when everything bound to it is (constants, .shape, .numel(),
    triton.cdiv of scalars), a helper's parameter when every call passes it a scalar, a helper's
    result when every return is one. What it cannot prove is not a scalar: kf_forward's parameters
    (the evaluator passes tensors and numbers alike) are not."""

    def __init__(self, module: _Module, scopes: dict[ast.AST, _Scope]):
        self.module, self.scopes = module, scopes
        self.known: dict[tuple[ast.AST, str], bool] = {}
        self.returns: dict[str, bool] = {}
        self.grid_lambdas = self._grid_lambdas()
        self.calls = self._direct_calls()
        self._solve()

    def _grid_lambdas(self) -> set[ast.AST]:
        """Lambdas given as a launch grid (`kernel[lambda meta: ...]`): triton calls them with the
        meta-parameters, never with a tensor."""
        lambdas = set()
        launches = [_parent(n) for k in self.module.kernels for n in self.module.loads.get(k, [])]
        for node in launches:
            if isinstance(node, ast.Subscript):
                grids = [node.slice]
                if isinstance(node.slice, ast.Name):
                    grids = [e for s in self.scopes.values()
                             for kind, e in s.bindings.get(node.slice.id, []) if kind == "value"]
                lambdas |= {g for g in grids if isinstance(g, ast.Lambda)}
        return lambdas

    def _direct_calls(self) -> dict[str, list[ast.Call] | None]:
        """Each module function -> its calls by name; None where it is also used as a value."""
        calls: dict[str, list[ast.Call] | None] = {name: [] for name in self.module.functions}
        for node in (n for name in calls for n in self.module.loads.get(name, [])):
            if calls[node.id] is not None:
                parent = _parent(node)
                if isinstance(parent, ast.Call) and parent.func is node:
                    calls[node.id].append(parent)  # type: ignore[union-attr]
                elif not isinstance(parent, ast.Subscript):  # a launch, kernel[grid], is no call of it
                    calls[node.id] = None
        return calls

    def _solve(self) -> None:
        changed = True
        while changed:
            changed = False
            for scope in self.scopes.values():
                for name in (scope.params | set(scope.bindings)) if not scope.kernel else ():
                    value = self._name_in_scope(scope, name)
                    changed |= value != self.known.get((scope.node, name), False)
                    self.known[(scope.node, name)] = value
            for name, fn in self.module.functions.items():
                if fn in self.scopes and not self.scopes[fn].kernel:
                    value = all(self.scalar(r, self.scopes[fn]) for r in self.scopes[fn].returns)
                    changed |= value != self.returns.get(name, False)
                    self.returns[name] = value

    def _name_in_scope(self, scope: _Scope, name: str) -> bool:
        if name in scope.params and not self._param(scope, name):
            return False
        for kind, expr in scope.bindings.get(name, []):
            if kind == "unknown" or kind != "scalar" and not self._bound(kind, expr, scope):  # type: ignore
                return False
        return True

    def _bound(self, kind: str, expr: ast.AST, scope: _Scope) -> bool:
        if kind == "element" and isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and \
                expr.func.id == "range" and not self.shadowed("range", scope):
            return True  # range() counts ints, whatever its arguments
        return self.scalar(expr, scope)

    def _param(self, scope: _Scope, name: str) -> bool:
        node = scope.node
        if node in self.grid_lambdas:
            return True
        # a helper called nowhere runs nowhere (only kf_forward is called from outside)
        if not isinstance(node, ast.FunctionDef) or self.module.functions.get(node.name) is not node or \
                node.name == "kf_forward" or self.calls.get(node.name) is None:
            return False
        args = node.args
        if name in {a.arg for a in (args.vararg, args.kwarg) if a}:
            return False
        positional = [a.arg for a in [*args.posonlyargs, *args.args]]
        defaults = dict(zip(positional[len(positional) - len(args.defaults):], args.defaults))
        defaults |= {a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None}
        for call in self.calls[node.name] or []:
            if any(isinstance(a, ast.Starred) for a in call.args) or \
                    any(k.arg is None for k in call.keywords):
                return False
            value = (dict(zip(positional, call.args)) | {k.arg: k.value for k in call.keywords}).get(
                name, defaults.get(name))
            if value is None or not self.scalar(value, self.scope_of(call)):
                return False
        return True

    def scope_of(self, node: ast.AST) -> _Scope | None:
        return self.scopes.get(_scope_node(node))  # type: ignore[arg-type]

    def chain(self, node: ast.AST, scope: _Scope | None) -> str | None:
        """The library name `node` spells (_Module.chain), unless a local shadows its root."""
        return None if self.shadowed(_root_name(node), scope) else self.module.chain(node)

    def shadowed(self, name: str | None, scope: _Scope | None) -> bool:
        while scope is not None:
            if scope.binds(name):
                return True
            scope = scope.parent
        return False

    def name(self, name: str, scope: _Scope | None) -> bool:
        while scope is not None:
            if scope.binds(name):
                return self.known.get((scope.node, name), False)
            scope = scope.parent
        m = self.module
        return name in m.constants or name in m.functions or name in m.memos or name in m.aliases or \
            (name in _BUILTINS and name not in m.bindings)

    def scalar(self, node: ast.AST, scope: _Scope | None) -> bool:
        """Whether `node`, evaluated in `scope`, can never be a tensor."""
        if isinstance(node, (ast.Constant, ast.JoinedStr, ast.Lambda)):
            return True
        if isinstance(node, ast.Name):
            return self.name(node.id, scope)
        if isinstance(node, ast.Attribute):
            return self.chain(node, scope) is not None or node.attr in _SCALAR_ATTRIBUTES or \
                self.scalar(node.value, scope)
        if isinstance(node, ast.Call):
            return self._call(node, scope)
        if isinstance(node, (ast.Subscript, ast.Starred, ast.NamedExpr)):
            return self.scalar(node.value, scope)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self.scalar(node.elt, scope)
        if isinstance(node, ast.DictComp):
            return self.scalar(node.key, scope) and self.scalar(node.value, scope)
        if isinstance(node, ast.IfExp):
            return self.scalar(node.body, scope) and self.scalar(node.orelse, scope)
        if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Tuple, ast.List,
                             ast.Set, ast.Dict, ast.Slice)):
            return all(self.scalar(c, scope) for c in ast.iter_child_nodes(node)
                       if isinstance(c, ast.expr))
        return False

    def _call(self, node: ast.Call, scope: _Scope | None) -> bool:
        args_scalar = all(self.scalar(a, scope) for a in [*node.args, *(k.value for k in node.keywords)])
        func, chain = node.func, self.chain(node.func, scope)
        if chain is not None:
            if chain in _TORCH_ALLOCATORS:
                return False
            return chain.startswith("torch.") or chain in _TRITON - _TRITON_SHAPES or args_scalar
        if isinstance(func, ast.Name) and not self.shadowed(func.id, scope):
            if func.id in self.module.functions:
                return func.id in self.module.kernels or self.returns.get(func.id, False)
            if func.id in _BUILTINS and func.id not in self.module.bindings:
                return args_scalar or func.id not in _NUMERIC_BUILTINS | _CONTAINER_BUILTINS
            return False
        if isinstance(func, ast.Attribute):
            return func.attr in _SCALAR_METHODS
        return isinstance(func, ast.Subscript)  # a kernel launch returns no tensor


class _PythonScan:
    """Reads each node once, in the index's order, knowing its scope (kernel code or not)."""

    def __init__(self, tree: ast.Module, lines: list[str], task_dtype: str):
        self.lines, self.dtype = lines, task_dtype
        self.findings: list[Finding] = []
        nodes = _index(tree)
        self.module = _Module(tree, nodes)
        self.scopes = _scopes(self.module)
        self.scalars = _Scalars(self.module, self.scopes)
        self.scope: _Scope | None = None
        self._module_statements(tree)
        checks = {getattr(ast, name[6:]): getattr(self, name) for name in dir(self)
                  if name.startswith("visit_")}
        for node in nodes:
            check = checks.get(type(node))
            if check is not None:
                self.scope = self.scopes.get(node._kf_scope)  # type: ignore[attr-defined]
                check(node)
        self.findings.sort(key=lambda f: f.line)

    def add(self, node: ast.AST, rule: str, reason: str) -> None:
        line = getattr(node, "lineno", 0)
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        self.findings.append(Finding(rule, line, text, reason))

    @property
    def launcher(self) -> bool:
        """Inside a function that is not kernel code: where operators may call torch."""
        return self.scope is not None and not self.scope.kernel

    def _local(self, name: str | None) -> bool:
        return name is not None and self.scalars.shadowed(name, self.scope)

    def _scalar(self, node: ast.AST) -> bool:
        return self.scalars.scalar(node, self.scope)

    # -------------------------------------------------------- module level and scopes

    def _module_statements(self, tree: ast.Module) -> None:
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                value = node.value
                if value is None or self.module.value_ok(value) or self.module.wraps_kernel(value):
                    continue
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for name in (n for n, _ in _unpack(target, value) if n not in self.module.memos):
                        self.add(node, "global-state",
                                 f"module-level {name} = {ast.unparse(value)[:40]}: not a constant, "
                                 "so it can carry state from one call to the next")
            elif not isinstance(node, (ast.FunctionDef, ast.Import, ast.ImportFrom, ast.ClassDef)) and \
                    not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
                self.add(node, "module-code", "runs code at import (only imports, definitions and "
                                              "constants may stand at module level)")

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._dunder(node, node.name)
        if isinstance(node, ast.AsyncFunctionDef):
            self.add(node, "module-code", f"async def {node.name}: a kernel needs no coroutines")
        for decorator in node.decorator_list:
            if self.module.decorator_chain(decorator) not in _KERNEL_DECORATORS:
                self.add(decorator, "dynamic-code",
                         f"decorator {ast.unparse(decorator)[:40]}: only triton.jit, triton.autotune "
                         "and triton.heuristics may wrap a function")
        self.visit_Lambda(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        name, args = getattr(node, "name", "a lambda"), node.args
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            if not self.module.value_ok(default) or \
                    any(isinstance(n, (ast.List, ast.Dict, ast.Set)) for n in ast.walk(default)):
                self.add(default, "global-state", f"default {ast.unparse(default)[:40]} of {name}: "
                                                  "a mutable default keeps state across calls")
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None:
                self._dunder(arg, arg.arg)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.add(node, "global-state", f"defines class {node.name}: its attributes live across "
                                       "calls (a kernel needs functions only)")

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        statement = "global" if isinstance(node, ast.Global) else "nonlocal"
        self.add(node, "global-state", f"{statement} {', '.join(node.names)}: keeps state across calls")

    visit_Nonlocal = visit_Global

    def visit_With(self, node: ast.With) -> None:
        if self.launcher:
            self.add(node, "dynamic-code", "a with block runs an object's __enter__ and __exit__ "
                                           "(a stream, a mode, a patch)")

    # -------------------------------------------------------- imports

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._import(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.add(node, "banned-import", "a relative import reaches code outside the candidate")
            return
        if not self._import(node, module) or module == "__future__":
            return
        for alias in node.names:
            if alias.name == "*":
                self.add(node, "banned-import", f"from {module} import *: names the scan cannot see")
                continue
            problem = _chain_problem(f"{module}.{alias.name}", called=False)
            if problem and module == "torch":
                problem = "library-op", (f"imports {alias.name} from torch: the kernel must compute "
                                         "the op itself")
            if problem:
                self.add(node, *problem)
            self._low_precision(node, f"{module}.{alias.name}", alias.name)

    def _import(self, node: ast.AST, name: str) -> bool:
        if name in _MODULES:
            return True
        rule = "library-op" if name.split(".")[0] == "torch" else "banned-import"
        allowed = ", ".join(sorted(_MODULES - {"__future__"}))
        self.add(node, rule, f"imports {name}: a kernel may import only {allowed}")
        return False

    # -------------------------------------------------------- names and attributes

    def _dunder(self, node: ast.AST, name: str) -> bool:
        if _is_dunder(name):
            self.add(node, "banned-attribute", f"{name}: dunder names reach the interpreter's internals")
        return _is_dunder(name)

    def visit_Name(self, node: ast.Name) -> None:
        if self._dunder(node, node.id) or not isinstance(node.ctx, ast.Load) or self._local(node.id):
            return
        parent = _parent(node)
        if node.id in self.module.aliases:
            attribute_base = isinstance(parent, ast.Attribute) and parent.value is node
            if node.id in self.module.module_aliases and not attribute_base:
                self.add(node, "banned-attribute", f"uses the module {node.id} as a value: only its "
                                                   "listed names may be used")
        elif node.id in self.module.kernels and (self.scope is None or not self.scope.kernel):
            self._kernel_use(node, parent)
        elif node.id not in self.module.bindings and node.id not in self.module.functions:
            self._builtin_use(node, isinstance(parent, ast.Call) and parent.func is node)

    def _kernel_use(self, node: ast.Name, parent: ast.AST | None) -> None:
        if isinstance(parent, ast.Subscript) and parent.value is node:
            return  # a launch: kernel[grid](...)
        if self.scope is None and isinstance(parent, ast.Call) and self.module.wraps_kernel(parent):
            return  # triton.autotune(...)(kernel) at module level
        self.add(node, "jit-call", f"uses the @triton.jit function {node.id} other than as "
                                   f"{node.id}[grid](...): called directly (under the interpreter) "
                                   "its body runs as Python on torch tensors")

    def _builtin_use(self, node: ast.Name, called: bool) -> None:
        """A name defined nowhere in the file is a builtin, or a NameError where it runs (templates
        name helpers of other variants in branches their constexprs prune)."""
        if node.id == "open":
            self.add(node, "file-access", "open() reads files (the reference outputs are on disk)")
        elif node.id in _DYNAMIC_BUILTINS:
            self.add(node, "dynamic-code", f"{node.id}() hides code from the scan or patches objects")
        elif node.id not in _BUILTINS and hasattr(builtins, node.id):
            allowed = ", ".join(sorted(_BUILTINS))
            self.add(node, "unknown-name", f"{'calls' if called else 'uses'} the builtin {node.id}, "
                                           f"which is not among the allowed ({allowed})")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        parent = _parent(node)
        called = isinstance(parent, ast.Call) and parent.func is node
        outermost = not (isinstance(parent, ast.Attribute) and parent.value is node)
        chain = None if self._local(_root_name(node)) else self.module.chain(node)
        if self._dunder(node, node.attr):
            pass
        elif chain is not None:
            problem = _chain_problem(chain, called) if outermost else None
            if problem:
                self.add(node, *problem)
            if outermost:
                self._low_precision(node, chain, None)
        elif self.launcher and node.attr not in (_METHODS if called else _METHODS | _SCALAR_ATTRIBUTES):
            spelled = f".{node.attr}()" if called else f".{node.attr}"
            self.add(node, "library-op", f"{spelled} on a tensor or other object: outside @triton.jit "
                                         f"code only metadata and views ({', '.join(sorted(_METHODS))}, "
                                         ".shape, .dtype, .device...)")

    def _low_precision(self, node: ast.AST, chain: str, spelled: str | None) -> None:
        if self.dtype == "float32" and chain.rsplit(".", 1)[-1] in _LOW_PRECISION and \
                chain.startswith(("torch.", "triton.language.")):
            self.add(node, "lower-precision", f"{spelled or ast.unparse(node)} in a float32 op: "
                                              "computes in lower precision than the reference")

    # -------------------------------------------------------- writes

    def visit_Assign(self, node: ast.Assign | ast.AnnAssign | ast.AugAssign | ast.Delete | ast.For) \
            -> None:
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for target in targets:
            self._write(target, node)
        if isinstance(node, ast.AugAssign) and self.launcher:
            self._operands(node, node.op, [node.target, node.value])

    visit_AnnAssign = visit_AugAssign = visit_Delete = visit_For = visit_Assign

    def _write(self, target: ast.AST, node: ast.AST) -> None:
        """Writes go to plain names only: an attribute patches an object, a subscript writes into
        a tensor (torch copies) or into module-level state."""
        if isinstance(target, (ast.Tuple, ast.List, ast.Starred)):
            for element in target.elts if not isinstance(target, ast.Starred) else [target.value]:
                self._write(element, node)
            return
        root = _root_name(target)
        module_level = root is not None and not self._local(root)
        spelled = ast.unparse(target)[:40]
        if isinstance(target, ast.Attribute) and module_level and root in self.module.aliases:
            self.add(node, "patches-library", f"assigns to {spelled}: patches a library or a timer")
        elif isinstance(target, ast.Attribute):
            self.add(node, "assigns-attribute", f"assigns to {spelled}: patches an object (or keeps "
                                                "state on it)")
        elif not isinstance(target, ast.Subscript) or module_level and root in self.module.memos:
            return  # a name; or the memo's own write, whose shape _memos checked
        elif module_level and (root in self.module.bindings or root in self.module.functions):
            self.add(node, "global-state", f"writes into module-level {root}: keeps state across calls")
        elif self.launcher:
            self.add(node, "library-op", f"writes into {spelled} outside @triton.jit code: torch copies "
                                         "or fills the tensor")

    # -------------------------------------------------------- calls and operators

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        chain = None if self._local(_root_name(func)) else self.module.chain(func)
        name = func.id if isinstance(func, ast.Name) and not self._local(func.id) else None
        arguments = [*node.args, *(k.value for k in node.keywords)]
        if self.launcher and (name in _NUMERIC_BUILTINS or chain in _TRITON_SHAPES or
                              (chain or "").startswith("math.")):
            bad = next((a for a in arguments if not self._scalar(a)), None)
            if bad is not None:
                self.add(node, "library-op", f"{name or chain}() on {ast.unparse(bad)[:30]}, which may "
                                             "be a tensor: torch would compute it (only scalars here)")
        if chain == "triton.language.inline_asm_elementwise":
            self._inline_asm(node)
        for kw in node.keywords:
            if kw.arg:
                self._dunder(node, kw.arg)
            if self.dtype == "float32" and kw.arg in ("allow_tf32", "input_precision") and \
                    not (isinstance(kw.value, ast.Constant) and kw.value.value in (False, "ieee")):
                self.add(node, "lower-precision", f"{kw.arg}: tf32 products in a float32 op")
        if self.dtype == "float32" and chain == "triton.language.dot" and \
                not {k.arg for k in node.keywords} & {"allow_tf32", "input_precision"}:
            self.add(node, "lower-precision", 'tl.dot without input_precision="ieee" in a float32 op: '
                                              "tf32 products by default")

    def _inline_asm(self, node: ast.Call) -> None:
        """The asm text must be readable here (visit_Constant reads it for clocks): a string, a
        module constant, or a kernel parameter (a constexpr its launch spells)."""
        asm = node.args[0] if node.args else \
            next((k.value for k in node.keywords if k.arg == "asm"), None)
        readable = isinstance(asm, ast.Constant) or isinstance(asm, ast.Name) and \
            (asm.id in self.module.constants or self._local(asm.id))
        if not readable:
            self.add(node, "dynamic-code", "inline asm whose text the scan cannot read")

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and _CLOCK_REGISTER.search(node.value):
            self.add(node, "timers", "reads a clock or performance counter register (%clock, "
                                     "%globaltimer)")

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult):
            self.add(node, "library-op", "the @ operator calls the library's matmul")
        elif self.launcher:
            self._operands(node, node.op, [node.left, node.right])

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if self.launcher and not isinstance(node.op, ast.Not):
            self._operands(node, node.op, [node.operand])

    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:]) if self.launcher else ():
            # `a in b` asks b; `is` asks nobody; every other comparison computes with both
            checked = [right] if isinstance(op, (ast.In, ast.NotIn)) else [left, right]
            if not isinstance(op, (ast.Is, ast.IsNot)) and self._operands(node, op, checked):
                break

    def _operands(self, node: ast.AST, op: ast.AST, operands: list[ast.AST]) -> bool:
        bad = next((o for o in operands if not self._scalar(o)), None)
        if bad is not None:
            symbol = _OPERATORS.get(type(op), type(op).__name__)
            self.add(node, "library-op", f"the {symbol} operator on {ast.unparse(bad)[:30]} outside "
                                         "@triton.jit code: it may be a tensor, and torch would compute "
                                         "it (wrap a scalar argument in int() or float())")
        return bad is not None

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if not self.launcher or self._scalar(node.value):
            return
        lists = [n for n in ast.walk(node.slice) if isinstance(n, (ast.List, ast.ListComp, ast.Set)) or
                 isinstance(n, ast.Name) and n.id in self.module.lists and not self._local(n.id)]
        if lists or not self._scalar(node.slice):
            self.add(node, "library-op", f"indexes {ast.unparse(node)[:40]} with a tensor or a list "
                                         "outside @triton.jit code: torch gathers the elements")


# ---------------------------------------------------------------- C / CUDA

_C_HEADERS = {"stdint.h", "stddef.h", "stdbool.h", "stdalign.h", "math.h", "float.h", "limits.h", "string.h",
              "stdlib.h", "omp.h", "arm_neon.h", "arm_sve.h", "tgmath.h", "alloca.h"}
_X86_INTRINSICS = re.compile(r"[a-z0-9]*intrin\.h")  # immintrin.h, x86intrin.h, avx512fintrin.h...
_CUDA_HEADERS = {"cuda_runtime.h", "cuda_runtime_api.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h",
                 "cooperative_groups.h", "cooperative_groups/reduce.h", "cooperative_groups/scan.h",
                 "cooperative_groups/memcpy_async.h", "mma.h", "math_constants.h", "cuda_pipeline.h",
                 "cuda_pipeline_primitives.h", "cuda_awbarrier.h", "cuda_awbarrier_primitives.h",
                 "device_launch_parameters.h", "vector_types.h", "vector_functions.h", "cuda/barrier",
                 "cuda/pipeline", "cuda/std/cstdint", "cuda/std/limits", "cuda/std/type_traits",
                 "cuda/std/utility", "cuda/std/array", "cstdint", "cstddef", "cmath", "climits", "cfloat",
                 "cstring", "cstdlib", "type_traits", "limits", "algorithm", "utility", "array",
                 "initializer_list"}
_DIRECTIVES = {"", "include", "define", "undef", "if", "ifdef", "ifndef", "elif", "else", "endif", "pragma",
               "error", "warning", "line"}

# Spelled rules for known tricks: they reject before any compiler runs and name the cause in
# plain words. The guarantee is the allow-lists above and the object checks, not these.
_C_RULES = [
    ("library-op", r"\b(cublas\w*|cudnn\w*|at::|torch::)", "calls a library for the main computation"),
    ("side-stream", r"\bcudaStream(Create\w*|PerThread|Legacy)\b|\bcudaLaunchHostFunc\b",
     "uses another stream: work on it escapes the timing events"),
    ("threads", r"\bpthread_create\b|\bthrd_create\b|\bstd::(thread|async|jthread)\b|\b(v?fork|clone)\s*\(",
     "creates threads or processes that can run work outside the timed region"),
    ("timers", r"\b(clock_gettime|gettimeofday|timespec_get|cudaEvent\w+|__rdtsc\w*|rdtsc\w*|clock64|"
               r"omp_get_wtime|dlsym|dlopen)\b|\bclock\s*\(",
     "touches timers or loads code the scan cannot see"),
    ("process", r"\b(system|popen|execv\w*|execl\w*)\s*\(", "starts other programs"),
    # a static pointer the code can change; `*const` cannot change after its initialiser, and a
    # static table of constant pointers is read-only once relocated (the object checks judge both)
    ("memory-state", r"\bstatic\b[^;()=\[{]*\*\s*(?:(?:restrict|volatile|__restrict__?)\s+)*(?!const\b)\w+"
                     r"\s*[;=\[,]",
     "keeps a pointer across calls: a cached or stale result"),
    ("file-access", r"\b(fopen\w*|freopen|open|openat|mmap|fread|opendir|readdir|scandir|glob|syscall)\s*\(|"
                    r"/proc/|/tmp/",
     "reads files (the reference outputs are on disk)"),
]
# Only spellings that cannot be an ordinary identifier: reserved names (a leading underscore).
# CUDA's `half`/`half2` are also plain words (a split point, `int half = n / 2`), and F16C or
# NEON conversions have no type name at all: computing in half precision is judged where it
# shows, by the values (checks.RTOL: 1e-5 for float32, ~1e-3 is what half precision gives).
_C_LOW_PRECISION = r"\b(__half2?|__nv_bfloat16\w*|_Float16|__fp16|__bf16|__float2half\w*|__float2bfloat16\w*|" \
                   r"__nv_fp8\w*)\b"
# Names of nvcc's own host stub, which the object checks trust; a candidate may not reuse them,
# nor open cuda::std (whose header-defined placeholders the object checks trust too).
_CUDA_RESERVED = r"\b(__device_stub|__cudaFatCubinHandle|__fatDeviceText|__cudaRegister)\w*|" \
                 r"\bnamespace\s+(cuda|std)\b"


def scan_c(source: str, task_dtype: str, language: str = "c") -> list[Finding]:
    """Findings for a C (language 'c') or CUDA ('cuda') candidate."""
    findings = []
    rules = list(_C_RULES)
    if task_dtype == "float32":
        rules.append(("lower-precision", _C_LOW_PRECISION, "half-precision types in a float32 op: "
                                                            "computes in lower precision than the reference"))
    if language == "cuda":
        rules.append(("reserved-name", _CUDA_RESERVED, "names the compiler's own stub or namespaces"))
    else:
        rules.append(("inline-asm", r"\b(asm|__asm__|__asm)\b", "inline assembly: instructions the scan "
                                                                 "cannot read (a syscall, rdtsc)"))
    lines = _c_lines(source)
    for number, code, text in lines:
        findings += _directive(number, code, text, language)
        if "##" in code:
            findings.append(Finding("token-pasting", number, text, "## builds names the scan cannot see"))
        if language == "cuda" and _CLOCK_REGISTER.search(text):
            findings.append(Finding("timers", number, text, "asm reads a clock or performance counter "
                                                            "register"))
        findings += [Finding(rule, number, text, reason) for rule, pattern, reason in rules
                     if re.search(pattern, code)]
    return findings + _externs(lines)


def _directive(number: int, code: str, text: str, language: str) -> list[Finding]:
    directive = re.match(r"\s*#\s*(\w*)", code)
    if not directive:
        return []
    name = directive.group(1)
    if name not in _DIRECTIVES:
        return [Finding("preprocessor", number, text, f"#{name}: not a directive a kernel needs")]
    if name != "include":
        return []
    header = re.match(r"\s*#\s*include\s*<([^<>\s]+)>\s*$", text)
    allowed = _C_HEADERS | (_CUDA_HEADERS if language == "cuda" else set())
    if header and (header.group(1) in allowed or _X86_INTRINSICS.fullmatch(header.group(1))):
        return []
    what = f"<{header.group(1)}>" if header else "a computed or quoted header"
    return [Finding("banned-include", number, text,
                    f"includes {what}: a kernel may include only {', '.join(sorted(allowed))} and the "
                    "*intrin.h intrinsics (never cuBLAS, cuDNN, ATen, torch, c10 or Python.h)")]


def _externs(lines: list[tuple[int, str, str]]) -> list[Finding]:
    """`extern` only as `extern "C"` on a function definition (CUDA's kf_forward): a hand-written
    extern declaration reaches a function or variable no header offers."""
    findings = []
    text = "\n".join(code for _, code, _ in lines)
    for match in re.finditer(r'\bextern\b(\s*"[^"\n]*")?([^;{}]*)([;{])', text):
        linkage, declarator, end = match.groups()
        definition = linkage is not None and end == "{" and "(" in declarator
        shared = declarator.lstrip().startswith("__shared__")  # CUDA's dynamic shared memory
        if not definition and not shared:
            line = text.count("\n", 0, match.start()) + 1
            findings.append(Finding("extern", line, match.group(0).splitlines()[0],
                                    "an extern declaration reaches code or data outside the candidate"))
    return findings


_TRIGRAPHS = {"??=": "#", "??/": "\\", "??'": "^", "??(": "[", "??)": "]", "??!": "|", "??<": "{", "??>": "}",
              "??-": "~"}


def _c_lines(source: str) -> list[tuple[int, str, str]]:
    """(line number, code, text) per logical line, as the compiler reads it: trigraphs and digraphs
    as what they stand for, backslash-continued lines joined (reported at their first line),
    comments removed; `code` also has the contents of string literals blanked (quotes kept), `text`
    keeps them (asm, headers)."""
    source = re.sub(r"\?\?[=/'()!<>-]", lambda m: _TRIGRAPHS[m.group(0)], source)
    joined = "\n".join(line or "" for line in _join_continued(source)).replace("%:", "#")
    codes = _strip_c(joined, strings=True).split("\n")
    texts = _strip_c(joined, strings=False).split("\n")
    return [(number, code, text) for number, (code, text) in enumerate(zip(codes, texts), start=1)]


def _join_continued(text: str) -> list[str | None]:
    """Physical lines, a backslash-continued line joined onto its first: None for the lines joined."""
    out: list[str | None] = []
    first = None
    for line in text.split("\n"):
        if first is None:
            first = len(out)
            out.append(line)
        else:
            out[first] += line  # type: ignore[operator]
            out.append(None)
        if out[first].endswith("\\"):  # type: ignore[union-attr]
            out[first] = out[first][:-1]  # type: ignore[index]
        else:
            first = None
    return out


def _strip_c(source: str, strings: bool) -> str:
    """Comments replaced by a space (newlines kept); with strings=True, literal contents blanked."""
    def blank(match: re.Match[str]) -> str:
        token = match.group(0)
        if token.startswith("/"):
            return " " + "\n" * token.count("\n")
        if not strings:
            return token
        return token[0] + re.sub(r"[^\n]", " ", token[1:-1]) + token[-1]
    pattern = r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'"
    return re.sub(pattern, blank, source, flags=re.DOTALL)


def scan_source(source: str, language: str, task_dtype: str) -> list[Finding]:
    """Findings for a candidate in `language` (triton, c, cuda) for a task whose tensors are
    task_dtype."""
    dtype = task_dtype.replace("torch.", "")
    if language == "triton":
        return scan_python(source, dtype)
    return scan_c(source, dtype, language)
