"""The scan: a submission's syntax tree read once, every rule given each node and yielding leads."""

from __future__ import annotations

import ast
import contextlib
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

from grader.tampering.names import NameValues
from grader.tampering.rules import (
    ALIAS_ROUNDS,
    ASKED,
    ATTRIBUTES,
    BY_NAME,
    BY_NAME_QUALIFIED,
    CALLED,
    CLASS_SWAP,
    DESCRIPTIVE,
    DOTTED,
    HIDDEN,
    INTERCEPTS,
    KEEPS_ORIGINALS,
    KIT_MODULE_TEXT,
    MAX_ALIASES,
    MODULES,
    PATCH,
    PROCESS_MEMORY_TEXT,
    QUALIFIED,
    REPLACED,
    RUNS_TEXT_KEYWORDS,
    SETS_BY_NAME,
    SUBMODULES,
    TOY_METHODS,
    UNBOUND_STEPS,
    UNPICKLING,
)


@dataclass(frozen=True)
class Lead:
    line: int
    what: str


def _root(node: ast.expr) -> str | None:
    """The name an attribute chain starts from: `sys` for sys.modules.get."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _own_scope(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """The nodes of a function's body that run in it: not those of a function, lambda or class
    defined inside it, whose parameters are other names."""
    pending = list(function.body)
    while pending:
        node = pending.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            pending.extend(ast.iter_child_nodes(node))


def _own_inits(nodes: list[ast.AST]) -> set[int]:
    """The `__init__` calls that build an object of the solution's own: super().__init__(...),
    which reaches only an instance of the class it is written in, and Base.__init__(self, ...)
    or super(Base, self).__init__(...) run directly in a class's own __init__ on its first
    parameter, never assigned there. Anywhere else (kind = type(model); kind.__init__(model)),
    a constructor run again on a handed object empties a toy model's records."""
    found = {id(node) for node in nodes if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__"
             and isinstance(node.func.value, ast.Call)
             and isinstance(node.func.value.func, ast.Name) and node.func.value.func.id == "super"
             and not node.func.value.args and not node.func.value.keywords}  # fmt: skip
    for owner in nodes:
        if not isinstance(owner, ast.ClassDef):
            continue
        for method in owner.body:
            parameters = [*method.args.posonlyargs, *method.args.args] if isinstance(
                method, ast.FunctionDef) and method.name == "__init__" else []  # fmt: skip
            if not parameters:
                continue
            built = parameters[0].arg
            scope = list(_own_scope(method))
            if any(isinstance(node, ast.Name) and node.id == built
                   and isinstance(node.ctx, ast.Store | ast.Del) for node in scope):  # fmt: skip
                continue  # self = model
            for call in scope:
                if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "__init__"):  # fmt: skip
                    continue
                base = call.func.value
                if isinstance(base, ast.Call):  # super(Base, self).__init__()
                    given = base.args[1] if len(base.args) == 2 and not base.keywords else None
                    mine = isinstance(base.func, ast.Name) and base.func.id == "super"
                else:  # nn.Module.__init__(self): a class named, none computed here
                    given = call.args[0] if call.args else None
                    mine = not any(isinstance(part, ast.Call | ast.Subscript)
                                   for part in ast.walk(base))  # fmt: skip
                if mine and isinstance(given, ast.Name) and given.id == built:
                    found.add(id(call))
    return found


def _init_leads(nodes: list[ast.AST], called: set[int]) -> Iterator[Lead]:
    """A constructor run again on an object the solution was handed, or taken to be run later."""
    own = _own_inits(nodes)
    for node in nodes:
        is_call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        if is_call and node.func.attr == "__init__" and id(node) not in own:
            # type(model).__init__(model, ...) builds a handed object afresh: a toy model's
            # record of calls emptied and its strictness reset, with no name of either.
            yield Lead(node.lineno, "runs the constructor of an object it was handed again")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "__init__"
            and isinstance(node.ctx, ast.Load)
            and id(node) not in called
        ):
            # functools.partial(kind.__init__, model), map(kind.__init__, [model])
            yield Lead(node.lineno, "takes a constructor to run it on another object")


def _is_import_call(node: ast.AST, importers: Collection[str] = ("__import__",)) -> bool:
    """__import__(...), importlib.import_module(...) or importlib.__import__(...), also under
    another name (`importers`: from importlib import import_module as load)."""
    if not (isinstance(node, ast.Call) and node.args):
        return False
    function = node.func
    return (isinstance(function, ast.Name) and function.id in importers) or (
        isinstance(function, ast.Attribute) and function.attr in ("import_module", "__import__")
    )


def _importers(nodes: list[ast.AST]) -> set[str]:
    """The names that import a module when called: __import__, and import_module or
    __import__ imported from importlib or assigned to another name."""
    found = {"__import__"} | {
        alias.asname or alias.name
        for node in nodes
        if isinstance(node, ast.ImportFrom) and node.module == "importlib"
        for alias in node.names
        if alias.name in ("import_module", "__import__")
    }
    for node in nodes:  # load = importlib.import_module
        value = getattr(node, "value", None) if isinstance(node, ast.Assign) else None
        if (isinstance(value, ast.Name) and value.id in found) or (
            isinstance(value, ast.Attribute) and value.attr in ("import_module", "__import__")
        ):
            found.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return found


