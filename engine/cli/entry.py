"""`trackscope ...`: the command line. `trackscope` alone opens the GUI.

Exit codes: 0 success, 2 bad usage or bad input (one-line reason on stderr), 1 internal error, 130 Ctrl-C.
The host running out of memory (MemoryError) and a write the disk refuses (full, read-only, a size
limit) are exit 2 with one line, never a traceback. Standard output closed under the command (a plugin
that closes ``sys.stdout`` or file descriptor 1) is exit 2 with one line on stderr saying the output was
lost; a reader that leaves a pipe early (``trackscope ... | head``) is exit 0, quietly.
Every verb takes ``-v`` (INFO) and ``-vv`` (DEBUG): the log on stderr (``engine.core.logs``); without it, warnings.
Subcommands owned by other modules expose ``add_arguments(parser)`` and ``run(args) -> int``.
Verbs owned outside the engine (the app's ``gui``) are found through the ``trackscope.commands``
entry point group (pyproject.toml), so the engine names no app module.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import io
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import NoReturn, Sequence

from engine.core.errors import UserError
from engine.core.logs import stderr_logging
from engine.core.outputs import is_write_error

#: subcommand -> (module, one-line help); each module has add_arguments(parser) and run(args)
SUBCOMMANDS = {
    "track": ("engine.cli.track", "track points in a video, write tracks NPZ/CSV"),
    "eval": ("engine.cli.evaluate", "grade a tracker on an evaluation set (TAP-Vid metrics)"),
    "cycle": ("engine.cli.cycle", "forward-backward cycle error on videos without ground truth, LK beside it"),
    "sample": ("engine.cli.sample", "write synthetic videos with ground truth"),
    "bench": ("engine.cli.bench", "benchmark precisions x batch sizes, write reports"),
    "compare": ("engine.cli.compare", "compare two run reports stage by stage"),
    "diff": ("engine.cli.diff", "diff two runs (or a run and its projection): deltas, reasons, what the specs explain"),
    "diagnose": ("engine.cli.diagnose", "print the findings of a run report"),
    "gate": ("engine.cli.gate", "hold a run against a baseline with tolerances: exit 0 pass, 1 fail (CI)"),
    "train": ("engine.cli.train", "train the CorrTrack model on synthetic videos"),
    "fleet": ("engine.cli.fleet", "bench configurations on every GPU of a Ray cluster, one folder"),
}
#: entry point group of the verbs that installed packages add (name = "module")
ENTRY_POINT_GROUP = "trackscope.commands"
#: the verb of `trackscope` alone or on a file: the desktop app, declared by its package
DEFAULT_VERB = "gui"
#: help lines of the verbs the engine expects from entry points (the module itself is not named here)
ENTRY_POINT_HELP = {DEFAULT_VERB: "open the desktop app (on a video or a report to replay)"}
#: what to do when the host runs out of memory
MEMORY_HINT = "track fewer frames (--max-frames N), a shorter clip, or fewer points"


def commands() -> dict[str, tuple[str, str]]:
    """Every verb: the engine's own first, then those of the ``trackscope.commands`` entry points."""
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    verbs = {ep.name: (ep.module, ENTRY_POINT_HELP.get(ep.name, f"from {ep.module}"))
             for ep in found if ep.name not in SUBCOMMANDS}  # an entry point cannot replace an engine verb
    return {**verbs, **SUBCOMMANDS}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        self.print_usage(sys.stderr)
        print(f"trackscope: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="trackscope", description="Diagnostic workbench for GPU point tracking.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    for name, (module_name, help_text) in commands().items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if only is not None and name != only:
            continue
        module = importlib.import_module(module_name)
        module.add_arguments(p)
        p.add_argument("-v", "--verbose", action="count", default=0,
                       help="show the log: -v informational messages, -vv debugging ones too (default: warnings)")
        p.set_defaults(_module=module)
    return parser


def _looks_like_command(word: str) -> bool:
    """A bare word that is no option and no existing file or folder: a mistyped subcommand."""
    return not word.startswith("-") and not Path(word).exists() and not any(c in word for c in "./\\")


def main(argv: Sequence[str] | None = None) -> int:
    own_command = argv is None  # the process's own command line, not a caller's main([...])
    argv = list(sys.argv[1:] if argv is None else argv)
    verbs = commands()
    first = argv[0] if argv else ""
    if first and first not in verbs and _looks_like_command(first):
        print(f"trackscope: error: unknown command {first!r} (choose from {', '.join(verbs)})",
              file=sys.stderr)
        return 2
    if not argv or (first not in verbs and first not in ("-h", "--help")):
        if DEFAULT_VERB not in verbs:
            print(f"trackscope: cannot start {DEFAULT_VERB}: no package declares it in the {ENTRY_POINT_GROUP!r} "
                  "entry points (install the app: pip install -e .)", file=sys.stderr)
            return 1
        argv = [DEFAULT_VERB, *argv]  # `trackscope`, `trackscope VIDEO`, `trackscope --run`: the app
    command = argv[0] if argv[0] in verbs else None  # None: -h/--help, which parse_args answers and exits
    try:
        parser = build_parser(only=command)
    except ImportError as exc:
        print(f"trackscope: cannot start {command or 'trackscope'}: {exc}", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    with stderr_logging(getattr(args, "verbose", 0)):
        code = _run(args)
    if own_command:  # threads a plugin left cannot hold the process (a caller's own threads are its own)
        exit_past_lingering_threads(code)
    return code


def exit_past_lingering_threads(code: int) -> None:
    """When threads a plugin left (non-daemon, or abandoned calls) are still running, or a background compile:
    name them, flush and end the process with ``code`` now instead of waiting for them forever (or aborting in
    interpreter finalisation under a compile). Returns when there are none."""
    from engine.trackers.compiled_switch import compile_in_flight
    from engine.trackers.guard import lingering_threads

    left = lingering_threads()
    if left:
        names = ", ".join(repr(t.name) for t in left)
        print(f"trackscope: warning: {len(left)} thread(s) still running after the command ({names}), most likely "
              "a plugin's; exiting without waiting for them", file=sys.stderr)
    elif compile_in_flight():  # a daemon, but a process exiting under Inductor's threads aborts
        print("trackscope: note: a background compile was still running; it is dropped (its cache is not "
              "written)", file=sys.stderr)
    else:
        return
    logging.shutdown()  # what atexit would have flushed
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed (a reader that left): nothing more to write
            pass
    os._exit(code)


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command; its exit code (errors printed as one line, internal ones with the traceback)."""
    try:
        return int(args._module.run(args) or 0)
    except UserError as exc:
        print(f"trackscope {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `trackscope ... | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("trackscope: interrupted", file=sys.stderr)
        return 130
    except MemoryError:  # host out of memory: the estimate (engine.run.memory) missed it; no traceback
        print(f"trackscope {args.command}: error: the host ran out of memory ({MEMORY_HINT})", file=sys.stderr)
        return 2
    except OSError as exc:
        if stdout_lost():
            return _stdout_lost_error(args.command)
        if not is_write_error(exc):
            return _internal()
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"trackscope {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except Exception:
        if stdout_lost():
            return _stdout_lost_error(args.command)
        return _internal()


def stdout_lost() -> bool:
    """Whether standard output can no longer be written: ``sys.stdout`` closed or gone, or fd 1 closed."""
    out = sys.stdout
    if out is None or out.closed:
        return True
    try:
        os.fstat(out.fileno())
    except io.UnsupportedOperation:  # an in-memory stream (a caller's capture): it is open
        return False
    except (OSError, ValueError):
        return True
    return False


def _stdout_lost_error(command: str) -> int:
    """Standard output was closed under the command: say so on stderr (when it is still there); exit 2."""
    try:
        print(f"trackscope {command}: error: standard output was closed while the command ran (by a plugin?), "
              "so its output is lost", file=sys.stderr)
    except (OSError, ValueError):
        pass
    return 2


def _internal() -> int:
    """Print the traceback of the exception being handled; exit 1 (a bug)."""
    traceback.print_exc()
    print("trackscope: internal error (a bug: please report it with the traceback above)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
