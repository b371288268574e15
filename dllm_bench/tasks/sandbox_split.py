"""Inside the sandbox: the candidate in a process of its own, the tests in the harness's process (issue 37).

This file's text is part of the sandbox bootstrap (sandbox._BOOTSTRAP); it is not imported by the harness. The
sandbox's main process (the *harness*) forks the *candidate process* before it reads the report keys, makes
itself non-dumpable (so a same-uid process can neither read its memory nor take its file descriptors), and only
then reads the keys and the texts. The candidate runs in the child; the tests run in the harness against
stand-ins for the candidate's globals: calling one sends the arguments to the child as plain data, the child calls
the candidate's function and answers with the return value as plain data. No candidate code runs in the harness,
so nothing the candidate's interpreter can reach (frames, gc, memory, the audit hooks' gaps) holds a key, the
report pipe or the tests' code; and the tests compare only values the harness built itself, so an object whose
`__eq__` lies cannot cross.

Plain data, in a JSON tree (no pickle, no repr): None, bool, int, float, complex, str, bytes, bytearray, list,
tuple, dict, set, frozenset and collections' OrderedDict, defaultdict (without its factory), Counter, deque, each
of exactly that type. Anything else (a generator, an object of the candidate's class, a subclass of int) does
not cross: the call fails with a TypeError naming the type. A list, dict, set or bytearray argument the candidate
changed in place is changed in place in the harness too.
"""

# ruff: noqa: ANN001, ANN201, ANN202, ANN204

CROSSING_DEPTH = 200  # nesting deeper than this does not cross (a self-containing list, a pathological tree)
FRAME_HEADER = 12  # a message is its length in 12 decimal digits, then that many bytes of JSON


class Uncrossable(TypeError):
    """A value that is not plain data: it cannot cross between the candidate's process and the harness."""


def encode_value(value, refs=None, depth=0):
    """`value` as a JSON tree of plain data; `refs` maps a harness stand-in to its candidate global's name."""
    import collections

    if depth > CROSSING_DEPTH:
        raise Uncrossable(f"a value nested more than {CROSSING_DEPTH} deep")
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return value if -(1 << 53) < value < (1 << 53) else {"i": hex(value)}
    if kind is float:
        return {"x": value.hex()}
    if refs is not None and kind in refs:
        return {"g": refs[kind](value)}
    down = depth + 1
    if kind is list:
        return [encode_value(v, refs, down) for v in value]
    simple = {tuple: "t", set: "s", frozenset: "f", collections.deque: "q"}
    if kind in simple:
        return {simple[kind]: [encode_value(v, refs, down) for v in value]}
    mappings = {dict: "d", collections.OrderedDict: "o", collections.defaultdict: "e", collections.Counter: "n"}
    if kind in mappings:
        return {mappings[kind]: [[encode_value(k, refs, down), encode_value(v, refs, down)] for k, v in value.items()]}
    if kind is bytes or kind is bytearray:
        return {"b" if kind is bytes else "a": value.hex()}
    if kind is complex:
        return {"c": [value.real.hex(), value.imag.hex()]}
    raise Uncrossable(f"a value of type {_type_name(value)}")


def decode_value(tree, refs=None):
    """The value of a JSON tree from `encode_value`, built of this process's own types; `refs` resolves a global's
    name (the candidate's side only)."""
    import collections

    if isinstance(tree, list):
        return [decode_value(v, refs) for v in tree]
    if not isinstance(tree, dict):
        return tree
    (tag, body), = tree.items()
    if tag == "i":
        return int(body, 16)
    if tag == "x":
        return float.fromhex(body)
    if tag == "c":
        return complex(float.fromhex(body[0]), float.fromhex(body[1]))
    if tag in ("b", "a"):
        return (bytes if tag == "b" else bytearray).fromhex(body)
    if tag == "g":
        if refs is None:
            raise Uncrossable("a reference")
        return refs(body)
    items = [decode_value(v, refs) for v in body] if tag in "tsfq" else None
    if tag in "tsfq":
        return {"t": tuple, "s": set, "f": frozenset, "q": collections.deque}[tag](items)
    pairs = [(decode_value(k, refs), decode_value(v, refs)) for k, v in body]
    if tag == "e":
        return collections.defaultdict(None, pairs)
    if tag == "n":
        return collections.Counter(dict(pairs))  # from pairs, a Counter would count them
    return {"d": dict, "o": collections.OrderedDict}[tag](pairs)


