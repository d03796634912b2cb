"""What text a name may hold, as far as a file's source shows it (for getattr's names)."""

from __future__ import annotations

import ast


class NameValues:
    """What text a name handed to getattr or hasattr may hold, as far as the source shows it.

    `values(expr)` is the set of strings `expr` may be, or None when the source does not tell:
    a name bound to something else than text the source shows (a loop over a call, a class
    attribute, a parameter of a function called with a built name or used as a value). A name
    is looked up in its function, then in those around it (every binding there counts, before
    or after the use); a name declared global or nonlocal anywhere, in the whole file.
    """

    DEPTH = 16
    # Steps to follow one name back, and all names of a file together: a file built so that
    # names lead to many others (a helper called 100 times, its caller too, ...) gets a lead
    # rather than a report that takes forever.
    STEPS, FILE_STEPS = 5_000, 500_000
    SCOPES = (
        ast.FunctionDef,
        ast.AsyncFunctionDef,
        ast.Lambda,
        ast.ClassDef,
        ast.ListComp,
        ast.SetComp,
        ast.DictComp,
        ast.GeneratorExp,
    )

    def __init__(self, nodes: list[ast.AST], parents: dict[int, ast.AST]):
        self.parents = parents
        self.bindings: dict[tuple[int, str], list[ast.AST]] = {}
        self.everywhere: dict[str, list[ast.AST]] = {}
        self.functions: dict[str, list[ast.AST]] = {}
        self.called: dict[str, list[ast.Call]] = {}
        self.loaded: dict[str, int] = {}  # loads of a name that are not a call's function
        self.shared = {name for node in nodes if isinstance(node, ast.Global | ast.Nonlocal)
                       for name in node.names}  # fmt: skip
        calls = {id(node.func) for node in nodes if isinstance(node, ast.Call)}
        for node in nodes:
            bound = None
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Store | ast.Del):
                    bound = node.id
                elif id(node) not in calls:
                    self.loaded[node.id] = self.loaded.get(node.id, 0) + 1
            elif isinstance(node, ast.arg):
                bound = node.arg
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.functions.setdefault(node.name, []).append(node)
                bound = node.name
            elif isinstance(node, ast.Import | ast.ImportFrom):
                for alias in node.names:
                    name = (alias.asname or alias.name).split(".")[0]
                    self._bind(self.scope(node), name, alias)
            elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
                bound = node.name
            if bound is not None:
                where = (
                    self.scope(self.parents.get(id(node), node))
                    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                    else self.scope(node)
                )
                self._bind(where, bound, node)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                self.called.setdefault(node.func.id, []).append(node)
        self.fields = {statement.target.id for node in nodes if isinstance(node, ast.ClassDef)
                       for statement in node.body if isinstance(statement, ast.AnnAssign)
                       and isinstance(statement.target, ast.Name)}  # fmt: skip
        self.busy: set[tuple[int, str]] = set()
        self.steps = self.file_steps = 0

    def held(self, node: ast.expr) -> set[str] | None:
        """The strings `node` may be (see the class), within this name's share of steps."""
        self.steps = 0
        return self.values(node)

    def _bind(self, scope: ast.AST | None, name: str, node: ast.AST) -> None:
        self.bindings.setdefault((id(scope), name), []).append(node)
        self.everywhere.setdefault(name, []).append(node)

    def scope(self, node: ast.AST) -> ast.AST | None:
        """The function (or class) whose name `node` binds or reads; None: the module."""
        while id(node) in self.parents:
            node = self.parents[id(node)]
            if isinstance(node, self.SCOPES):
                return node
        return None

    def lookup(self, node: ast.AST, name: str) -> tuple[int, list[ast.AST]] | None:
        """The bindings a use of `name` at `node` may read, keyed for cycles; None if none."""
        if name in self.shared:
            found = self.everywhere.get(name)
            return (0, found) if found else None
        scope, first = self.scope(node), True
        while True:
            # A class's names are not seen by the functions inside it.
            if first or not isinstance(scope, ast.ClassDef):
                found = self.bindings.get((id(scope), name))
                if found:
                    return id(scope), found
            if scope is None:
                return None
            scope, first = self.scope(scope), False

    def values(self, node: ast.expr, depth: int = 0) -> set[str] | None:
        self.steps += 1
        self.file_steps += 1
        if depth > self.DEPTH or self.steps > self.STEPS or self.file_steps > self.FILE_STEPS:
            return None
        if isinstance(node, ast.Constant):
            return {node.value} if isinstance(node.value, str) else set()
        if isinstance(node, ast.Name):
            return self._name(node, depth + 1)
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "name"
            and isinstance(node.value, ast.Name)
            and self._over_fields(node.value)
        ):
            return set(self.fields)  # f.name for f in fields(x): a dataclass's field names
        if isinstance(node, ast.IfExp):
            return self._union([node.body, node.orelse], depth + 1)
        return None

    def _union(self, parts, depth: int) -> set[str] | None:
        found: set[str] = set()
        for part in parts:
            more = self.values(part, depth)
            if more is None:
                return None
            found |= more
        return found

    def _items(self, node: ast.expr, depth: int) -> set[str] | None:
        """The strings a loop over `node` may give."""
        if depth > self.DEPTH:
            return None
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return self._union(node.elts, depth + 1)
        if isinstance(node, ast.Dict) and None not in node.keys:
            return self._union(node.keys, depth + 1)
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
            return self.values(node.elt, depth + 1)  # [f.name for f in fields(Rollout)]
        if not isinstance(node, ast.Name):
            return None
        found = self.lookup(node, node.id)
        if found is None:
            return None
        key = (found[0], "items " + node.id)
        if key in self.busy:
            return set()
        self.busy.add(key)
        try:
            items: set[str] = set()
            for binding in found[1]:
                parent = self.parents.get(id(binding))
                if not (isinstance(parent, ast.Assign) and parent.targets == [binding]):
                    return None
                more = self._items(parent.value, depth + 1)
                if more is None:
                    return None
                items |= more
            return items
        finally:
            self.busy.discard(key)

    def _over_fields(self, node: ast.Name) -> bool:
        """`node` is bound only as a loop's name over fields(...) or dataclasses.fields(...)."""
        found = self.lookup(node, node.id)
        for binding in found[1] if found else []:
            loop = self.parents.get(id(binding))
            if not (isinstance(loop, ast.For | ast.comprehension) and loop.target is binding):
                return False
            source = loop.iter
            function = source.func if isinstance(source, ast.Call) else None
            if not ((isinstance(function, ast.Name) and function.id == "fields")
                    or (isinstance(function, ast.Attribute) and function.attr == "fields"
                        and isinstance(function.value, ast.Name)
                        and function.value.id == "dataclasses")):  # fmt: skip
                return False
        return found is not None

    def _name(self, node: ast.Name, depth: int) -> set[str] | None:
        found = self.lookup(node, node.id)
        if found is None:
            return None
        key = (found[0], node.id)
        if key in self.busy:
            return set()  # a cycle adds nothing the other bindings do not
        self.busy.add(key)
        try:
            values: set[str] = set()
            for binding in found[1]:
                more = self._binding(binding, depth)
                if more is None:
                    return None
                values |= more
            return values
        finally:
            self.busy.discard(key)

    def _binding(self, binding: ast.AST, depth: int) -> set[str] | None:
        parent = self.parents.get(id(binding))
        if isinstance(binding, ast.arg):
            return self._parameter(binding, parent, depth)
        if isinstance(parent, ast.Assign) and parent.targets == [binding]:
            return self.values(parent.value, depth)
        if isinstance(parent, ast.AnnAssign) and parent.target is binding and parent.value:
            return self.values(parent.value, depth)
        if isinstance(parent, ast.For | ast.comprehension) and parent.target is binding:
            return self._items(parent.iter, depth)
        return None

    def _parameter(self, argument: ast.arg, arguments: ast.AST, depth: int) -> set[str] | None:
        """A parameter's values: what every call of its function passes, its default if a call
        may leave it out; None for a function used otherwise than called by its name."""
        function = self.parents.get(id(arguments))
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            return None
        name = function.name
        if (len(self.functions.get(name, [])) != 1 or self.loaded.get(name)
                or len(self.everywhere.get(name, [])) != 1 or not self.called.get(name)
                or isinstance(self.parents.get(id(function)), ast.ClassDef)):  # fmt: skip
            return None
        spec = function.args
        positional = [*spec.posonlyargs, *spec.args]
        defaults = {a.arg: d for a, d in zip(positional[len(positional) - len(spec.defaults):],
                                             spec.defaults, strict=True)}  # fmt: skip
        defaults |= {a.arg: d for a, d in zip(spec.kwonlyargs, spec.kw_defaults, strict=True)
                     if d is not None}  # fmt: skip
        index = next((i for i, a in enumerate(positional) if a is argument), None)
        if index is None and argument not in spec.kwonlyargs:
            return None  # *args, **kwargs
        # Every call site costs a step: a helper called thousands of times from thousands of
        # getattr calls must not take the report minutes.
        self.steps += len(self.called[name])
        self.file_steps += len(self.called[name])
        if self.steps > self.STEPS or self.file_steps > self.FILE_STEPS:
            return None
        parts = []
        for call in self.called[name]:
            if any(isinstance(a, ast.Starred) for a in call.args) or any(
                keyword.arg is None for keyword in call.keywords
            ):
                return None
            given = [k.value for k in call.keywords if k.arg == argument.arg]
            if index is not None and index < len(call.args):
                given.append(call.args[index])
            if not given:
                if argument.arg not in defaults:
                    return None
                given = [defaults[argument.arg]]
            parts += given
        return self._union(parts, depth + 1)
