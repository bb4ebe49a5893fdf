"""One extra warm run under ``torch.profiler``: the deep capture.

The capture is its own pass, never a timed run: ``capture_run`` first times the same ``run_once``
without the profiler (the caller's timed runs remain the real numbers), then runs it once under the
profiler and records both wall times, so the capture states its own overhead.

What the capture adds to a plain profiler run:

- ``trackscope.run``: one range around the captured run (the run window);
- ``trackscope.stage:NAME``: a range per StageTimer stage, through a stage observer active only
  while a capture runs;
- ``trackscope.module:PATH``: a range per call of every ``nn.Module`` under the given roots, from
  global forward pre/post hooks active only during the capture (``with_modules`` covers TorchScript
  only). PATH is the dotted path from ``named_modules()`` (``updater.blocks.2.attn``).

Bounded (``CaptureLimits``): every tensor op the profiled run makes is counted (a TorchFunctionMode,
in the capturing thread) and the run is stopped at the op after ``max_ops`` ops or ``max_seconds``:
the ops are ended from inside (the plugin call raises ``CaptureLimitReached`` there, since under the
profiler it runs in the caller's thread), the trace keeps what was recorded and ``stopped`` says why.
A Ctrl-C (or SIGTERM) during the profiled run stops it the same way at the next op and is raised to
the caller as KeyboardInterrupt once the profiler has closed. The profiler's file goes through a
temporary folder removed in ``finally``.

Nothing else raises: a profiler that is missing, already running (refused before ours starts), ended
by the plugin's own ``torch.profiler`` during the run (detected; no export, which would crash), or that
fails, yields a result whose ``error`` says so; CUDA activity missing from a GPU capture (CUPTI
unavailable) is reported the same way with the CPU part kept.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from engine.capture.trace import MODULE_PREFIX, RUN_RANGE, STAGE_PREFIX, Trace, parse_chrome_trace

log = logging.getLogger(__name__)
#: profiled runs tried when the profiler writes a malformed trace (seen once with a busy Qt thread beside it)
EXPORT_ATTEMPTS = 2
#: tensor ops a profiled run may make before it is stopped (about 0.45 ms each under the profiler on a CPU
#: here, so about 9 s, and a trace of tens of MB; a warm CorrTrack run makes about 3,000)
MAX_CAPTURED_OPS = 30_000
#: the op budget reads the clock every this many ops (a clock call per op would be its own trace events)
CLOCK_EVERY_OPS = 256
#: the error of a capture cancelled before its profiled run
CANCELLED = "the capture was cancelled"
#: how often a capture's cancel flag is relayed to the session it runs, s
CANCEL_POLL_S = 0.05
#: seconds a profiled run may take before it is stopped (checked at every op)
MAX_CAPTURE_SECONDS = 30.0


@dataclass(frozen=True)
class CaptureLimits:
    """Where a profiled run stops recording: after ``max_ops`` tensor ops or ``max_seconds``."""

    max_ops: int = MAX_CAPTURED_OPS
    max_seconds: float = MAX_CAPTURE_SECONDS

    def describe(self) -> str:
        return f"{self.max_ops:,} ops or {self.max_seconds:g} s"


class CaptureLimitReached(BaseException):  # noqa: N818 - a stop, not an error: no plugin's `except Exception`
    """Raised at the op past a capture's limit (or after Ctrl-C) inside the profiled run."""


@dataclass
class CaptureResult:
    """The outcome of one capture: the parsed trace, the raw Chrome trace, the walls, or an error."""

    device: str
    trace: Trace | None = None
    chrome: dict[str, Any] | None = None  # the profiler's Chrome trace, for export
    module_parents: frozenset[str] = frozenset()  # module paths that have children
    root_labels: dict[str, str] = field(default_factory=dict)  # root key -> its path label
    unprofiled_wall_ms: float | None = None
    profiled_wall_ms: float | None = None
    capability: tuple[int, int] | None = None
    torch_version: str = torch.__version__
    user_dirs: tuple[str, ...] = ()  # folders of the captured modules' packages: the user's code (capture.sites)
    settings: dict[str, str] = field(default_factory=dict)  # torch's flags as the run saw them (run_settings)
    error: str | None = None
    stopped: str | None = None  # why the profiled run stopped before its end (a limit, Ctrl-C), or None
    ops: int = 0  # tensor ops the profiled run made (counted by the op budget)

    @property
    def ok(self) -> bool:
        return self.trace is not None

    @property
    def overhead(self) -> float | None:
        """Profiled wall over unprofiled wall (1.3 = the capture ran 30 % slower)."""
        if not self.unprofiled_wall_ms or self.profiled_wall_ms is None:
            return None
        return self.profiled_wall_ms / self.unprofiled_wall_ms