def _import_leads(node: ast.AST, importers: set[str]) -> Iterator[Lead]:
    """Modules a solution has no use for, imported by name or by a name it builds."""
    modules = []
    if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        modules = [node.module]
        for alias in node.names:  # from operator import attrgetter
            pair = (node.module, alias.name)
            if pair in QUALIFIED:
                yield Lead(node.lineno, f"{QUALIFIED[pair]} ({'.'.join(pair)})")
            elif f"{node.module}.{alias.name}" in SUBMODULES:  # from logging import config
                what = SUBMODULES[f"{node.module}.{alias.name}"]
                yield Lead(node.lineno, f"{what} ({node.module}.{alias.name})")
            elif alias.name in ATTRIBUTES:  # from torch.nn.modules.module import register_...
                yield Lead(node.lineno, f"{ATTRIBUTES[alias.name]} ({'.'.join(pair)})")
    elif _is_import_call(node, importers):
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            modules = [first.value]
        elif not isinstance(first, ast.Constant):
            # importlib.import_module("gra" + "der.values"): a module no import names
            yield Lead(node.lineno, "imports a module whose name it builds")
    for module in modules:
        if module == "torch.library" or module.startswith("torch.library."):
            yield Lead(node.lineno, f"{QUALIFIED['torch', 'library']} ({module})")
        for sub, what in SUBMODULES.items():
            if module == sub or module.startswith(sub + "."):
                yield Lead(node.lineno, f"{what} ({module})")
        top = module.split(".")[0]
        if top in MODULES:
            yield Lead(node.lineno, f"{MODULES[top]} ({module})")
    if isinstance(node, ast.Call):
        for keyword in node.keywords:
            safe = isinstance(
                keyword.value, ast.Constant
            ) and keyword.value.value is not UNPICKLING.get(keyword.arg)
            if keyword.arg in UNPICKLING and not safe:
                yield Lead(node.lineno, f"loads pickled data, which runs the calls it names "
                                        f"({keyword.arg}=)")  # fmt: skip


def _unbound_step_leads(node: ast.AST) -> Iterator[Lead]:
    """A class's own step called on an object (torch.optim.SGD.step(optimizer),
    LambdaLR.step(scheduler)): it skips whatever the object's class does at each step, the
    probes' record of it included."""
    if (
        isinstance(node, ast.Call)
        and node.args
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in UNBOUND_STEPS
        and isinstance(node.func.value, ast.Name | ast.Attribute)
    ):
        owner = node.func.value
        name = owner.id if isinstance(owner, ast.Name) else owner.attr
        if name[:1].isupper():
            yield Lead(node.lineno, f"calls a class's {node.func.attr} on an object, past the "
                                    "object's own class (a probe's records)")  # fmt: skip


def _keyword_leads(node: ast.AST) -> Iterator[Lead]:
    """Keyword arguments that run text unless given False (eval_str=True)."""
    if isinstance(node, ast.Call):
        for keyword in node.keywords:
            off = isinstance(keyword.value, ast.Constant) and keyword.value.value is False
            if keyword.arg in RUNS_TEXT_KEYWORDS and not off:
                yield Lead(node.lineno, f"{RUNS_TEXT_KEYWORDS[keyword.arg]} ({keyword.arg}=)")


