"""Run a program as HF `evaluate`'s `code_eval` ran it (lm-eval 0.4.8's MBPP/HumanEval metric, Fast-dLLM's HumanEval).

code_eval executes `candidate + "\\n" + test` with `exec(program, {})` in a forked child: the program's
`__name__` is therefore `"builtins"` (an `if __name__ == "__main__":` block never runs); before that its
`reliability_guard` replaces the calls below with None (calling one raises TypeError) and hides a few modules
(importing one raises ImportError; `tempfile` keeps working, its directory having been looked up before the
guard, and so do the modules of PRELOADED that the program names); stdout/stderr go to a buffer and reading stdin raises OSError; a SIGALRM
timer raises a timeout exception after `timeout` wall-clock seconds (3.0 by default), and the child is killed
one second later if it is still alive. Everything else (memory, CPU time) is unlimited there.

`CODE_EVAL_SETUP` and `CODE_EVAL_RUNNER` reproduce this with the sandbox's two processes (sandbox.ProgramWithTests,
sandbox_split.py): the setup (the same guard and buffers) runs in the candidate's process before the candidate,
the tests run in the harness's process against the candidate's functions called as plain data, and code_eval's one
timer has one deadline in both. The streams are swapped by plain assignment (no context manager the program
could disarm), and the result ("passed", "timed out", "failed: <exception>", code_eval's own text) goes to the
harness's report pipe, out of the candidate's reach. On every honest program its verdict and text are code_eval's
(tests/fixtures/tasks/paper/code_eval_probes.json).

`code_eval_program` is the published harness itself, as one program with code_eval's `with redirect_stdout(...)`
structure, in one namespace: the run that says what code_eval would have reported for a program this harness
failed (executed.py counts those verdicts).
"""

from __future__ import annotations

# reliability_guard's list (evaluate metrics/code_eval/execute.py, as loaded by lm-eval 0.4.8 and 0.4.13;
# the same list as openai/human-eval's execution.py). Names missing on Linux (lchflags, lchmod) are set too.
DISABLED_OS = ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty",
               "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown",
               "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir")
DISABLED_SHUTIL = ("rmtree", "move", "chown")
DISABLED_SUBPROCESS = ("Popen",)
DISABLED_BUILTINS = ("exit", "quit", "help")
HIDDEN_MODULES = ("ipdb", "joblib", "resource", "psutil", "tkinter")
# Modules already imported in the lm-eval process that forked code_eval's child (measured in lm-eval 0.4.13 with
# its evaluator, tasks, HF model and code_eval loaded) whose import fails once the guard is on: there a program
# could use them, so the wrapper imports those the program names before the guard (torch, a 2-5 s import, not).
PRELOADED = ("multiprocessing", "numpy", "pandas", "scipy")

CODE_EVAL_TIMEOUT_S = 3.0  # code_eval's `timeout` default; lm-eval passes none
KILL_GRACE_S = 1.0          # code_eval joins the child for timeout + 1 s, then kills it
STARTUP_ALLOWANCE_S = 2.0   # our sandbox's backstop also covers starting bwrap, the interpreter and PRELOADED
RESULT_PREFIX = "code_eval: "