def module_paths(roots: Mapping[str, nn.Module] | None) -> tuple[dict[int, str], frozenset[str], dict[str, str]]:
    """id(module) -> dotted path for every module under ``roots``; the paths with children; root labels.

    A root under key "" has bare child paths (``features.conv``) and is itself labelled by its class.
    """
    paths: dict[int, str] = {}
    parents: set[str] = set()
    labels: dict[str, str] = {}
    for key, root in (roots or {}).items():
        if not isinstance(root, nn.Module):
            continue
        for name, module in root.named_modules():
            if id(module) in paths:
                continue
            if name:
                path = f"{key}.{name}" if key else name
            else:
                path = key or type(root).__name__
                labels[key] = path
            paths[id(module)] = path
            if next(iter(module.children()), None) is not None:
                parents.add(path)
    return paths, frozenset(parents), labels


def _record(name: str) -> Any:
    rf = torch.autograd.profiler.record_function(name)
    rf.__enter__()
    return rf


def _close(rf: Any) -> None:
    try:
        rf.__exit__(None, None, None)
    except Exception:
        pass  # a range the profiler already dropped: nothing to balance


class _Instrumentation:
    """Module and stage ranges, installed for the duration of one capture."""

    def __init__(self, paths: dict[int, str]):
        self.paths = paths
        self.settings: dict[str, str] = {}
        self.local = threading.local()
        self.handles: list[Any] = []
        self._observer: Callable | None = None

    def _modules(self) -> list:
        stack = getattr(self.local, "modules", None)
        if stack is None:
            stack = self.local.modules = []
        return stack

    def _stages(self) -> list:
        stack = getattr(self.local, "stages", None)
        if stack is None:
            stack = self.local.stages = []
        return stack

    def _pre(self, module: nn.Module, _inputs: Any) -> None:
        path = self.paths.get(id(module))
        if path is not None:
            self._modules().append((id(module), _record(MODULE_PREFIX + path)))
            self.settings = run_settings(with_device=False)  # in the run: flags a tracker set itself included

    def _post(self, module: nn.Module, _inputs: Any, _output: Any) -> None:
        key = id(module)
        if key not in self.paths:
            return
        stack = self._modules()
        if not any(k == key for k, _ in stack):
            return
        while stack:  # close ranges left open by an inner forward that raised
            k, rf = stack.pop()
            _close(rf)
            if k == key:
                break

    def _stage(self, timer: Any, name: str, opening: bool) -> None:
        stack = self._stages()
        if opening:
            stack.append((id(timer), name, _record(STAGE_PREFIX + name)))
            return
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][0] == id(timer) and stack[i][1] == name:
                for _, _, rf in reversed(stack[i:]):
                    _close(rf)
                del stack[i:]
                return

    def install(self) -> None:
        from engine.core.stages import add_stage_observer

        hooks = torch.nn.modules.module
        self.handles.append(hooks.register_module_forward_pre_hook(self._pre))
        try:
            self.handles.append(hooks.register_module_forward_hook(self._post, always_call=True))
        except TypeError:  # an older torch without always_call: the post hook unwinds what raised
            self.handles.append(hooks.register_module_forward_hook(self._post))
        self._observer = self._stage
        add_stage_observer(self._observer)

    def remove(self) -> None:
        from engine.core.stages import remove_stage_observer

        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        if self._observer is not None:
            remove_stage_observer(self._observer)
            self._observer = None
        for _, rf in reversed(self._modules()):
            _close(rf)
        for _, _, rf in reversed(self._stages()):
            _close(rf)
        self.local = threading.local()


class _RunFailed(Exception):
    """The tracker's run raised under the profiler (told apart from the profiler failing)."""

    def __init__(self, cause: Exception):
        super().__init__(str(cause))
        self.cause = cause


def _dynamo_counters() -> dict[str, dict[str, int]]:
    """torch._dynamo's process-wide counters (graph breaks by reason, recompiles, ...), when dynamo is loaded."""
    import sys

    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return {}
    try:
        return {str(k): {str(r): int(n) for r, n in v.items()} for k, v in counters.items()}
    except Exception:  # noqa: BLE001 - a counters layout of another torch version: no evidence, no failure
        return {}