def _intercept_leads(node: ast.AST) -> Iterator[Lead]:
    """A class that sees torch's calls (a TorchFunctionMode, a tensor subclass): while it is
    active it can answer any operation, a toy model's and a probe's included."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in INTERCEPTS:
        yield Lead(node.lineno, f"intercepts torch's calls, the probe's too ({node.name})")
    elif isinstance(node, ast.Assign | ast.AnnAssign):  # __torch_function__ = route
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for name in ast.walk(ast.Tuple(elts=list(targets))):
            if isinstance(name, ast.Name) and name.id in INTERCEPTS:
                yield Lead(node.lineno, f"intercepts torch's calls, the probe's too ({name.id})")


def _builtin_leads(
    node: ast.AST, called: set[int], built: Collection[str] = (), names: NameValues | None = None
) -> Iterator[Lead]:
    """Builtins that run hidden code or reach an attribute by a name given as text."""
    if (
        isinstance(node, ast.Name)
        and isinstance(node.ctx, ast.Load)
        and node.id in (*BY_NAME, "exec", "eval", "__import__", "vars", "dir", "globals")
        and id(node) not in called
    ):
        yield Lead(node.lineno, f"uses {node.id} as a value: an alias or a callback hides "
                                "what it reaches")  # fmt: skip
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        return
    function, args = node.func.id, node.args
    if function in HIDDEN:
        yield Lead(node.lineno, f"{HIDDEN[function]} ({function})")
    elif function not in BY_NAME or len(args) < 2:
        return
    elif isinstance(args[1], ast.Constant):
        name = args[1].value  # getattr(reward_fn, "calls") is reward_fn.calls
        if name in ATTRIBUTES:
            yield Lead(node.lineno, f"{ATTRIBUTES[name]} ({function} {name!r})")
        elif name == "__class__" and function in ("setattr", "delattr"):
            yield Lead(node.lineno, f"{CLASS_SWAP} ({function} {name!r})")
        elif name in BY_NAME_QUALIFIED:
            yield Lead(node.lineno, f"{BY_NAME_QUALIFIED[name]} ({function} {name!r})")
    elif function in ("setattr", "delattr"):  # a name it computes
        yield Lead(node.lineno, f"changes an attribute named at run time ({function})")
    elif isinstance(args[1], ast.BinOp | ast.JoinedStr | ast.Call | ast.Subscript) or (
        isinstance(args[1], ast.Name) and args[1].id in built
    ):
        # a name built from pieces: "ca" + "lls", f"{a}{b}", "".join(...), "sllac"[::-1], also
        # kept in a name first (ST = "st" + "rict"; getattr(model, ST))
        yield Lead(node.lineno, f"reads an attribute whose name it builds ({function})")
    elif names is not None:
        # A name that came another way: a loop's (for n in [built]), a class attribute
        # (getattr(model, K.n)), a helper's parameter (getattr(thing, name)): followed back
        # to the text it holds, or a lead where the source does not tell.
        held = names.held(args[1])
        if held is None:
            yield Lead(node.lineno, f"reads an attribute whose name the source does not show "
                                    f"({function})")  # fmt: skip
        else:
            for name in sorted(held & (set(ATTRIBUTES) | set(BY_NAME_QUALIFIED))):
                what = ATTRIBUTES.get(name) or BY_NAME_QUALIFIED[name]
                yield Lead(node.lineno, f"{what} ({function} {name!r})")


def _record_leads(node: ast.AST, named_by_getattr: set[int]) -> Iterator[Lead]:
    """A probe's records reached with no attribute named: as text, by a rebuild, unjudged."""
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in ATTRIBUTES
        and id(node) not in named_by_getattr  # getattr(model, "calls") has its own lead
    ):
        # The name of a record (or of a frame's or an object's dict) as text reaches it as
        # well as the attribute does, wherever it is: handed to a call
        # (operator.attrgetter("calls")), a key ({**kwargs, "strict": False}, state["strict"]
        # = False on a dict of the object's attributes) or kept for later (KEY = "__dict__";
        # getattr(model, KEY)).
        yield Lead(node.lineno, f"{ATTRIBUTES[node.value]} (names {node.value!r})")
    elif isinstance(node, ast.Constant) and node.value == "__init__":
        # getattr(kind, "__init__")(model), operator.methodcaller("__init__")
        yield Lead(node.lineno, "names a constructor as text ('__init__')")
    elif isinstance(node, ast.Constant) and node.value in (*ASKED, *REPLACED):
        # What a toy model asks torch, or a model's own method, named as text for a library
        # that sets attributes by name (update_wrapper's assigned=, an argument parser's dest=).
        yield Lead(node.lineno, f"names what a toy model calls or asks torch ({node.value!r})")
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value:
        # A dotted path as text ("0.__dict__", "model.calls"), which a resolver of such paths
        # follows to the object itself.
        dotted = DOTTED.search(node.value)
        if dotted:
            yield Lead(node.lineno, f"{ATTRIBUTES[dotted[1]]} (names {dotted[0]!r})")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        method = node.func.attr
        if method in CALLED:
            yield Lead(node.lineno, f"{CALLED[method]} (.{method}())")


def _sets_by_name_leads(node: ast.AST) -> Iterator[Lead]:
    """A library call told which attributes to set, or on which object (SETS_BY_NAME), or a
    deep copy given a memo (KEEPS_ORIGINALS)."""
    if not isinstance(node, ast.Call):
        return
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    for table, what in ((SETS_BY_NAME, "sets attributes named by text on an object"),
                        (KEEPS_ORIGINALS, "reads the originals a deep copy keeps")):  # fmt: skip
        if name in table:
            position, keywords = table[name]
            if len(node.args) > position or any(k.arg in keywords for k in node.keywords):
                yield Lead(node.lineno, f"{what} ({name})")


def _attribute_leads(
    node: ast.AST, renamed: dict[str, str], called: set[int], called_bare: set[int]
) -> Iterator[Lead]:
    """Attributes that reach frames, other modules' objects or a probe's records
    (`called_bare`: the attributes called with no arguments, as in model.eval())."""
    if not isinstance(node, ast.Attribute):
        return
    root = _root(node.value)
    pair = (renamed.get(root, root), node.attr)
    if pair in QUALIFIED:
        yield Lead(node.lineno, f"{QUALIFIED[pair]} ({'.'.join(pair)})")
    elif node.attr in ATTRIBUTES:
        yield Lead(node.lineno, f"{ATTRIBUTES[node.attr]} (.{node.attr})")
    elif node.attr in (*BY_NAME, "__import__", *HIDDEN) and node.attr not in ("compile", "dir"):
        # A builtin reached as an attribute (torch.builtins.exec, a module's own getattr),
        # past every rule about the bare name; model.eval() and torch.compile are torch's,
        # args.dir an ordinary name.
        if node.attr != "eval" or id(node) not in called_bare:
            what = HIDDEN.get(node.attr, "reaches attributes or modules named at run time")
            yield Lead(node.lineno, f"{what} (.{node.attr})")
    elif node.attr == "modules" and id(node) not in called:
        # __import__("sys").modules has no name to resolve; model.modules() is torch's own.
        yield Lead(node.lineno, f"{QUALIFIED['sys', 'modules']} (.modules)")


