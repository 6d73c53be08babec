"""The machine line every benchmark prints (shared by the bench scripts)."""

from __future__ import annotations

import datetime as _dt
import os
import platform


def machine_line() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            kb = int(fh.readline().split()[1])
            mem = f"{kb / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    try:
        import torch

        torch_v = torch.__version__
        threads = torch.get_num_threads()
    except ImportError:
        torch_v, threads = "-", 0
    return (
        f"machine: {cpu}, {os.cpu_count()} cores, {mem} RAM, Python {platform.python_version()}, "
        f"torch {torch_v} ({threads} threads), {platform.system()} {platform.release()}, "
        f"{_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC"
    )