def _type_name(value):
    try:
        return type(value).__qualname__
    except BaseException:
        return "an unknown type"


def _json_text(tree, quote):
    """JSON text of a tree of None, bool, int, str, list and str-keyed dict (what encode_value and the messages
    hold), by CPython's `_json` string quoting: the `json` package's import (with `re`) costs more than a sample's
    messages do."""
    if tree is None:
        return "null"
    if tree is True or tree is False:
        return "true" if tree else "false"
    if type(tree) is int:
        return str(tree)
    if type(tree) is str:
        return quote(tree)
    if type(tree) is list:
        return "[" + ",".join([_json_text(v, quote) for v in tree]) + "]"
    return "{" + ",".join([quote(k) + ":" + _json_text(v, quote) for k, v in tree.items()]) + "}"


def _codec():
    """(dumps, loads) for the messages: `_json`'s C quoting and scanner, or the `json` package where it is absent."""
    try:
        import _json
    except ImportError:
        import json

        return lambda tree: json.dumps(tree, separators=(",", ":")), json.loads

    class Strict:
        strict, object_hook, object_pairs_hook, parse_float, parse_int, memo = True, None, None, float, int, {}

        def parse_constant(self, name):
            raise ValueError(f"not plain data: {name}")

    scan, quote = _json.make_scanner(Strict()), _json.encode_basestring_ascii

    def loads(text):
        tree, end = scan(text, 0)
        if end != len(text):
            raise ValueError("a message with trailing data")
        return tree

    return lambda tree: _json_text(tree, quote), loads


CODEC = []  # (dumps, loads), made on first use


def send_message(fd, message):
    import os

    if not CODEC:
        CODEC.extend(_codec())
    data = CODEC[0](message).encode("ascii")
    data = b"%012d" % len(data) + data
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def receive_message(fd):
    """The next message, or None at end of file (the other process ended)."""
    if not CODEC:
        CODEC.extend(_codec())
    head = _read_exactly(fd, FRAME_HEADER)
    if head is None or not head.isdigit():
        return None
    body = _read_exactly(fd, int(head))
    return None if body is None else CODEC[1](body.decode("ascii"))


def _read_exactly(fd, size):
    import os

    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _error_message(error):
    """A candidate's exception as data: its type's name, its text, and SystemExit's code."""
    try:
        text = str(error)
    except BaseException:
        text = "(an exception that cannot be printed)"
    code = getattr(error, "code", None) if isinstance(error, SystemExit) else None
    return {"raised": [_type_name(error).rpartition(".")[2], text, code if type(code) in (int, str) else None]}


# ---- the candidate's process --------------------------------------------------------------------------------


def start_candidate_process(install_hook):
    """Fork the candidate's process; in the harness, return its `Remote`. The child keeps only its two pipe ends
    and the output streams, runs `install_hook()` (the audit hook), then serves until the harness ends."""
    import os

    to_child, from_harness = os.pipe()[::-1]
    from_child, to_harness = os.pipe()
    pid = os.fork()
    if pid:
        os.close(from_harness)
        os.close(to_harness)
        return Remote(pid, to_child, from_child)
    try:
        os.dup2(from_harness, 60)
        os.dup2(to_harness, 61)
        os.closerange(3, 60)
        os.closerange(62, 1 << 16)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        install_hook()
        _serve(60, 61)
    finally:
        os._exit(0)