def _match_leads(node: ast.AST) -> Iterator[Lead]:
    """Attributes a match statement reads: `case object(__setattr__=put, calls=records)` reads
    them by names that are neither an attribute nor text in the tree; a class's __match_args__
    names those its positional patterns read, and __instancecheck__ lets any object match."""
    if isinstance(node, ast.MatchClass):
        for name in node.kwd_attrs:
            what = ATTRIBUTES.get(name) or BY_NAME_QUALIFIED.get(name)
            if what is None and name == "modules":
                what = QUALIFIED["sys", "modules"]
            if what is not None:
                yield Lead(node.lineno, f"{what} (a match's {name}=)")
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in (
        "__instancecheck__",
        "__subclasscheck__",
    ):
        yield Lead(node.lineno, f"decides which objects are its class's instances ({node.name})")
    elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        named = any(
            (isinstance(t, ast.Name) and t.id == "__match_args__")
            or (isinstance(t, ast.Attribute) and t.attr == "__match_args__")
            for t in targets
        )
        shown = isinstance(node.value, ast.Tuple | ast.List) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.value.elts
        )
        if named and not shown:
            yield Lead(node.lineno, "names the attributes a match reads at run time "
                                    "(__match_args__)")  # fmt: skip


def _method_leads(node: ast.AST) -> Iterator[Lead]:
    """A class with a toy model's own methods (judged, record, logits) or records: swapped in
    for a handed model, however the swap is reached (m = getattr(model, "_", model)), it
    judges and records calls its own way."""
    if isinstance(node, ast.ClassDef):
        for statement in node.body:
            if (
                isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef)
                and statement.name in TOY_METHODS
            ):
                yield Lead(statement.lineno, f"defines a toy model's own method ({statement.name})")
            # A class that hands numpy a raw address (__array_interface__ = {...}, or a
            # property of that name): defined, not read.
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                defined = [statement.name]
            elif isinstance(statement, ast.Assign | ast.AnnAssign):
                targets = getattr(statement, "targets", None) or [statement.target]
                defined = [target.id for target in targets if isinstance(target, ast.Name)]
            else:
                defined = []
            for name in defined:
                if name in ("__array_interface__", "__array_struct__"):
                    yield Lead(statement.lineno, f"{ATTRIBUTES[name]} (defines {name})")


def _changed_attribute(node: ast.AST) -> tuple[ast.expr, str | None] | None:
    """The object whose attribute `node` sets or deletes, and the attribute's name where the
    text shows it: `x.name = v`, `del x.name`, `setattr(x, "name", v)`, `delattr(x, "name")`
    (None for a name computed at run time). None for any other node."""
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
        return node.value, node.attr
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("setattr", "delattr")
        and node.args
    ):
        name = node.args[1] if len(node.args) >= 2 else None
        shown = isinstance(name, ast.Constant) and isinstance(name.value, str)
        return node.args[0], name.value if shown else None
    return None


def _replaced_leads(node: ast.AST) -> Iterator[Lead]:
    """torch's answers about autograd, or an object's special methods, set or deleted (as an
    attribute or by setattr with its name), however the object was reached."""
    changed = _changed_attribute(node)
    if changed is None or changed[1] is None:
        return
    name = changed[1]
    if name in ASKED:
        yield Lead(node.lineno, f"replaces what a toy model asks torch (.{name})")
    elif name in REPLACED:
        yield Lead(node.lineno, f"replaces a model's own method on the object (.{name})")
    elif name.startswith("__") and name.endswith("__") and name not in DESCRIPTIVE:
        yield Lead(node.lineno, f"sets a special method from outside its class (.{name})")


def _class_swaps(nodes: list[ast.AST]) -> Iterator[Lead]:
    """`model.__class__ = Lenient` on an object a function was handed (a parameter of it or of
    a function around it, an attribute of one, or a name it was assigned to): its own methods
    are replaced. An object the function built itself may change class (a layer computed in
    float32)."""
    yield from _class_attribute_leads(nodes)
    swaps = [node for node in nodes if isinstance(node, ast.Attribute)
             and node.attr == "__class__" and isinstance(node.ctx, ast.Store | ast.Del)]  # fmt: skip
    if not swaps:
        return  # most files
    # Names bound only by `name = value`: what a function built or looked up (head =
    # get_head()). A loop's, an unpacking's or a walrus's name (for m in [model]), or no name
    # at all ([model][0].__class__), may hold a handed object no alias leads back to.
    plain = {id(node.targets[0]) for node in nodes
             if isinstance(node, ast.Assign) and len(node.targets) == 1}  # fmt: skip
    assigned = {node.id for node in nodes if id(node) in plain and isinstance(node, ast.Name)}
    otherwise = {node.id for node in nodes if isinstance(node, ast.Name)
                 and isinstance(node.ctx, ast.Store) and id(node) not in plain}  # fmt: skip
    chains: dict[str | None, tuple[frozenset[str], str | None]] = {}
    parents = {id(child): node for node in nodes for child in ast.iter_child_nodes(node)}
    # m = model: m is the handed object too
    aliases = {node.targets[0].id: node.value.id for node in nodes
               if isinstance(node, ast.Assign) and len(node.targets) == 1
               and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Name)}  # fmt: skip
    for swap in swaps:
        handed, node = set(), swap
        while id(node) in parents:  # the parameters of every function around it
            node = parents[id(node)]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                arguments = node.args
                named = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                         arguments.vararg, arguments.kwarg]  # fmt: skip
                handed |= {a.arg for a in named if a is not None}
        root = _root(swap.value)
        if root not in chains:  # once per name: thousands of swaps may end a long chain
            name, seen = root, {}
            while name is not None and name not in seen and len(seen) <= MAX_ALIASES:
                seen[name] = None  # in order: the last is where the aliases end
                name = aliases.get(name)
            # A chain longer than any code needs ends nowhere known: a lead.
            last = [*seen][-1] if seen and len(seen) <= MAX_ALIASES else None
            chains[root] = (frozenset(seen), last)
        names, last = chains[root]
        if root is None or handed & names or otherwise & names or last not in assigned:
            yield Lead(swap.lineno, f"{CLASS_SWAP} (.__class__)")


