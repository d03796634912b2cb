"""What counts as a lead: modules, attributes and builtins no solution needs, and why each
matters. The scan (`scan.py`) reports a line with the reason given here."""

import re

# Keyword arguments that run text as code unless given False: inspect.signature(f, eval_str=True)
# evaluates annotations, and an annotation's value may be text (def f(x: TEXT)).
RUNS_TEXT_KEYWORDS = {"eval_str": "runs annotations given as text"}
# Methods that the probes record, called through a class on an object (SGD.step(optimizer)).
UNBOUND_STEPS = ("step", "zero_grad")

# Modules a solution has no use for: the kit's own, the test runner's, and ways out of Python.
MODULES = {
    "grader": "imports the grader",
    "problems": "imports the kit's tests and probes",
    "pytest": "imports the test runner",
    "_pytest": "imports the test runner",
    "pluggy": "imports the test runner's plugins",
    "gc": "walks the interpreter's objects",
    "ctypes": "writes memory directly",
    "_ctypes": "writes memory directly",
    "cffi": "writes memory directly",
    "posix": "starts processes",  # os's own functions (posix.system), under another name
    "_posixsubprocess": "starts processes",
    "pty": "starts processes",
    "builtins": "reaches Python's builtins",
    "subprocess": "starts processes",
    "multiprocessing": "starts processes",
    "signal": "handles signals",
    "socket": "opens sockets",
    # Modules that find another module, or run code, from text or bytes the scan cannot read:
    # pkgutil.resolve_name("gra" + "der.execution"), a pickle whose data calls import_module.
    "_operator": "reads attributes named by text",
    "pkgutil": "imports modules named by text",
    "pydoc": "imports modules named by text",
    "unittest": "patches objects named by text",
    "pickle": "runs calls named in its data",
    "_pickle": "runs calls named in its data",
    "copyreg": "runs calls named in its data",
    "marshal": "loads code built at run time",
    # Modules that run code given as text or from a file, as exec does: the text may be built
    # at run time (timeit.timeit("".join(map(chr, ...)), globals={"model": model})).
    "timeit": "runs code given as text",
    "code": "runs code given as text",
    "codeop": "builds code at run time",
    "runpy": "runs code from a file or module named by text",
    "doctest": "runs code given as text",
    "cProfile": "runs code given as text",
    "profile": "runs code given as text",
    "pdb": "runs code given as text",
    "bdb": "runs code given as text",
    "trace": "runs code given as text",
    "shelve": "runs calls named in its data",
    "dbm": "runs calls named in its data",
    "sympy": "runs code given as text",
    "numexpr": "runs code given as text",
    "pkg_resources": "imports modules named by text",
    # Code kept where the scan cannot read it: a YAML document's python/ tags call any function
    # (yaml.unsafe_load("!!python/name:builtins.exec")), an archive or a folder holds modules.
    "yaml": "runs calls named in its data",
    "ruamel": "runs calls named in its data",
    "jsonpickle": "runs calls named in its data",
    "dill": "runs calls named in its data",
    "cloudpickle": "runs calls named in its data",
    "zipimport": "imports code from an archive",
    # Template engines compile their text into Python, and jinja2's default one resolves and
    # calls whatever attributes the text names ({{ f.__globals__.__builtins__.exec(...) }}).
    "jinja2": "runs code given as text (a template)",
    "mako": "runs code given as text (a template)",
    "_imp": "imports modules its own way",
    "site": "imports code from folders it names",
    # The fork server's main module holds the kit's functions, whose globals are its modules.
    "__main__": "reads the main module (the grader's own)",
}
# Keyword arguments that let a loader run the calls its data names (pickle): the data may be
# bytes built at run time (torch.load(io.BytesIO(data), weights_only=False) ran exec on text
# no scan reads).
UNPICKLING = {"weights_only": False, "allow_pickle": True}
# Submodules whose parent is ordinary: logging.config resolves "grader.execution.x" as text.
SUBMODULES = {
    "logging.config": "imports modules named by text",
    "importlib.metadata": "imports modules named by text",
    "torch.fx": "runs code given as text",
    "torch.package": "runs calls named in its data",
    "torch.utils.cpp_extension": "builds and loads native code",
    # numpy's as_strided: an array over any address, without bounds (torch's checks them).
    "numpy.lib.stride_tricks": "writes memory directly (an array without bounds)",
    "numpy.lib._stride_tricks_impl": "writes memory directly (an array without bounds)",
}