# Runs in the candidate's process (sandbox_split.Remote.setup), before the candidate: code_eval's preloads, guard,
# buffers and timer. `busy()` (given by the sandbox) is true while the candidate's code runs: the alarm raises
# there, as code_eval's did; while the tests run it fires in the harness (CODE_EVAL_RUNNER) instead.
CODE_EVAL_SETUP = r'''
import builtins, faulthandler, io, os, shutil, signal, sys, tempfile
try:
    import subprocess
except (ImportError, PermissionError):  # refused by the sandbox's audit hook: Popen is out of reach anyway
    subprocess = None

for name in PRELOAD_NOW:
    try:
        __import__(name)
    except ImportError:
        pass
tempfile.gettempdir()  # code_eval made the child's work dir with tempfile first, so this is cached there too


class TimeoutException(Exception):
    pass


class WriteOnly(io.StringIO):
    def read(self, *args, **kwargs):
        raise OSError

    def readline(self, *args, **kwargs):
        raise OSError

    def readlines(self, *args, **kwargs):
        raise OSError

    def readable(self, *args, **kwargs):
        return False


faulthandler.disable()
for name in DISABLED_BUILTINS[:2]:
    setattr(builtins, name, None)
os.environ["OMP_NUM_THREADS"] = "1"
for module, names in ((os, DISABLED_OS), (shutil, DISABLED_SHUTIL), (subprocess, DISABLED_SUBPROCESS)):
    for name in names if module is not None else ():
        setattr(module, name, None)
for name in DISABLED_BUILTINS[2:]:
    setattr(builtins, name, None)
for name in HIDDEN_MODULES:
    sys.modules[name] = None
sys.stdout = sys.stderr = sys.stdin = WriteOnly()


def on_alarm(signum, frame):
    if busy():
        raise TimeoutException("Timed out!")


def start():
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, SECONDS)
'''

# The harness's side (sandbox.ProgramWithTests.runner): the syntax check, the tests, code_eval's result text. Its
# own timer has the same deadline as the candidate's: it raises only while the tests' own code runs. A timeout
# that the candidate's process raises counts as "timed out" only when this clock says the time is up.
CODE_EVAL_RUNNER = r'''
def run(candidate, tests, report, remote):
    import builtins, io, re, signal, sys, time
    base_error, run_code, as_code, leave, clock = BaseException, exec, compile, __import__("os")._exit, time.monotonic
    set_timer, on_signal, real, alarm = signal.setitimer, signal.signal, signal.ITIMER_REAL, signal.SIGALRM
    streams = sys.stdout, sys.stderr
    source = candidate + "\n" + tests
    preload = [name for name in PRELOADED if re.search(r"\b%s\b" % name, source)]

    class TimeoutException(Exception):
        pass

    def on_alarm(signum, frame):
        if not remote.waiting:
            raise TimeoutException("Timed out!")

    result, deadline = None, None
    try:
        try:
            whole = as_code(source, "<string>", "exec")  # a syntax error reads as in code_eval's one program
            try:
                as_code(candidate, "<string>", "exec")
                checks = as_code(tests, "<string>", "exec")
            except SyntaxError as e:
                raise SyntaxError("the program's text runs into the tests (%s)" % (e,)) from None
            del whole
            remote.setup(SETUP.replace("PRELOAD_NOW", repr(preload)), main=False, filename="<string>")
            sys.stdout = sys.stderr = io.StringIO()
            deadline = clock() + SECONDS
            on_signal(alarm, on_alarm)
            set_timer(real, SECONDS)
            space = remote.run(candidate, checks, modules=PRELOADED, name="builtins")
            run_code(checks, space)
        finally:
            set_timer(real, 0)
    except TimeoutException:
        result = "timed out"
    except base_error as e:
        late = deadline is not None and clock() >= deadline
        if late and type(e).__name__ == "TimeoutException" and getattr(e, "from_candidate", False):
            result = "timed out"
        else:
            try:
                result = "failed: %s" % (e,)
            except base_error:
                result = "failed: (an exception that cannot be printed)"
    finally:
        sys.stdout, sys.stderr = streams
    if result is None:
        report("P")
        return
    report("T" if result == "timed out" else "F", result.replace("\n", " "))
    remote.close()
    leave(1)
'''