def _is_class_of(node: ast.expr, classes: Collection[str]) -> bool:
    """type(x), x.__class__, or a name assigned one of them: an object's class."""
    return (
        (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
         and node.func.id == "type" and len(node.args) == 1)
        or (isinstance(node, ast.Attribute) and node.attr == "__class__")
        or (isinstance(node, ast.Name) and node.id in classes)
    )  # fmt: skip


def _class_attribute_leads(nodes: list[ast.AST]) -> Iterator[Lead]:
    """An attribute set on an object's class (type(model).forward = f, cls = type(model);
    setattr(cls, "record", f)): every method of a handed object replaced, none of it named.
    Or a class built on a class it was handed (class Lenient(type(model)), a base that is a
    function's parameter, type(name, bases, namespace)): what a swapped-in class is made of."""
    classes = {target.id for node in nodes if isinstance(node, ast.Assign)
               and _is_class_of(node.value, ())
               for target in node.targets if isinstance(target, ast.Name)}  # fmt: skip
    # A loop's name over classes (for k in [type(model)]: k.logits = f), a few rounds, as
    # loops may go over names of classes.
    loops = [(node.target, node.iter) for node in nodes
             if isinstance(node, ast.For | ast.AsyncFor | ast.comprehension)]  # fmt: skip
    for _ in range(ALIAS_ROUNDS):
        more = {name.id for target, source in loops for name in ast.walk(target)
                if isinstance(name, ast.Name)
                and any(_is_class_of(part, classes) for part in ast.walk(source))} - classes  # fmt: skip
        if not more:
            break
        classes |= more
    parameters = {argument.arg for node in nodes if isinstance(node, ast.arguments)
                  for argument in [*node.posonlyargs, *node.args, *node.kwonlyargs]}  # fmt: skip
    for node in nodes:
        if isinstance(node, ast.ClassDef) and any(
            _is_class_of(part, classes)
            or (
                isinstance(part, ast.Attribute)
                and part.attr in ("__mro__", "__bases__", "__base__")
            )
            or (isinstance(part, ast.Name) and part.id in parameters)
            for base in node.bases
            for part in ast.walk(base)
        ):
            yield Lead(node.lineno, f"builds a subclass of a class it was handed ({node.name})")
        elif isinstance(node, ast.ClassDef) and (
            any(isinstance(base, ast.Starred) for base in node.bases)
            or any(keyword.arg is None for keyword in node.keywords)
        ):
            # class Q(*kinds), class Q(**spec): bases no text shows
            yield Lead(node.lineno, f"builds a class on bases given at run time ({node.name})")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "type"
            and len(node.args) == 3
        ):
            yield Lead(node.lineno, "builds a class at run time (type(name, bases, namespace))")
        changed = _changed_attribute(node)
        # [type(model)][0].logits = f, (k := type(model)).logits = f: the class inside
        if changed is not None and any(_is_class_of(part, classes)
                                       for part in _object_parts(changed[0])):  # fmt: skip
            yield Lead(node.lineno, f"{CLASS_SWAP}: sets an attribute of its class")


def _object_parts(node: ast.expr) -> Iterator[ast.expr]:
    """`node` and what it is taken from, down a subscript, a walrus or a list (not down an
    attribute chain: model.layer.weight is no class, whatever model.layer's class is)."""
    pending = [node]
    while pending:
        part = pending.pop()
        yield part
        if isinstance(part, ast.Subscript | ast.NamedExpr):
            pending.append(part.value)
        elif isinstance(part, ast.List | ast.Tuple | ast.Set):
            pending.extend(part.elts)
        elif isinstance(part, ast.Starred):
            pending.append(part.value)


def _base(node: ast.expr) -> ast.expr:
    """Where an attribute chain starts: `torch` for torch.nn.Module.forward."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def _dotted(node: ast.expr) -> str:
    """torch.is_grad_enabled, without ast.unparse, which recurses (a chain of thousands of
    attributes would stop the whole class report)."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    start = node.id if isinstance(node, ast.Name) else "(...)"
    return ".".join([start, *reversed(names)])