def _serve(inp, out):
    """The candidate's side: run the setup (harness code), then the candidate; answer calls with plain data."""
    import builtins
    import sys
    import types

    def send(message):  # what the candidate printed so far reaches the captured output (this process never exits)
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except BaseException:
                pass
        send_message(out, message)

    hello = receive_message(inp)
    if hello is None:
        return
    if not hasattr(builtins, "exit"):  # `python -S` skips site, which defines exit/quit
        builtins.exit = builtins.quit = sys.exit
    busy = [False]
    setup = {"__name__": "dllm_sandbox_setup", "busy": lambda: busy[0]}
    if hello["setup"]:
        exec(compile(hello["setup"], "setup.py", "exec"), setup)
    if hello["main"]:
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        space = main.__dict__
    else:
        space = {}
    sys.argv = ["program.py"]
    send({"ready": True})
    order = receive_message(inp)
    if order is None:
        return
    if "start" in setup:
        setup["start"]()
    try:
        code = compile(order["run"], hello["filename"], "exec")
        busy[0] = True
        exec(code, space)
        busy[0] = False
    except BaseException as error:
        busy[0] = False
        send(_error_message(error))
        return
    send({"globals": _manifest(space, set(order["names"]))})

    def lookup(name):
        if name not in space:
            raise Uncrossable(f"a global the candidate no longer has: {name}")
        return space[name]

    while True:
        call = receive_message(inp)
        if call is None:
            return
        try:
            function = lookup(call["call"])
            args = [decode_value(a, lookup) for a in call["args"]]
            kwargs = {k: decode_value(v, lookup) for k, v in call["kwargs"]}
        except BaseException as error:
            send(_error_message(error))
            continue
        try:
            busy[0] = True
            result = function(*args, **kwargs)
            busy[0] = False
        except BaseException as error:
            busy[0] = False
            send(_error_message(error))
            continue
        send(_answer(result, args, kwargs))


def _answer(result, args, kwargs):
    """The return value as data, and each list/dict/set/bytearray argument as it is now (the call may change it)."""
    try:
        value = encode_value(result)
    except Uncrossable as error:
        return {"uncrossable": str(error)}
    except BaseException:
        return {"uncrossable": "a value that could not be read"}
    after = []
    for key, arg in [*enumerate(args), *kwargs.items()]:
        if type(arg) in (list, dict, set, bytearray):
            try:
                after.append([key, encode_value(arg)])
            except BaseException:
                continue
    return {"value": value, "after": after}


def _manifest(space, names):
    """What the tests see of the candidate's globals (those named in `names`, the names the tests' code uses):
    modules by name, callables and other objects as stand-ins (called in this process), plain data as data."""
    import types

    entries = []
    for name, value in list(space.items()):
        if type(name) is not str or name not in names:
            continue
        try:
            if isinstance(value, types.ModuleType):
                entries.append([name, "module", str(getattr(value, "__name__", ""))])
            elif callable(value):
                entries.append([name, "call", _type_name(value)])
            else:
                entries.append([name, "data", encode_value(value)])
        except BaseException:
            entries.append([name, "object", _type_name(value)])
    return entries


# ---- the harness's side ---------------------------------------------------------------------------------------


