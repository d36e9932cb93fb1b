"""The multi-process machinery of benchmarks/bench_cpu.py (and so of bench_suite.py): the
coordinator's handle on a worker process, the order of each pair, whether torch is installed;
and the in-process timing of one call that bench_conv.py and bench_kernels.py share."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import IO


def call_times(fn: Callable[[], object], repeat: int, warmup: int = 1) -> list[float]:
    """Seconds of ``repeat`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _order(frameworks: list[str], i: int) -> list[str]:
    """Pair / round ``i``'s order: reversed every other time, so for any two frameworks each
    goes first equally often."""
    return frameworks if i % 2 == 0 else frameworks[::-1]


class WorkerError(RuntimeError):
    pass


BASELINE = "kiln@base"  # kiln from the source tree $KILN_BENCH_BASELINE (an older commit)


def base_framework(framework: str) -> str:
    """What a worker runs: ``kiln@base`` is kiln (from another source tree)."""
    return framework.split("@")[0]


def worker_env(framework: str) -> dict[str, str] | None:
    """The environment of ``framework``'s worker: ``kiln@base`` imports kiln from the tree
    ``$KILN_BENCH_BASELINE`` names (e.g. ``git worktree add /tmp/old <commit>``) with a kernel
    cache of its own, so an old and a new commit run side by side, interleaved, in one run."""
    if framework != BASELINE:
        return None
    tree = os.environ.get("KILN_BENCH_BASELINE")
    if not tree or not os.path.isdir(os.path.join(tree, "kiln")):
        raise WorkerError("kiln@base needs KILN_BENCH_BASELINE: a source tree holding kiln/")
    cache = os.path.join(os.environ.get("KILN_CACHE_DIR", tempfile.gettempdir()), "baseline")
    path = os.pathsep.join([os.path.abspath(tree)] + [p for p in os.environ.get(
        "PYTHONPATH", "").split(os.pathsep) if p])
    # KILN_BENCH_TREE: bench_cpu.py puts that tree first on sys.path (else its own)
    return dict(os.environ, PYTHONPATH=path, KILN_CACHE_DIR=cache,
                KILN_BENCH_TREE=os.path.abspath(tree))


class Worker:
    """The coordinator's handle on one ``--worker`` process (stderr goes to a temporary file)."""

    def __init__(self, framework: str, workload: str, api: str,
                 command: list[str]) -> None:
        self.framework = framework
        self._stderr: IO[str] = tempfile.TemporaryFile("w+")
        # ``command``: the script to run and its options before --worker
        cmd = command + [
            "--worker", framework, workload, "--api", api]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True, bufsize=1,
                                     env=worker_env(framework))

    def ask(self, command: str | None = None) -> dict:
        """Sends ``command`` (None: none, just wait for the next reply) and returns the reply."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            if command is not None:
                self.proc.stdin.write(command + "\n")
                self.proc.stdin.flush()
            for line in iter(self.proc.stdout.readline, ""):
                if line.startswith("RESULT "):
                    reply = json.loads(line[7:])
                    if "error" in reply:
                        raise WorkerError(reply["error"])
                    return reply
        except BrokenPipeError:
            pass
        self.proc.wait()
        self._stderr.seek(0)
        tail = self._stderr.read().strip().splitlines()[-1:]
        raise WorkerError("".join(tail) or f"{self.framework} worker exited "
                          f"({self.proc.returncode})")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._stderr.close()


def _has_torch() -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False