def _root_object(node: ast.expr) -> ast.expr:
    """Where the object is taken from, down attributes and subscripts: `[os]` for [os][0]."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node


# Builtins given a module have leads of their own (getattr, vars) or none to give (isinstance).
OWN_RULES = ("getattr", "hasattr", "setattr", "delattr", "vars", "dir", "isinstance", "id",
             "print", "repr", "str", "type")  # fmt: skip
# Expressions that hand on what they hold: containers, and those that pick or return a value.
HOLDERS = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Lambda, ast.IfExp, ast.NamedExpr,
           ast.Starred, ast.BoolOp)  # fmt: skip


def _held_modules(node: ast.expr, imported: set[str]) -> bool:
    """Whether `node` holds an imported name as a value, not only reads an attribute of one:
    `[os]`, `lambda: os`, `os if c else x`, `[torch.optim.lr_scheduler]`."""
    parents = {id(child): parent for parent in ast.walk(node)
               for child in ast.iter_child_nodes(parent)}  # fmt: skip
    for part in ast.walk(node):
        if not (isinstance(part, ast.Name) and part.id in imported):
            continue
        chain: ast.AST = part
        while isinstance(parents.get(id(chain)), ast.Attribute):
            chain = parents[id(chain)]
        holder = parents.get(id(chain))
        # A bare module handed on anywhere; an attribute of one (torch.float32, a class, a
        # submodule) put in a container or returned by an expression, not given to a call.
        given = isinstance(holder, ast.keyword) or (
            isinstance(holder, ast.Call) and holder.func is not chain
        )
        if chain is node or isinstance(holder, HOLDERS) or (given and chain is part):
            return True
    return False


def _bindings(nodes: list[ast.AST]) -> list[tuple[ast.AST, ast.expr]]:
    """Each (target, value) the file binds a name with: assignments, loops, comprehensions,
    `with ... as`, walruses and parameters' defaults."""
    bound: list[tuple[ast.AST, ast.expr]] = []
    for node in nodes:
        if isinstance(node, ast.Assign):
            bound += [(target, node.value) for target in node.targets]
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and node.value:
            bound.append((node.target, node.value))
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            bound.append((node.target, node.iter))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            bound.append((node.optional_vars, node.context_expr))
        elif isinstance(node, ast.arguments):
            given = node.posonlyargs + node.args
            bound += zip(given[len(given) - len(node.defaults) :], node.defaults, strict=True)
            bound += [(arg, default) for arg, default in
                      zip(node.kwonlyargs, node.kw_defaults, strict=True) if default is not None]  # fmt: skip
    return bound


def _module_holders(bound: list[tuple[ast.AST, ast.expr]], imported: set[str]) -> set[str]:
    """Names bound (see _bindings) to something that holds an imported module as a value
    (`for m in [os]`, `m = [os][0]`, `(m := os)`, `def f(m=os)`): their attributes are the
    module's."""
    holders: set[str] = set()
    for target, value in bound:
        if _held_modules(value, imported):
            names = [target]  # a name or an unpacking of names, not `self.x` or `d[k]`
            while names:
                name = names.pop()
                if isinstance(name, ast.Tuple | ast.List):
                    names.extend(name.elts)
                elif isinstance(name, ast.Starred):
                    names.append(name.value)
                elif isinstance(name, ast.Name | ast.arg):
                    holders.add(name.id if isinstance(name, ast.Name) else name.arg)
    return holders


def _patch_leads(
    node: ast.AST, imported: set[str], importers: set[str], functions: set[str]
) -> Iterator[Lead]:
    """An attribute of an imported module (or of a class or function imported from one) set or
    deleted: `torch.is_grad_enabled = lambda: False`, `setattr(nn.Module, name, f)`, also when
    the module is reached through an expression (`[os][0].access = ...`, `f().x = ...`)."""
    changed = _changed_attribute(node)
    if changed is None:
        return
    target = changed[0]
    shown = node if isinstance(node, ast.Attribute) else target
    base, root = _base(target), _root_object(target)
    # Through an expression holding the module, or a call of a function of the file's own
    # (which may return one): type(model).forward is the class rules' business.
    calls_own = any(
        isinstance(part, ast.Call)
        and (
            isinstance(part.func, ast.Lambda)
            or (isinstance(part.func, ast.Name) and part.func.id in functions)
        )
        for part in ast.walk(root)
    )
    through = not isinstance(root, ast.Name) and (_held_modules(root, imported) or calls_own)
    if (
        (isinstance(base, ast.Name) and base.id in imported)
        or _is_import_call(base, importers)
        or through
    ):
        yield Lead(node.lineno, f"{PATCH} ({_dotted(shown)[:80]})")


def _module_argument_leads(node: ast.AST, modules: set[str]) -> Iterator[Lead]:
    """A module (a name an import statement bound) handed to a function, whose parameter then
    patches it out of the scan's sight: `f(os)` with `def f(m): m.access = ...`."""
    if isinstance(node, ast.Call) and not (
        isinstance(node.func, ast.Name) and node.func.id in OWN_RULES
    ):
        for argument in [*node.args, *(keyword.value for keyword in node.keywords)]:
            if isinstance(argument, ast.Name) and argument.id in modules:
                yield Lead(node.lineno, f"hands the module {argument.id} to a function")


def _text_leads(node: ast.AST, imported_by_call: set[int]) -> Iterator[Lead]:
    """The kit's modules named as text, the key to them in sys.modules (an import of one by
    __import__ or import_module has its own lead)."""
    if (
        id(node) not in imported_by_call
        and isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and KIT_MODULE_TEXT.fullmatch(node.value)
    ):
        yield Lead(node.lineno, f"names the grader's or test runner's module {node.value!r}")
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and PROCESS_MEMORY_TEXT.search(node.value)
    ):
        yield Lead(node.lineno, f"writes memory directly (names {node.value!r})")


MAX_FOLDED = 256  # longer built text names no attribute; also bounds "x" * 10**9
CASE_METHODS = ("lower", "upper", "strip", "lstrip", "rstrip", "title", "casefold", "swapcase")