_WRAPPER = r'''
def _code_eval_run(source, seconds):
    import builtins, contextlib, faulthandler, io, os, re, shutil, signal, sys, tempfile
    try:
        import subprocess
    except (ImportError, PermissionError):  # refused by the sandbox's audit hook: Popen is out of reach anyway
        subprocess = None

    for name in PRELOADED:
        if re.search(r"\b%s\b" % name, source):
            try:
                __import__(name)
            except ImportError:
                pass
    tempfile.gettempdir()  # code_eval made the child's work dir with tempfile first, so this is cached there too

    class TimeoutException(Exception):
        pass

    class WriteOnly(io.StringIO):
        def read(self, *args, **kwargs):
            raise OSError

        def readline(self, *args, **kwargs):
            raise OSError

        def readlines(self, *args, **kwargs):
            raise OSError

        def readable(self, *args, **kwargs):
            return False

    class redirect_stdin(contextlib._RedirectStream):
        _stream = "stdin"

    faulthandler.disable()
    for name in DISABLED_BUILTINS[:2]:
        setattr(builtins, name, None)
    os.environ["OMP_NUM_THREADS"] = "1"
    for module, names in ((os, DISABLED_OS), (shutil, DISABLED_SHUTIL), (subprocess, DISABLED_SUBPROCESS)):
        for name in names if module is not None else ():
            setattr(module, name, None)
    for name in DISABLED_BUILTINS[2:]:
        setattr(builtins, name, None)
    for name in HIDDEN_MODULES:
        sys.modules[name] = None

    def on_alarm(signum, frame):
        raise TimeoutException("Timed out!")

    report, leave = os.write, os._exit
    try:
        stream = WriteOnly()
        with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream), redirect_stdin(stream):
            signal.setitimer(signal.ITIMER_REAL, seconds)
            signal.signal(signal.SIGALRM, on_alarm)
            try:
                exec(source, {})
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        return
    except TimeoutException:
        result = "timed out"
    except BaseException as e:
        result = "failed: %s" % (e,)
    report(2, ("\nRESULT_PREFIX" + result.replace("\n", " ") + "\n").encode("utf-8", "replace"))
    leave(1)

_code_eval_run(SOURCE, SECONDS)
'''


def code_eval_program(program: str, timeout_s: float = CODE_EVAL_TIMEOUT_S) -> str:
    """A program that runs `program` under code_eval's semantics and reaches its end only if code_eval passes it."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s={timeout_s!r}: expected a positive number of wall-clock seconds")
    text = _WRAPPER
    for name in ("DISABLED_OS", "DISABLED_SHUTIL", "DISABLED_SUBPROCESS", "DISABLED_BUILTINS", "HIDDEN_MODULES",
                 "PRELOADED"):
        text = text.replace(name, repr(globals()[name]))
    text = text.replace("RESULT_PREFIX", RESULT_PREFIX).replace("SECONDS", repr(float(timeout_s)))
    return text.replace("SOURCE", repr(program))  # last: the program's own text is never rewritten


def code_eval_runner(timeout_s: float = CODE_EVAL_TIMEOUT_S) -> str:
    """The harness runner (sandbox.ProgramWithTests.runner) judging a candidate and its tests as code_eval did:
    its setup (CODE_EVAL_SETUP) runs in the candidate's process, the tests in the harness's."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s={timeout_s!r}: expected a positive number of wall-clock seconds")
    setup = CODE_EVAL_SETUP
    for name in ("DISABLED_OS", "DISABLED_SHUTIL", "DISABLED_SUBPROCESS", "DISABLED_BUILTINS", "HIDDEN_MODULES"):
        setup = setup.replace(name, repr(globals()[name]))
    setup = setup.replace("SECONDS", repr(float(timeout_s)))
    text = CODE_EVAL_RUNNER.replace("PRELOADED", repr(PRELOADED)).replace("SECONDS", repr(float(timeout_s)))
    return text.replace("SETUP", repr(setup))


def kill_after_s(timeout_s: float = CODE_EVAL_TIMEOUT_S) -> float:
    """The sandbox's wall-clock backstop for a code_eval run: code_eval's kill time plus interpreter start-up."""
    return timeout_s + KILL_GRACE_S + STARTUP_ALLOWANCE_S


def code_eval_result(report: str, passed: bool) -> str:
    """code_eval's result text for a run of CODE_EVAL_RUNNER: "passed", or the reported "timed out" / "failed: ...";
    "" when the sandbox itself ended the run (backstop, memory), which the caller reports from its status."""
    return "passed" if passed else report