def run_settings(with_device: bool = True) -> dict[str, str]:
    """torch's global flags that change which kernels run, as strings (``Evidence.settings``)."""
    out = {
        "cudnn_benchmark": str(torch.backends.cudnn.benchmark),
        "cudnn_deterministic": str(torch.backends.cudnn.deterministic),
        "allow_tf32_matmul": str(torch.backends.cuda.matmul.allow_tf32),
        "allow_tf32_cudnn": str(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": str(torch.get_float32_matmul_precision()),
        "num_threads": str(torch.get_num_threads()),
        "interop_threads": str(torch.get_num_interop_threads()),
        "cores": str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0),
    }
    if with_device and torch.cuda.is_available() and torch.cuda.is_initialized():
        try:
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            out["device_capacity_bytes"] = str(props.total_memory)
        except Exception:  # noqa: BLE001 - a lost device: no capacity, no failure
            pass
    return out


def _probe_threads(settings: dict[str, str]) -> dict[str, str]:
    """Where the run had more intra-op threads than cores: what that costs one parallel op (engine.capture.threads)."""
    from engine.capture.threads import oversubscription_probe

    try:
        return oversubscription_probe(int(settings.get("num_threads", "0")), int(settings.get("cores", "0")))
    except (ValueError, RuntimeError) as exc:  # unreadable settings, or a thread count torch refuses: no probe
        log.warning("thread oversubscription probe skipped: %s", exc)
        return {}


def _ab_threads(settings: dict[str, str], run_ms: Callable[[], float]) -> dict[str, str]:
    """Where the run had more intra-op threads than cores: the tracker's own runs at the core count against the
    run's count (engine.capture.threads.oversubscription_ab); nothing if a run fails."""
    from engine.capture.threads import oversubscription_ab

    try:
        return oversubscription_ab(run_ms, int(settings.get("num_threads", "0")), int(settings.get("cores", "0")))
    except Exception as exc:  # noqa: BLE001 - the A/B is extra evidence: a failing run leaves the probe's reading
        log.warning("thread oversubscription A/B skipped: %s: %s", type(exc).__name__, exc)
        return {}


def _entered_compiled_code(trace: Trace) -> bool:
    """Whether the captured run ran torch.compile'd code (its region markers, as a range or as a CPU op)."""
    from engine.capture.gather import COMPILE_OPS

    return (any(r.label.startswith(COMPILE_OPS) for r in trace.annotations)
            or any(op.name.startswith(COMPILE_OPS) for op in trace.cpu_ops))


def _ab_cudnn(result: CaptureResult, run_ms: Callable[[], float]) -> dict[str, str]:
    """After a GPU capture whose run (to its end) had conv kernels with cudnn.benchmark off: the tracker's runs with
    benchmark on against off (engine.capture.settings_ab.cudnn_benchmark_ab); nothing if a run fails. Not where
    the convs are under ``REPORT_SHARE`` of the run (no saving of theirs could be reported), nor where the run
    entered compiled code (the A/B's function mode would be a new guard for dynamo: recompiles)."""
    if result.settings.get("cudnn_benchmark") != "False" or result.trace is None or result.stopped:
        return {}
    from engine.capture.finding import REPORT_SHARE
    from engine.capture.kernels import classify

    conv_ms = sum(k.dur for k in result.trace.kernels if classify(k.name).kind == "conv") / 1e3
    run = result.unprofiled_wall_ms or result.profiled_wall_ms or 0.0
    if conv_ms <= 0 or conv_ms < REPORT_SHARE * run or _entered_compiled_code(result.trace):
        return {}
    from engine.capture.settings_ab import ab_repeats, cudnn_benchmark_ab

    repeats = ab_repeats(run)
    if repeats is None:  # runs too long to repeat within the A/B's time: the rule keeps its stated assumption
        log.info("cudnn.benchmark A/B skipped: a %.0f ms run is too long to repeat for it", run)
        return {}
    try:
        return cudnn_benchmark_ab(run_ms, repeats)
    except Exception as exc:  # noqa: BLE001 - the A/B is extra evidence: a failing run leaves the rule's assumption
        log.warning("cudnn.benchmark A/B skipped: %s: %s", type(exc).__name__, exc)
        return {}