# A number in a format ("%9999999999s", "{:>{}}".format("a", "99999")) widens the text it
# builds past any memory: such text is not folded.
WIDE = re.compile(r"\d{4}|\*")


def _bound(node: ast.expr | None) -> int | None:
    """A slice bound the source shows (2, -1, - - 3, or none given); ValueError for any other."""
    if node is None:
        return None
    sign = 1
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):  # no recursion
        sign, node = -sign, node.operand
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return sign * node.value
    raise ValueError("a bound computed at run time")


def _formatted(
    template: str, pieces: list[str], how: Callable[[str, list[str]], str]
) -> str | None:
    """`how(template, pieces)` unless a number in them could make the text huge; None if it
    fails (a field that reads an attribute, a missing argument, a bad format)."""
    if any(WIDE.search(part) for part in (template, *pieces)):
        return None
    try:
        return how(template, pieces)
    except Exception:  # noqa: BLE001 - "{0.name}".format(...) raises AttributeError, and so on
        return None


def _fold(node: ast.AST, texts: dict[int, str]) -> str | None:
    """The text `node` builds from text already folded into `texts` (by id), or None."""

    def text(part: ast.AST) -> str | None:
        return texts.get(id(part))

    if isinstance(node, ast.Constant):
        value = node.value
        return value if isinstance(value, str) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = text(node.left), text(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):  # "ca" + "l" * 2 + "s"
        for piece, times in ((node.left, node.right), (node.right, node.left)):
            count = times.value if isinstance(times, ast.Constant) else None
            if text(piece) is not None and type(count) is int and 0 <= count <= MAX_FOLDED:
                return text(piece) * count
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):  # "%sls" % "cal"
        given = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
        pieces = [text(part) for part in given]
        if text(node.left) is None or None in pieces:
            return None
        return _formatted(text(node.left), pieces, lambda template, args: template % tuple(args))
    if isinstance(node, ast.JoinedStr):  # f"{'ca'}lls"
        pieces = []
        for part in node.values:
            if isinstance(part, ast.FormattedValue) and (part.conversion != -1 or part.format_spec):
                return None
            pieces.append(text(part.value if isinstance(part, ast.FormattedValue) else part))
        return None if None in pieces else "".join(pieces)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):  # "sllac"[::-1]
        whole, bounds = text(node.value), (node.slice.lower, node.slice.upper, node.slice.step)
        with contextlib.suppress(ValueError, TypeError):  # computed bounds, a step of 0, -None
            return None if whole is None else whole[slice(*map(_bound, bounds))]
        return None
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)) or node.keywords:
        return None
    owner, method, args = node.func.value, node.func.attr, node.args
    if method == "decode" and not args and isinstance(owner, ast.Constant):  # b"calls".decode()
        with contextlib.suppress(UnicodeDecodeError, AttributeError):
            return owner.value.decode()
        return None
    if text(owner) is None:
        return None
    if method == "join" and len(args) == 1 and isinstance(args[0], ast.List | ast.Tuple):
        pieces = [text(part) for part in args[0].elts]
        return None if None in pieces else text(owner).join(pieces)
    if method == "format" and None not in map(text, args):  # "{}{}".format("ca", "lls")
        pieces = [text(part) for part in args]
        return _formatted(text(owner), pieces, lambda template, args: template.format(*args))
    if method in CASE_METHODS and not args:
        return getattr(text(owner), method)()
    if method == "replace" and len(args) == 2 and None not in map(text, args):
        return text(owner).replace(text(args[0]), text(args[1]))
    return None


def _folded_texts(nodes: list[ast.AST]) -> dict[int, str]:
    """Text an expression builds from text the source shows ("st" + "rict", f"{'ca'}lls",
    "".join(["ca", "lls"]), "sllac"[::-1]), by the id of each expression that builds it."""
    texts: dict[int, str] = {}
    for node in reversed(nodes):  # ast.walk goes breadth first: every child before its parent
        value = _fold(node, texts)
        if value is not None and len(value) <= MAX_FOLDED:
            texts[id(node)] = value
    return texts


def _built_text_leads(nodes: list[ast.AST], given_by_name: set[int]) -> Iterator[Lead]:
    """Text built from pieces is read as the text it builds: a record named as
    {"st" + "rict": False} is named as surely as by "strict". (A name built for getattr or an
    import has its own lead: `given_by_name`.)"""
    texts = _folded_texts(nodes)
    for node in nodes:
        if id(node) not in texts or id(node) in given_by_name or isinstance(node, ast.Constant):
            continue
        built = ast.Constant(texts[id(node)], lineno=node.lineno)
        for lead in [*_record_leads(built, set()), *_text_leads(built, set())]:
            yield Lead(lead.line, f"{lead.what}, built from pieces")


