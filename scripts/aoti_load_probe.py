"""Where AOTInductor's package loader crashes, and whether dynamo's precompile loads: packages loaded fresh.

    python scripts/aoti_load_probe.py

Session 19 saw ``torch._inductor.aoti_load_package`` segfault on the H200 (torch 2.11, CUDA 13) right after
CorrTrack's compile job built the package in the same process (inside inference mode and autocast, inline).
This probe separates the suspects with a small conv + linear module, through trackscope's own ``PackageStore``
(engine/trackers/compile_packages.py), one package per variant (``VARIANTS``):

  default      the weights frozen into the shared library as constants (what CorrTrack's packages do)
  noconst      constants kept out of the library (``aot_inductor.package_constants_in_so`` False), handed to
               the loaded runner with ``load_constants``
  weights_in   no constants at all: a function of (x, *weights) through ``torch.func.functional_call``
  cpu          the default variant on the CPU: whether the crash is the CUDA side or the loader itself
  precompile   not AOTInductor: dynamo's precompile (``aot_compile``, saved and loaded through the store's
               "precompile" kind, the module as external data), the route the tracker's "precompile" backend
               takes; also loaded with an empty Inductor cache (``load:precompile:cold``: what the file alone
               brings, kernels compiled again or not)
  precompile_cpu  the precompile variant on the CPU

Steps: ``build:VARIANT`` (a fresh process exports and compiles, no load; all builds at once), then
``load:VARIANT`` in a fresh process each (load, one call, output against the eager module), and the default
variant loaded in the job's contexts (``load:default:MODE``, MODE inference | autocast | thread | after_eager).
Session 20's first probe (call A) found the default package segfaulting in a fresh process, plain, on the H200.
Each step is its own subprocess, so a segfault is a return code (-11), not the end of the probe; a failed step
keeps its stderr before the fatal error and the fatal error's stack. Prints one row per step and a JSON line.
Every step shares one Inductor cache folder in the probe's temporary folder (as the tracker's keyed one), except
a ``cold`` load. PROBE_VARIANTS=precompile,precompile_cpu probes only those. Exits 0 with a line where there is
no CUDA device (PROBE_DEVICE=cpu runs the cpu variants here).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEVICE = os.environ.get("PROBE_DEVICE", "cuda")  # "cpu" checks the script here (C++ builds: slow)
#: a comma-separated subset of VARIANTS to probe (e.g. "precompile,precompile_cpu"); unset: all for DEVICE
ONLY = [v for v in os.environ.get("PROBE_VARIANTS", "").split(",") if v.strip()]
LOAD_MODES = ("plain", "inference", "autocast", "thread", "after_eager")
#: a load step's mode that runs it with an empty Inductor cache (precompile variants)
COLD = "cold"
STEP_TIMEOUT_S = 240
KEY = {"version": 1, "name": "aoti_load_probe", "what": "conv+linear 8x3x64x64"}


def _module(torch, device: str):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
                              torch.nn.Flatten(), torch.nn.Linear(256, 32)).to(device).eval()
    x = torch.randn(8, 3, 64, 64, device=device, generator=torch.Generator(device).manual_seed(1))
    return net, x


def _context(torch, mode: str, device: str):
    if mode == "inference":
        return torch.inference_mode()
    if mode == "autocast":
        class Both:
            def __enter__(self):
                self.a, self.b = torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16)
                self.a.__enter__()
                self.b.__enter__()

            def __exit__(self, *exc):
                self.b.__exit__(*exc)
                self.a.__exit__(*exc)
        return Both()
    return nullcontext()


#: how each package variant is built: (device, Inductor configs, weights as inputs instead of constants, the
#: store's package kind)
VARIANTS = {
    "default": ("cuda", None, False, "aoti"),
    "noconst": ("cuda", {"aot_inductor.package_constants_in_so": False}, False, "aoti"),  # constants after load
    "weights_in": ("cuda", None, True, "aoti"),  # no constants at all: the weights are inputs of every call
    "cpu": ("cpu", None, False, "aoti"),  # the same loader on a CPU package: CUDA's part or the loader's
    "precompile": ("cuda", None, False, "precompile"),  # dynamo's aot_compile instead of AOTInductor
    "precompile_cpu": ("cpu", None, False, "precompile"),
}


def _callable(torch, net, weights_in: bool):
    """(fn, extra inputs): the module's forward, or a function of (x, *weights) with no constants."""
    if not weights_in:
        return net.forward, ()
    names = [name for name, _ in net.named_parameters()]

    def functional(x, *params):
        return torch.func.functional_call(net, dict(zip(names, params)), (x,))

    functional.__module__ = __name__
    return functional, tuple(p.detach() for _, p in net.named_parameters())