def _counter_deltas(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, str]:
    """dynamo counters that moved during the captured run (``dynamo.<group>.<name>``), and the totals so far."""
    out: dict[str, str] = {}
    for group, names in after.items():
        for name, n in names.items():
            delta = n - before.get(group, {}).get(name, 0)
            if delta:
                out[f"dynamo_run.{group}.{name}"[:200]] = str(delta)
            if group in ("graph_break", "stats", "recompiles", "frames"):
                out[f"dynamo_total.{group}.{name}"[:200]] = str(n)
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize(device)


def _timed(run_once: Callable[[], Any], device: torch.device) -> float:
    _sync(device)
    t0 = time.perf_counter()
    run_once()
    _sync(device)
    return (time.perf_counter() - t0) * 1e3


def _export(prof: Any) -> dict[str, Any]:
    """The profiler's Chrome trace, written into a temporary folder removed when done (also on an exception)."""
    with tempfile.TemporaryDirectory(prefix="trackscope-capture-") as folder:
        name = str(Path(folder) / "capture.json")
        prof.export_chrome_trace(name)
        with open(name, encoding="utf-8") as fh:
            return json.load(fh)


class _OpBudget(TorchFunctionMode):
    """Counts the tensor ops of the profiled run; raises CaptureLimitReached at the op past the limit."""

    def __init__(self, limits: CaptureLimits, cancel: threading.Event | None = None, lines: Any = None):
        super().__init__()
        self.lines = lines  # engine.capture.lines.LineMarks: each call from a forward's statement marked with its line
        self.limits = limits
        self.cancel = cancel
        self.ops = 0
        self.deadline = time.monotonic() + limits.max_seconds
        self.stopped: str | None = None

    def stop(self, why: str) -> None:
        if self.stopped is None:
            self.stopped = why

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if self.stopped is None:
            self.ops += 1
            if self.ops > self.limits.max_ops:
                self.ops -= 1
                self.stop(f"stopped recording at the limit of {self.limits.max_ops:,} ops")
            elif self.ops % CLOCK_EVERY_OPS == 0 and time.monotonic() > self.deadline:
                self.stop(f"stopped recording at the limit of {self.limits.max_seconds:g} s")
            elif self.cancel is not None and self.cancel.is_set():
                self.stop("stopped: " + CANCELLED)
        if self.stopped is not None:
            raise CaptureLimitReached(self.stopped)
        # dynamo tracing a compiled tracker traces this handler too: no marks there (a frame walk breaks its graph)
        label = None if self.lines is None or torch.compiler.is_compiling() else self.lines.caller_label()
        if label is None:
            return func(*args, **(kwargs or {}))
        with self.lines.mark(label):
            return func(*args, **(kwargs or {}))