def leads(source: str) -> list[Lead]:
    """Every place in `source` that reaches into the grader or out of its process, in order."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        # The tests already report a file that does not parse; one nested deeper than this
        # interpreter parses (graded by another Python, say) must not stop the class report.
        return []
    try:
        return _tree_leads(tree)
    except Exception as exc:  # noqa: BLE001 - one file must not stop the whole class report
        return [Lead(1, f"stops the scan ({type(exc).__name__}): read the file itself")]


def _tree_leads(tree: ast.AST) -> list[Lead]:
    nodes = list(ast.walk(tree))
    # Known before the scan, which may meet `import operator as op` after op.attrgetter.
    renamed = {alias.asname: alias.name for node in nodes if isinstance(node, ast.Import)
               for alias in node.names if alias.asname}  # fmt: skip
    imported = {alias.name.split(".")[0] for node in nodes if isinstance(node, ast.Import)
                for alias in node.names}  # fmt: skip
    for node in nodes:  # `s = sys` (or `s = op`): s.modules is sys.modules
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Name)
            and (node.value.id in imported or node.value.id in renamed)
        ):
            renamed[node.targets[0].id] = renamed.get(node.value.id, node.value.id)
    importers = _importers(nodes)
    # Every name an import binds, and the names assigned one or a module imported by a call
    # (values = load("gra" + "der.values")): what _patch_leads watches.
    imported_names = set(renamed) | {
        alias.asname or alias.name.split(".")[0]
        for node in nodes
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
        if alias.name != "*"
    }
    imported_names |= {target.id for node in nodes if isinstance(node, ast.Assign)
                       and _is_import_call(node.value, importers)
                       for target in node.targets if isinstance(target, ast.Name)}  # fmt: skip
    # A name given a module's class or submodule (M = torch.nn.Module; M._call_impl = f patched
    # every model's call), also through another such name: a few rounds, as names come in
    # any order.
    chained = [(node.targets[0].id, _base(node.value).id) for node in nodes
               if isinstance(node, ast.Assign) and len(node.targets) == 1
               and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Attribute)
               and isinstance(_base(node.value), ast.Name)]  # fmt: skip
    bound = _bindings(nodes)
    for _ in range(ALIAS_ROUNDS):
        more = {name for name, base in chained if base in imported_names} - imported_names
        more |= _module_holders(bound, imported_names) - imported_names
        if not more:
            break
        imported_names |= more
    functions = {
        node.name for node in nodes if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    modules = set(renamed) | {alias.asname or alias.name.split(".")[0] for node in nodes
                              if isinstance(node, ast.Import) for alias in node.names}  # fmt: skip
    called = {id(node.func) for node in nodes if isinstance(node, ast.Call)}
    called_bare = {id(node.func) for node in nodes
                   if isinstance(node, ast.Call) and not node.args and not node.keywords}  # fmt: skip
    imported_by_call = {id(node.args[0]) for node in nodes if _is_import_call(node, importers)}
    named_by_getattr = {id(node.args[1]) for node in nodes if isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Name) and node.func.id in BY_NAME
                        and len(node.args) >= 2}  # fmt: skip
    # Names given a value computed at run time ("st" + "rict", "".join(...), a slice): an
    # attribute named by one of them is named by text no scan reads.
    built = {target.id for node in nodes if isinstance(node, ast.Assign | ast.AnnAssign)
             and isinstance(node.value, ast.BinOp | ast.JoinedStr | ast.Call | ast.Subscript)
             for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
             if isinstance(target, ast.Name)}  # fmt: skip
    found = set(_class_swaps(nodes))
    names = None
    if any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
           and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
           and not isinstance(node.args[1], ast.Constant) for node in nodes):  # fmt: skip
        parents = {id(child): node for node in nodes for child in ast.iter_child_nodes(node)}
        names = NameValues(nodes, parents)
    for node in nodes:
        found.update(_import_leads(node, importers))
        found.update(_intercept_leads(node))
        found.update(_unbound_step_leads(node))
        found.update(_keyword_leads(node))
        found.update(_builtin_leads(node, called, built, names))
        found.update(_record_leads(node, named_by_getattr))
        found.update(_sets_by_name_leads(node))
        found.update(_attribute_leads(node, renamed, called, called_bare))
        found.update(_text_leads(node, imported_by_call))
        found.update(_patch_leads(node, imported_names, importers, functions))
        found.update(_module_argument_leads(node, modules))
        found.update(_replaced_leads(node))
        found.update(_method_leads(node))
        found.update(_match_leads(node))
    found.update(_annotation_leads(nodes))
    found.update(_init_leads(nodes, called))
    found.update(_built_text_leads(nodes, named_by_getattr | imported_by_call))
    return sorted(found, key=lambda lead: (lead.line, lead.what))


def _annotation_leads(nodes: list[ast.AST]) -> Iterator[Lead]:
    """Annotations given as text are code that typing.get_type_hints and singledispatch's
    register run (eval): scanned as code, and a call in one, which no type needs, is a lead.
    So is a class body's own `__annotations__`, whose names dataclasses paste into the code
    they generate."""
    for node in nodes:
        if isinstance(node, ast.Name) and node.id == "__annotations__":
            yield Lead(node.lineno, f"{ATTRIBUTES['__annotations__']} (__annotations__)")
        if isinstance(node, ast.arg | ast.AnnAssign):
            notes = [node.annotation]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            notes = [node.returns]
        else:
            continue
        for note in notes:
            if not (isinstance(note, ast.Constant) and isinstance(note.value, str)):
                continue
            try:
                tree = ast.parse(note.value.strip(), mode="eval")
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
            if any(isinstance(part, ast.Call | ast.Lambda) for part in ast.walk(tree)):
                yield Lead(note.lineno, "runs code in an annotation given as text")
            for lead in _tree_leads(tree):
                yield Lead(note.lineno, f"{lead.what} (in an annotation given as text)")