def step(role: str, folder: Path) -> dict:
    """role: build:VARIANT | load:VARIANT[:MODE] | build_load:VARIANT[:inference]."""
    import torch

    from engine.trackers.compile_packages import PackageStore, call_key, weights_digest

    verb, variant, *rest = role.split(":")
    mode = rest[0] if rest else "plain"
    device, configs, weights_in, kind = VARIANTS[variant]
    store = PackageStore(folder / variant, kind=kind)
    net, x = _module(torch, device)
    fn, extra = _callable(torch, net, weights_in)
    with torch.no_grad():
        expected = net(x).float()
        # precompile: a real call key (its grad mode and autocast are what the store compiles and loads under)
        key = KEY if kind == "aoti" else call_key(KEY["name"], fn, (x, *extra), device, weights_digest(net), kind=kind)
    out: dict = {"role": role}
    t0 = time.perf_counter()
    if verb in ("build", "build_load"):
        with _context(torch, mode, device):
            out.update(store.write(fn, (x, *extra), key, device, configs=configs))
        out["write_s"] = round(time.perf_counter() - t0, 2)
        if verb == "build":
            return out
    if mode == "after_eager":
        for _ in range(3):
            net(x)
        if device == "cuda":
            torch.cuda.synchronize()
    t1 = time.perf_counter()
    box: dict = {}

    def load() -> None:
        with _context(torch, mode, device):
            box["package"] = store.load(key, fn)

    if mode == "thread":
        worker = threading.Thread(target=load, name="probe-load")
        worker.start()
        worker.join()
    else:
        load()
    package = box.get("package")
    out["load_s"] = round(time.perf_counter() - t1, 3)
    if package is None:
        out["error"] = "; ".join(store.notes) or "not loaded"
        return out
    if configs and configs.get("aot_inductor.package_constants_in_so") is False:
        state = {f"owner.{k}": v for k, v in net.state_dict().items()}
        fqns = list(package.runner.get_constant_fqns())
        out["constants"] = len(fqns)
        package.runner.load_constants({f: state[f] for f in fqns if f in state}, check_full_update=True,
                                      user_managed=True)
    t2 = time.perf_counter()
    with torch.no_grad():
        got = package(x, *extra)
    got = got[0] if isinstance(got, (list, tuple)) else got
    out["max_abs_diff"] = float((got.float() - expected).abs().max())
    out["first_call_s"] = round(time.perf_counter() - t2, 3)
    if getattr(package, "guard_failure", ""):
        out["guard_failure"] = package.guard_failure  # it ran the plain module: not the route checked
    out["ok"] = out["max_abs_diff"] < 1e-2 and not out.get("guard_failure")
    return out


def _start(role: str, folder: Path) -> tuple[str, float, subprocess.Popen]:
    cmd = [sys.executable, "-X", "faulthandler", __file__, "--role", role, "--folder", str(folder)]
    cold = role.endswith(f":{COLD}")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(folder / ("inductor-" + role.replace(":", "-") if cold
                                                                   else "inductor"))}
    return role, time.perf_counter(), subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                                       env=env)


def _finish(started: tuple[str, float, subprocess.Popen]) -> dict:
    role, t0, proc = started
    try:
        stdout, stderr = proc.communicate(timeout=max(1.0, STEP_TIMEOUT_S - (time.perf_counter() - t0)))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"role": role, "rc": "timeout", "seconds": STEP_TIMEOUT_S}
    row: dict = {"role": role, "rc": proc.returncode, "seconds": round(time.perf_counter() - t0, 1)}
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if lines:
        row.update(json.loads(lines[-1]))
    if proc.returncode != 0:
        fatal = stderr.find("Fatal Python error")
        before = stderr[:fatal] if fatal >= 0 else stderr
        row["stderr_before"] = before[-1500:]
        row["stderr_tail"] = stderr[fatal:fatal + 1200] if fatal >= 0 else ""
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("aoti_load_probe: no CUDA device here; nothing probed")
        return 0
    if args.role:
        print(json.dumps(step(args.role, args.folder)), flush=True)
        return 0
    where = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu"
    print(f"aoti_load_probe: torch {torch.__version__}, CUDA {torch.version.cuda}, {where}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        variants = [v for v in VARIANTS if (DEVICE == "cuda" or VARIANTS[v][0] == "cpu") and (not ONLY or v in ONLY)]
        if not variants:
            print(f"aoti_load_probe: no variant of {sorted(VARIANTS)} chosen by PROBE_VARIANTS={','.join(ONLY)}")
            return 0
        # the builds at once (a folder per variant), then each load in a fresh process, one at a time
        builds = [_start(f"build:{v}", folder) for v in variants]
        for started in builds:
            rows.append(_finish(started))
            print(json.dumps(rows[-1]), flush=True)
        loads = [f"load:{v}" for v in variants]
        if VARIANTS[variants[0]][3] == "aoti":  # the job's contexts, for the first AOTInductor variant
            loads += [f"load:{variants[0]}:{m}" for m in LOAD_MODES if m != "plain"]
        loads += [f"load:{v}:{COLD}" for v in variants if VARIANTS[v][3] == "precompile"]
        for role in loads:
            rows.append(_finish(_start(role, folder)))
            print(json.dumps(rows[-1]), flush=True)
    print("\n| step | rc | seconds | load s | 1st call s | ok | error |\n|---|---|---|---|---|---|---|")
    for r in rows:
        error = r.get("error") or r.get("guard_failure") or ""
        print(f"| {r['role']} | {r['rc']} | {r.get('seconds', '')} | {r.get('load_s', '')} | "
              f"{r.get('first_call_s', '')} | {r.get('ok', '')} | {error[:80]} |")
    print(json.dumps({"aoti_load_probe": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