class Remote:
    """The harness's handle on the candidate's process: `setup`, then `run` (the candidate's globals as the tests'
    namespace), whose stand-ins `call` into it. `waiting` is true while the candidate's code runs."""

    def __init__(self, pid, out, inp):
        self.pid, self.out, self.inp = pid, out, inp
        self.waiting = False

    def setup(self, text=None, main=True, filename="program.py"):
        """Run harness code `text` (code_eval's guard, streams and timer: it may define `start()`, called just
        before the candidate runs, and read `busy()`) in the candidate's process; its namespace for the candidate
        is `__main__` (`main`) or a plain dict."""
        send_message(self.out, {"setup": text, "main": bool(main), "filename": filename})
        self._receive()

    def run(self, candidate, tests, modules=(), name="__main__"):
        """Run the candidate; returns the namespace for the code object `tests` (the candidate's globals that it
        names), or raises the candidate's exception (as data). Module globals are imported here by name when
        stdlib or in `modules` (else a stand-in)."""
        send_message(self.out, {"run": candidate, "names": sorted(code_names(tests))})
        reply = self._receive()
        return self._namespace(reply["globals"], modules, name)

    def call(self, name, args, kwargs):
        refs = {Global: lambda g: g._name}
        try:
            sent = [encode_value(a, refs) for a in args]
            named = [[k, encode_value(v, refs)] for k, v in kwargs.items()]
        except Uncrossable as error:
            raise Uncrossable(f"sandbox: {error} cannot cross to the candidate's {name} (plain data only)") from None
        send_message(self.out, {"call": name, "args": sent, "kwargs": named})
        reply = self._receive()
        if "uncrossable" in reply:
            raise Uncrossable(f"sandbox: the candidate's {name} returned {reply['uncrossable']}, which cannot cross "
                              "to the tests (plain data only: None, bool, int, float, complex, str, bytes, list, "
                              "tuple, dict, set)")
        before = dict(enumerate(sent))
        before.update(named)
        where = dict(enumerate(args))
        where.update(kwargs)
        for key, tree in reply["after"]:
            if key in where and type(where[key]) in (list, dict, set, bytearray) and tree != before.get(key):
                _write_back(where[key], decode_value(tree))
        return decode_value(reply["value"])

    def close(self):
        import os
        import signal

        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except OSError:
            pass

    def _receive(self):
        self.waiting = True
        try:
            reply = receive_message(self.inp)
        finally:
            self.waiting = False
        if reply is None:
            self._end_as_the_candidate_did()
        if "raised" in reply:
            raise candidate_error(*reply["raised"])
        return reply

    def _end_as_the_candidate_did(self):
        """The candidate's process ended (os._exit, a signal, a limit): end the same way, with no report, so the
        sandbox's status reads as it would have for a program that ended its own interpreter."""
        import os
        import signal

        _, status = os.waitpid(self.pid, 0)
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            try:
                signal.signal(number, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
            os.kill(os.getpid(), number)
            os._exit(128 + number)
        os._exit(os.waitstatus_to_exitcode(status))

    def _namespace(self, entries, modules, name):
        import builtins
        import importlib
        import sys

        space = {"__name__": name, "__builtins__": builtins}
        refused = {"antigravity", "this", "__hello__", "__phello__", "idlelib", "turtledemo", "tkinter", "turtle",
                   "test"}
        for key, kind, info in entries:
            if key.startswith("__") and key.endswith("__"):
                continue
            if kind == "data":
                space[key] = decode_value(info)
            elif kind == "module":
                top = info.partition(".")[0]
                allowed = top not in refused and (top in sys.stdlib_module_names or top in modules)
                try:
                    space[key] = importlib.import_module(info) if allowed else Global(self, key, "module " + info)
                except BaseException:
                    space[key] = Global(self, key, "module " + info)
            else:
                space[key] = Global(self, key, info)
        return space


def code_names(code):
    """Every global or attribute name a code object and the code nested in it use (a superset of the globals)."""
    names, stack = set(), [code]
    while stack:
        current = stack.pop()
        names.update(current.co_names)
        stack.extend(c for c in current.co_consts if hasattr(c, "co_names"))
    return names


class Global:
    """A stand-in in the tests' namespace for a global of the candidate: calling it calls the candidate's (in its
    process, arguments and result as plain data); as an argument it stands for the candidate's object."""

    __slots__ = ("_remote", "_name", "_kind")

    def __init__(self, remote, name, kind):
        self._remote, self._name, self._kind = remote, name, kind

    def __call__(self, *args, **kwargs):
        return self._remote.call(self._name, args, kwargs)

    def __getattr__(self, attr):
        raise Uncrossable(f"sandbox: the candidate's {self._name} ({self._kind}) is not plain data: only calling it "
                          f"crosses to the tests (.{attr})")

    def __repr__(self):
        return f"<the candidate's {self._name}>"


def candidate_error(type_name, text, code=None):
    """An exception of the harness's own making that reads as the candidate's: the same type name (a subclass of
    the builtin exception of that name where there is one, so `except ValueError` still catches it) and text."""
    import builtins

    if type_name == "SystemExit":
        error = SystemExit(code)
        error.from_candidate = True
        return error
    base = getattr(builtins, type_name, None)
    groups = getattr(builtins, "BaseExceptionGroup", SystemExit)  # Python 3.11+; it needs more than a text
    if not (isinstance(base, type) and issubclass(base, BaseException)) or issubclass(base, (SystemExit, groups)):
        base = Exception
    for parent in (base, Exception):
        try:
            made = type(type_name, (parent,), {"__str__": lambda self: text, "__module__": "candidate"})
            error = made(text)
            break
        except BaseException:
            continue
    error.from_candidate = True
    return error


def _write_back(target, value):
    """Change the tests' argument in place as the candidate changed its copy."""
    if isinstance(target, dict):
        target.clear()
        target.update(value)
    elif isinstance(target, set):
        target.clear()
        target.update(value)
    else:
        target[:] = value