@contextmanager
def _interrupts_stop(budget: _OpBudget) -> Iterator[list[int]]:
    """In the main thread: Ctrl-C and SIGTERM stop the run at its next op (the signals seen are yielded)."""
    seen: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return

    def handler(signum: int, _frame: Any) -> None:
        seen.append(signum)
        budget.stop("stopped by " + ("Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name))

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield seen
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


#: built-ins the op budget calls itself (its frame walk, its line marks): noise in the user's call stacks
BUDGET_BUILTINS = ("<built-in function _getframe>", "RecordFunctionFast object", "_record_function_enter",
                   "_record_function_exit")
#: torch functions it calls itself (frames named ``file(line): function``)
BUDGET_FUNCTIONS = (": is_compiling",)


def _without_budget_frames(chrome: dict[str, Any]) -> dict[str, Any]:
    """The trace without the op budget's own Python frames (one per op: noise in the user's call stacks): its
    ``__torch_function__``, the line marks' frames below it and the built-ins it calls (the op's own stays)."""
    own = f"{Path(__file__).name}("
    marks = f"{Path(__file__).parent.name}/lines.py("
    events = chrome.get("traceEvents")
    if not isinstance(events, list):
        return chrome
    frames = [e for e in events if isinstance(e, dict) and e.get("cat") == "python_function"]
    budget: set[tuple[Any, Any]] = set()
    mine: set[tuple[Any, Any]] = set()  # the marks' frames and everything below them
    for e in sorted(frames, key=lambda e: _int_or_zero((e.get("args") or {}).get("Python id"))):
        ids = e.get("args") or {}
        key, parent = (e.get("tid"), ids.get("Python id")), (e.get("tid"), ids.get("Python parent id"))
        name = str(e.get("name", "")).replace("\\", "/")
        if name.endswith(": __torch_function__") and own in name:
            budget.add(key)
        elif parent in mine or parent in budget and (marks in name or name.endswith(BUDGET_FUNCTIONS) or (
                name.startswith("<built-in") and any(b in name for b in BUDGET_BUILTINS))):
            mine.add(key)
    drop = budget | mine
    chrome["traceEvents"] = [e for e in events if not (
        isinstance(e, dict) and e.get("cat") == "python_function"
        and (e.get("tid"), (e.get("args") or {}).get("Python id")) in drop)]
    return chrome


def _int_or_zero(value: Any) -> int:
    return value if isinstance(value, int) else 0


def profiler_active() -> bool:
    """Whether a torch profiler session is already running in this thread (a second one would crash kineto)."""
    try:
        return bool(torch._C._autograd._profiler_enabled())
    except Exception:  # noqa: BLE001 - a torch without the query: assume none
        return False


def capture_run(
    run_once: Callable[[], Any],
    *,
    device: torch.device | str,
    roots: Mapping[str, nn.Module] | None = None,
    with_stack: bool = True,
    limits: CaptureLimits | None = None,
    cancel: threading.Event | None = None,
) -> CaptureResult:
    """Time ``run_once`` once without the profiler, then capture one more run under it (within ``limits``;
    ``cancel`` set stops the profiled run at its next op, like a limit).

    Raises KeyboardInterrupt when Ctrl-C (or SIGTERM) stopped the profiled run; nothing else.
    """
    device = torch.device(device)
    limits = limits or CaptureLimits()
    use_cuda = device.type == "cuda" and torch.cuda.is_available()
    result = CaptureResult(device=str(device))
    if use_cuda:
        result.capability = tuple(torch.cuda.get_device_capability(device))  # type: ignore[assignment]
    try:
        result.unprofiled_wall_ms = _timed(run_once, device)
    except Exception as exc:
        result.error = f"the run failed before the capture: {type(exc).__name__}: {exc}"
        return result
    if cancel is not None and cancel.is_set():
        result.error = CANCELLED
        return result
    try:
        from torch.profiler import ProfilerActivity
    except Exception as exc:  # a torch built without the profiler
        result.error = f"torch.profiler is unavailable: {type(exc).__name__}: {exc}"
        return result
    if profiler_active():
        result.error = ("a torch profiler is already running in this process: a second one would crash it; "
                        "the capture was skipped")
        return result
    paths, result.module_parents, result.root_labels = module_paths(roots)
    from engine.capture.sites import CodeLayers

    result.user_dirs = CodeLayers.for_modules(m for root in (roots or {}).values() for m in root.modules()).user_dirs
    from engine.capture.lines import LineMarks

    # line marks need the Python stack; dynamo would trace their handler in a compiled tracker's eager parts (more
    # frames and graphs than the tracker makes: a false recompile), so a process with compiled code gets none
    compiled = _dynamo_counters().get("frames", {}).get("total", 0) > 0
    marks = LineMarks(CodeLayers(result.user_dirs)) if with_stack and not compiled else None
    activities = [ProfilerActivity.CPU]
    if use_cuda:
        activities.append(ProfilerActivity.CUDA)
    for _attempt in range(EXPORT_ATTEMPTS):
        error = _profiled_run(run_once, device, activities, paths, with_stack, result, _OpBudget(limits, cancel, marks))
        if isinstance(error, KeyboardInterrupt):
            raise error
        if error is None or not isinstance(error, json.JSONDecodeError):
            break
        log.warning("the profiler wrote a malformed trace (%s); capturing again", error)
    if error is not None:
        result.trace = None
        result.chrome = None
        cause = error.cause if isinstance(error, _RunFailed) else error
        what = "the captured run failed" if isinstance(error, _RunFailed) else "the profiler capture failed"
        result.error = f"{what}: {type(cause).__name__}: {cause}"
        return result
    assert result.trace is not None
    result.settings.update(_probe_threads(result.settings))
    result.settings.update(_ab_threads(result.settings, lambda: _timed(run_once, device)))
    if use_cuda:
        result.settings.update(_ab_cudnn(result, lambda: _timed(run_once, device)))
    if use_cuda and not result.trace.kernels and not result.trace.runtime:
        result.error = ("the capture recorded no CUDA activity (CUPTI unavailable or blocked?): "
                        "only CPU-side data is shown")
    return result


def _profiled_run(run_once: Callable[[], Any], device: torch.device, activities: list[Any],
                  paths: Any, with_stack: bool, result: CaptureResult, budget: _OpBudget) -> BaseException | None:
    """One run under the profiler into ``result`` (wall time, chrome trace, parsed trace); the error, if any
    (a KeyboardInterrupt when a signal stopped it)."""
    from torch.profiler import profile

    instrumentation = _Instrumentation(paths)
    ended_by_another = False
    counters_before = _dynamo_counters()
    try:
        with _interrupts_stop(budget) as signals, profile(activities=activities, record_shapes=True,
                                                          with_stack=with_stack, profile_memory=True) as prof:
            instrumentation.install()
            try:
                _sync(device)
                t0 = time.perf_counter()
                with torch.autograd.profiler.record_function(RUN_RANGE):
                    try:
                        with budget:
                            run_once()
                    except CaptureLimitReached:
                        pass
                    except Exception as exc:
                        if budget.stopped is None:  # a stop inside plugin code comes back as its failure
                            raise _RunFailed(exc) from exc
                _sync(device)
                result.profiled_wall_ms = (time.perf_counter() - t0) * 1e3
                result.settings = {**run_settings(), **instrumentation.settings,
                                   "line_marks": str(budget.lines is not None),
                                   **_counter_deltas(counters_before, _dynamo_counters())}
                ended_by_another = not profiler_active()
            finally:
                instrumentation.remove()
        result.ops, result.stopped = budget.ops, budget.stopped
        if signals:
            return KeyboardInterrupt()
        if ended_by_another:  # exporting a session someone else ended crashes the process (seen: rc -11)
            raise RuntimeError("a torch.profiler session inside the captured run (the plugin's own?) ended the "
                               "capture's; run the plugin without its profiler for a deep capture")
        result.chrome = _without_budget_frames(_export(prof))
        result.trace = parse_chrome_trace(result.chrome)
    except Exception as exc:
        instrumentation.remove()
        return exc
    return None


@contextmanager
def _cancel_relayed(cancel: threading.Event | None, session: Any) -> Iterator[None]:
    """While inside: ``cancel`` set cancels ``session`` (its run ends at the next batch; a plugin call outside
    the profiler that does not return is abandoned by engine.trackers.guard)."""
    if cancel is None:
        yield
        return
    done = threading.Event()

    def relay() -> None:
        while not done.wait(CANCEL_POLL_S):
            if cancel.is_set():
                session.cancel()
                return

    watcher = threading.Thread(target=relay, name="trackscope-capture-cancel", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()


def tracker_roots(tracker: Any) -> dict[str, nn.Module]:
    """The module roots of a tracker: a plugin's module, or a built-in tracker's ``model``."""
    for attr in ("plugin", "model"):
        module = getattr(tracker, attr, None)
        if isinstance(module, nn.Module):
            return {"": module}
    return {"": tracker} if isinstance(tracker, nn.Module) else {}


def capture_session(
    make_session: Callable[[], Any],
    roots: Mapping[str, nn.Module] | None = None,
    *,
    device: torch.device | str | None = None,
    with_stack: bool = True,
    limits: CaptureLimits | None = None,
    cancel: threading.Event | None = None,
) -> CaptureResult:
    """Capture one more warm run of a session: ``make_session()`` builds a fresh Session per run.

    ``cancel`` set ends each run at its next batch (and the profiled one at its next op). ``roots`` defaults
    to the session's tracker (plugin module or built-in model); ``device`` to the
    session's configured device.
    """
    probe = make_session()
    if device is None:
        from engine.core.devices import resolve_device

        try:
            device = resolve_device(probe.config.device)
        except Exception as exc:
            return CaptureResult(device=str(probe.config.device), error=f"cannot capture: {exc}")
    sessions = [probe]

    def run_once() -> None:
        session = sessions.pop() if sessions else make_session()
        last = None
        with _cancel_relayed(cancel, session):
            for event in session.events():
                last = event
        if type(last).__name__ == "Failed":
            raise RuntimeError(getattr(last, "message", "the run failed"))
        if roots is None and not holder:
            holder.update(tracker_roots(getattr(session, "_tracker", None)))

    holder: dict[str, nn.Module] = {}
    if roots is None:
        # one plain run loads the tracker, so its modules are known before the capture
        try:
            run_once()
        except Exception as exc:
            return CaptureResult(device=str(device), error=f"the run failed before the capture: {exc}")
        if cancel is not None and cancel.is_set():
            return CaptureResult(device=str(device), error=CANCELLED)
        roots = holder
    return capture_run(run_once, device=device, roots=roots, with_stack=with_stack, limits=limits, cancel=cancel)
