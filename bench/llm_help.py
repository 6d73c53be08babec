#!/usr/bin/env python
"""What the llm plugin costs every ``llm`` command: ``llm --help`` with and without it.

llm imports every installed plugin on every command and calls the hooks that register
commands; ``plugins/llm-vancetope-rag`` must not make that slower by more than 100 ms. Each
run is a fresh ``python -m llm --help`` process; the two variants alternate run by run
(``LLM_LOAD_PLUGINS`` picks the plugins: ``llm-echo`` alone, then with the plugin), so load
on the shared machine hits both alike. The difference of two ~1-2 s process times is noisy on
a busy machine, so the plugin's own share is also timed inside one process: importing it
after llm and running the hooks every command runs (``register_commands``) or that cheap
commands run (``register_models``, fragment loaders, embedding models).

    python bench/llm_help.py [--runs 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _machine import machine_line

VARIANTS = {"without": "llm-echo", "with": "llm-echo,llm-vancetope-rag"}
TARGET_MS = 100.0


def one_run(plugins: str, user_path: str) -> float:
    env = {**os.environ, "LLM_LOAD_PLUGINS": plugins, "LLM_USER_PATH": user_path}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "llm", "--help"], env=env, capture_output=True, text=True
    )
    elapsed = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"llm --help failed ({plugins}): {proc.stderr}")
    if ("rag " in proc.stdout) != ("vancetope" in plugins):
        raise SystemExit(f"the plugin was {'not ' if 'vancetope' in plugins else ''}loaded")
    return elapsed


IN_PROCESS = """
import time, click, llm, llm.cli
models = llm.get_models_with_aliases()  # llm's own work, not the plugin's
t0 = time.perf_counter()
import llm_vancetope_rag as p
t1 = time.perf_counter()
p.register_commands(cli=click.Group())
p.register_models(register=lambda *a, **k: None, model_aliases=models)
p.register_fragment_loaders(register=lambda *a: None)
p.register_embedding_models(register=lambda *a: None)
t2 = time.perf_counter()
print((t1 - t0) * 1000, (t2 - t1) * 1000)
"""


def in_process(user_path: str) -> tuple[float, float]:
    """(import ms, hooks ms) of the plugin in a process where llm has loaded no plugin."""
    env = {**os.environ, "LLM_LOAD_PLUGINS": "llm-echo", "LLM_USER_PATH": user_path}
    out = subprocess.run(
        [sys.executable, "-c", IN_PROCESS], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as user_path:
        for plugins in VARIANTS.values():  # warm the file cache, not counted
            one_run(plugins, user_path)
        for _ in range(args.runs):
            for name, plugins in VARIANTS.items():
                times[name].append(one_run(plugins, user_path))
        inner = [in_process(user_path) for _ in range(args.runs)]
    import_ms = statistics.median(i for i, _ in inner)
    hooks_ms = statistics.median(h for _, h in inner)
    p50 = {name: statistics.median(t) for name, t in times.items()}
    extra = p50["with"] - p50["without"]
    if args.json:
        out = {"runs": args.runs, "p50_ms": p50, "extra_ms": extra}
        print(json.dumps({**out, "import_ms": import_ms, "hooks_ms": hooks_ms}))
        return
    print(f"llm --help over {args.runs} runs per variant (fresh process each)")
    for name in VARIANTS:
        t = sorted(times[name])
        print(f"  {name:>8} plugin  p50 {p50[name]:7.1f} ms  min {t[0]:7.1f} ms")
    verdict = "met" if extra < TARGET_MS else "MISSED"
    print(f"  the plugin adds {extra:.1f} ms at p50 (target < {TARGET_MS:.0f} ms: {verdict})")
    print(f"  in one process (p50): importing it {import_ms:.1f} ms, its hooks {hooks_ms:.1f} ms")
    print(machine_line())


if __name__ == "__main__":
    main()
