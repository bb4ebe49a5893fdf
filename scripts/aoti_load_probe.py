"""Where AOTInductor's package loader crashes: one package built, then loaded in fresh processes, each one way.

    python scripts/aoti_load_probe.py [--device cuda]

Session 19 saw ``torch._inductor.aoti_load_package`` segfault on the H200 (torch 2.11, CUDA 13) right after
CorrTrack's compile job built the package in the same process (inside inference mode and autocast, inline).
This probe separates the suspects with a small conv + linear module (weights frozen in as constants, as
CorrTrack's are), through trackscope's own ``PackageStore`` (engine/trackers/compile_packages.py):

  build        a fresh process writes the package (``PackageStore.write``: export + AOTInductor; no load)
  load:MODE    a fresh process loads it and runs it once, checking the output against the eager module;
               MODE plain | inference (under inference_mode) | autocast (inference_mode + bf16 autocast, the
               job's context) | thread (loaded in a worker thread) | after_eager (after eager CUDA work)
  build_load   a fresh process builds and then loads in the same process (what the job did), and
  build_load_inference   the same inside inference_mode + autocast (the job's context).

Each step is its own subprocess (the three builds at once), so a segfault is a return code (-11), not the end of
the probe. Prints one
row per step and a JSON line. Exits 0 with a line where there is no CUDA device.
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
LOAD_MODES = ("plain", "inference", "autocast", "thread", "after_eager")
STEP_TIMEOUT_S = 240
KEY = {"version": 1, "name": "aoti_load_probe", "what": "conv+linear 8x3x64x64"}


def _module(torch):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
                              torch.nn.Flatten(), torch.nn.Linear(256, 32)).to(DEVICE).eval()
    x = torch.randn(8, 3, 64, 64, device=DEVICE, generator=torch.Generator(DEVICE).manual_seed(1))
    return net, x


def _context(torch, mode: str):
    if mode in ("inference", "build_load_inference"):
        return torch.inference_mode()
    if mode == "autocast":
        class Both:
            def __enter__(self):
                self.a, self.b = torch.inference_mode(), torch.autocast(DEVICE, dtype=torch.bfloat16)
                self.a.__enter__()
                self.b.__enter__()

            def __exit__(self, *exc):
                self.b.__exit__(*exc)
                self.a.__exit__(*exc)
        return Both()
    return nullcontext()


def step(role: str, folder: Path) -> dict:
    import torch

    from engine.trackers.compile_packages import PackageStore

    store = PackageStore(folder)
    net, x = _module(torch)
    with torch.no_grad():
        expected = net(x).float()
    out: dict = {"role": role}
    t0 = time.perf_counter()
    if role.startswith("build"):
        with _context(torch, role):
            out.update(store.write(net.forward, (x,), KEY, DEVICE))
        out["write_s"] = round(time.perf_counter() - t0, 2)
        if role == "build":
            return out
    mode = role.split(":", 1)[1] if ":" in role else "inference" if role == "build_load_inference" else "plain"
    if mode == "after_eager":
        for _ in range(3):
            net(x)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
    t1 = time.perf_counter()
    box: dict = {}

    def load() -> None:
        with _context(torch, mode):
            box["package"] = store.load(KEY)

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
    with torch.no_grad():
        got = package(x)
    got = got[0] if isinstance(got, (list, tuple)) else got
    out["max_abs_diff"] = float((got.float() - expected).abs().max())
    out["ok"] = out["max_abs_diff"] < 1e-2
    return out


def _start(role: str, folder: Path) -> tuple[str, float, subprocess.Popen]:
    cmd = [sys.executable, "-X", "faulthandler", __file__, "--role", role, "--folder", str(folder)]
    return role, time.perf_counter(), subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


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
        row["stderr_tail"] = stderr[-1500:]
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
        shared = Path(tmp) / "shared"
        # the three builds at once (separate folders), then the loads of the shared one, one at a time
        builds = [_start("build", shared), *(_start(r, Path(tmp) / r) for r in ("build_load", "build_load_inference"))]
        for started in builds:
            rows.append(_finish(started))
            print(json.dumps(rows[-1]), flush=True)
        for mode in LOAD_MODES:
            rows.append(_finish(_start(f"load:{mode}", shared)))
            print(json.dumps(rows[-1]), flush=True)
    print("\n| step | rc | seconds | load s | ok | error |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['role']} | {r['rc']} | {r.get('seconds', '')} | {r.get('load_s', '')} | {r.get('ok', '')} | "
              f"{(r.get('error') or '')[:80]} |")
    print(json.dumps({"aoti_load_probe": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