# Names of frames and of attribute access by text that nothing else is called: a lead from
# whatever module they are reached (_operator.attrgetter, __import__("sys")._getframe).
ANYWHERE = ("_getframe", "currentframe", "getouterframes", "getinnerframes", "attrgetter",
            "methodcaller", "getclosurevars", "getmembers", "getmembers_static",
            "getattr_static", "getmodule", "get_type_hints", "get_annotations")  # fmt: skip

# module.attribute pairs, for names that are ordinary elsewhere (torch.stack is no frame).
QUALIFIED = {
    ("sys", "modules"): "reads sys.modules (other modules' objects)",
    ("sys", "_getframe"): "reads the caller's frame",
    ("inspect", "currentframe"): "reads the caller's frame",
    ("inspect", "stack"): "reads the caller's frames",
    ("inspect", "getouterframes"): "reads the caller's frames",
    ("inspect", "getinnerframes"): "reads the frames of a traceback",
    ("os", "kill"): "signals a process",
    ("os", "_exit"): "ends its process",
    ("os", "fork"): "starts processes",
    ("os", "forkpty"): "starts processes",
    ("os", "system"): "starts processes",
    ("os", "popen"): "starts processes",
    ("os", "posix_spawn"): "starts processes",
    ("os", "posix_spawnp"): "starts processes",
    **{
        ("os", f"spawn{v}"): "starts processes"
        for v in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")
    },
    **{
        ("os", f"exec{v}"): "runs another program in its process"
        for v in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")
    },
    # A function's globals (its module's objects) as a dict, as __globals__ gives them.
    ("inspect", "getclosurevars"): "reads a function's globals",
    # Attributes reached by a name given as text, past every check of `.name` and getattr().
    ("operator", "attrgetter"): "reads attributes named by text",
    ("operator", "methodcaller"): "calls methods named by text",
    ("inspect", "getmembers"): "reads every attribute of an object",
    ("inspect", "getmembers_static"): "reads every attribute of an object",
    ("inspect", "getattr_static"): "reads attributes past the object's own rules",
    # The module an object's class was defined in: a toy model's own globals (its `torch`).
    ("inspect", "getmodule"): "finds the module of an object",
    # torch's operators replaced for every caller, a toy model's and a probe's included.
    ("torch", "library"): "replaces torch's own operators",
    ("sys", "monitoring"): "runs its code at every call, the probe's too (sys.monitoring)",
    # Annotations given as text are run as code (eval) by these, and by singledispatch.
    ("typing", "get_type_hints"): "runs annotations given as text",
    ("typing", "ForwardRef"): "runs annotations given as text",
    ("inspect", "get_annotations"): "runs annotations given as text",
    ("types", "CodeType"): "builds code at run time",
    ("types", "FunctionType"): "builds a function from code",
    ("importlib", "util"): "runs code from a file it names",
    ("importlib", "machinery"): "runs code from a file it names",
    ("importlib", "metadata"): "imports modules named by text",
}
# Methods that intercept torch's calls made anywhere while they are active: a mode that answers
# `-logits` with the logits undid a strict toy model's judging.
INTERCEPTS = ("__torch_function__", "__torch_dispatch__")
ATTRIBUTES = {
    "f_back": "walks up the stack",
    "f_globals": "reads a frame's globals",
    "f_locals": "reads a frame's locals",
    "f_builtins": "reads a frame's builtins",
    "tb_frame": "reads a traceback's frames",
    "gi_frame": "reads a generator's frame",
    "__globals__": "reads a function's globals",
    # Weak references to an object, and what each calls when it dies: a WeakKeyDictionary's
    # callback holds the dictionary itself (a probe's records).
    "getweakrefs": "reads the weak references to an object (and who holds them)",
    "__callback__": "reads what a weak reference calls (and who holds it)",
    "__defaults__": "reads a function's default arguments",
    "__kwdefaults__": "reads a function's default arguments",
    "load_library": "loads native code",
    # Evaluators of annotations: an annotation whose value is text (def f(x: TEXT)) is run as
    # code by typing.get_type_hints, which singledispatch's register calls.
    "singledispatch": "runs annotations given as text (singledispatch)",
    "singledispatchmethod": "runs annotations given as text (singledispatch)",
    "mro": "walks the class tree",
    # Field names pasted into generated code: dataclasses writes each into the source of the
    # methods it makes, so a class's __annotations__ given text names runs that text.
    "__annotations__": "sets annotations that generated code takes as names (dataclasses)",
    "make_dataclass": "builds a class whose generated code takes names given as text",
    "make_class": "builds a class whose generated code takes names given as text",
    "reload": "runs a module's code again",
    # A function's closure (what it keeps, a probe's counted schedule included), and the hooks
    # an optimizer runs at each step (a probe's record of it).
    "__closure__": "reads what a function keeps (its closure)",
    "cell_contents": "reads what a function keeps (its closure)",
    "_optimizer_step_pre_hooks": "touches the hooks an optimizer runs at each step (a probe's)",
    "_optimizer_step_post_hooks": "touches the hooks an optimizer runs at each step (a probe's)",
    "register_step_pre_hook": "runs its code at an optimizer's step, past the probe's own",
    "lr_lambdas": "touches a scheduler's schedule (a probe's)",
    "__wrapped__": "reaches the function a wrapper hides",
    # ctypes reached through another module (numpy.ctypeslib.ctypes, torch.ctypes), with no
    # import of it, and what writes memory or sets attributes past Python's own rules.
    "ctypes": "writes memory directly",
    "ctypeslib": "writes memory directly",
    "pythonapi": "writes memory directly",
    "PYFUNCTYPE": "writes memory directly",
    "CFUNCTYPE": "writes memory directly",
    "py_object": "writes memory directly",
    # An array over any address, without bounds: numpy's as_strided (torch's checks its
    # bounds), or a class that hands numpy a raw pointer. It reads and writes the
    # interpreter's own objects.
    "stride_tricks": "writes memory directly (an array without bounds)",
    "_stride_tricks_impl": "writes memory directly (an array without bounds)",
    "__array_interface__": "writes memory directly (an array over a raw address)",
    "__array_struct__": "writes memory directly (an array over a raw address)",
    "DummyArray": "writes memory directly (an array over a raw address)",
    "__builtins__": "reaches Python's builtins",
    # The builtins module under other names: any builtin's __self__ (len.__self__.exec), and
    # the `builtins` many modules import (torch.builtins.vars).
    "__self__": "reaches Python's builtins",
    "builtins": "reaches Python's builtins",
    # Frames of coroutines and async generators, and import hooks run for every later import.
    "cr_frame": "reads a coroutine's frame",
    "ag_frame": "reads an async generator's frame",
    "meta_path": "imports modules its own way (an import hook)",
    "path_hooks": "imports modules its own way (an import hook)",
    "__torch_function__": "intercepts torch's calls, the probe's too",
    "__torch_dispatch__": "intercepts torch's calls, the probe's too",
    "__subclasses__": "walks the class tree",
    "__dict__": "reads an object's attributes as a dict",
    # What the probes and toy models keep: records of calls and their strictness.
    "calls": "touches a record of calls (a probe's)",
    "strict": "touches a toy model's strictness (a probe's)",
    "judged": "touches how a toy model judges its calls (a probe's)",
    "grad_steps": "touches an optimizer's records (a probe's)",
    "init_kwargs": "touches a toy model's constructor arguments (a probe's)",
    # The copy module's insides: _reconstruct(obj, ..., state) sets any object's attributes
    # (a module's too) from a dict, and a deepcopy's memo keeps the originals it copied.
    "_reconstruct": "sets an object's attributes from a dict (copy._reconstruct)",
    "_keep_alive": "reads the originals a deep copy keeps",
    "_deepcopy_dispatch": "reads the originals a deep copy keeps",
    "__deepcopy__": "reads the originals a deep copy keeps",
    "__setattr__": "sets attributes past the object's own rules",
    "__delattr__": "deletes attributes past the object's own rules",
    "__getattribute__": "reads attributes past the object's own rules",
    "__dir__": "lists every attribute of an object",
    # An object's attributes as a dict, read or written back, with no attribute named
    # (Python 3.11's object.__getstate__ returns __dict__ itself; nn.Module.__setstate__ updates it).
    "__getstate__": "reads an object's attributes as a dict",
    "__setstate__": "sets an object's attributes from a dict",
    "__reduce__": "reads an object's attributes as a dict",
    "__reduce_ex__": "reads an object's attributes as a dict",
    # A dotted field given as text ("0.__dict__") resolved to the object itself.
    "get_field": "reads attributes named by text (string.Formatter)",
    # A trace or profile function runs at every call and return, a toy model's included: it
    # can switch autograd off around forward. Frames reached without f_back or f_locals.
    "setprofile": "runs its code at every call, the probe's too (a profiler)",
    "settrace": "runs its code at every line, the probe's too (a tracer)",
    "setprofile_all_threads": "runs its code at every call, the probe's too (a profiler)",
    "settrace_all_threads": "runs its code at every line, the probe's too (a tracer)",
    "addaudithook": "runs its code at the interpreter's events (an audit hook)",
    "_current_frames": "reads every thread's frames",
    "walk_stack": "walks up the stack",
    "walk_tb": "reads a traceback's frames",
    "getargvalues": "reads a frame's locals",
    # A function's code, rebuilt with other names (code.replace(co_names=...)) and run as a
    # new function (types.FunctionType, type(f)): an attribute read by a name built as text.
    "__code__": "reads or rebuilds a function's code",
    "gi_code": "reads or rebuilds a function's code",
    "cr_code": "reads or rebuilds a function's code",
    "ag_code": "reads or rebuilds a function's code",
    "exec_module": "runs code from a file it names",
    "spec_from_file_location": "runs code from a file it names",
    "spec_from_loader": "runs code from a file it names",
    "run_path": "runs code from a file it names",
    "run_module": "runs code from a module named by text",
    "BaseConfigurator": "imports modules named by text",
    "DictConfigurator": "imports modules named by text",
    "dictConfig": "imports modules named by text",
    "fileConfig": "imports modules named by text",
    "EntryPoint": "imports modules named by text",
    "entry_points": "imports modules named by text",
    "resolve_name": "imports modules named by text",
    "_import_dotted_name": "imports modules named by text",
    "_exec_with_source": "runs code given as text",
    # The class tree of a handed object: for k in type(model).__mro__: k._call_impl = f
    "__mro__": "walks the class tree",
    "__bases__": "walks the class tree",
    "__base__": "walks the class tree",
    "getmro": "walks the class tree",
    # A hook runs inside a model's call: it can rewrite what a toy model answered (its judging
    # undone) or switch autograd off around it.
    "register_forward_hook": "rewrites what a model's forward returns (a hook)",
    "register_forward_pre_hook": "runs its code inside a model's call (a hook)",
    "register_module_forward_hook": "rewrites what every model's forward returns (a hook)",
    "register_module_forward_pre_hook": "runs its code inside every model's call (a hook)",
}
# The dicts those functions fill, filled directly: torch.nn.modules.module's
# _global_forward_hooks, a model's own _forward_pre_hooks.
ATTRIBUTES |= {name: what for (_, name), what in QUALIFIED.items() if name in ANYWHERE}
ATTRIBUTES |= {
    f"_{scope}{kind}_hooks{extra}": "runs its code inside a model's call (a hook's dict)"
    for scope in ("", "global_")
    for kind in ("forward", "forward_pre", "backward", "backward_pre")
    for extra in ("", "_with_kwargs", "_always_called")
}
# Assigning to a module's attribute (torch.is_grad_enabled = ...) changes what every module
# that calls it sees, a probe's and a toy model's included.
PATCH = "patches a module it imported"
# Giving a handed object another class replaces every method it has, a toy model's judging and
# recording included, with none of them named.
CLASS_SWAP = "changes the class of an object it was handed"
ALIAS_ROUNDS = 8  # rounds of `M = torch.nn.Module`-style names followed for the patch rule
MAX_ALIASES = 64  # `m = model` names followed back from a swapped object, at most
# What a toy model and a probe ask torch about autograd, replaced wherever torch was reached
# from (t = [torch][0]; t.is_grad_enabled = ...: no import names it), and special methods set
# on a class from outside it (Tensor.__neg__ undoes a strict model's -logits).
ASKED = ("is_grad_enabled", "is_inference_mode_enabled")
# A model's methods set on the object itself (model.forward = f): the toy model's calls
# are judged and recorded however f chooses to call them. (.logits is an output's field.)
REPLACED = ("forward", "record", "_call_impl", "_wrapped_call_impl")
DESCRIPTIVE = ("__class__", "__name__", "__qualname__", "__doc__")  # __class__: its own rule
# Builtins that reach an attribute by a name given as text: called directly, the name shows
# (getattr(model, "calls")); bound to another name or handed to another function
# (`put = setattr`, functools.partial(setattr, ...)), it no longer does.
BY_NAME = ("getattr", "setattr", "delattr", "hasattr")
# Library functions that set attributes named by text on an object they are handed:
# functools.update_wrapper(torch, fake, assigned=("is_grad_enabled",)), and an argument
# parser writing its results into `namespace=torch`. function -> the argument positions and
# keywords that name or hand over what it sets.
# deepcopy(x, memo): memo[id(memo)] holds every original it copied, a record of calls too.
KEEPS_ORIGINALS = {"deepcopy": (1, ("memo",))}
SETS_BY_NAME = {
    "update_wrapper": (2, ("assigned", "updated")),
    "wraps": (1, ("assigned", "updated")),
    **{
        method: (1, ("namespace", "values"))
        for method in (
            "parse_args",
            "parse_known_args",
            "parse_intermixed_args",
            "parse_known_intermixed_args",
        )
    },
}
# The attributes of QUALIFIED, reached by getattr(x, "name") from whatever x is: the module
# behind x may be an alias or a call away (getattr(_sys, "modules")). Not "stack": torch has one.
# Nor a submodule's name, which other objects have too (getattr(model, "config", None)).
BY_NAME_QUALIFIED = {attribute: what for (_, attribute), what in QUALIFIED.items()
                     if attribute not in ("stack", "util", "machinery", "metadata",
                                          "monitoring")}  # fmt: skip
# A module named as text: sys.modules.get("grader.execution"), however sys.modules was reached.
# ("problems" alone is a plain word; problems.<slug> is a module.)
KIT_MODULE_TEXT = re.compile(r"(grader|_?pytest)(\.\w+)*|pluggy|problems(\.\w+)+")
# Its own memory as a file: id() gives any object's address, and a write there changes it.
PROCESS_MEMORY_TEXT = re.compile(r"/proc/[^/]+/(task/[^/]+/)?mem\b")
# What a probe records, also when only named by text (operator.attrgetter("calls")).
RECORDS = ("calls", "strict", "judged", "grad_steps")
DOTTED = re.compile(r"\.(" + "|".join(map(re.escape, ATTRIBUTES)) + r")(?!\w)")
# A toy model's methods that judge and record its calls (problems/support/toy_models.py).
TOY_METHODS = ("record", "logits", *RECORDS)
# Methods whose call reaches past what a solution is handed: a toy model's raw scores skip the
# judging of its calls.
CALLED = {"logits": "calls a toy model's scoring directly (a probe's)"}


# Builtins that run or reach code this scan cannot read.
HIDDEN = {
    "exec": "runs code built at run time",
    "eval": "runs code built at run time",
    "compile": "builds code at run time",
    "globals": "reads its module's globals",
    "vars": "reads an object's attributes as a dict",
    "dir": "lists every attribute of an object",
}
