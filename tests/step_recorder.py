"""A stand-in for the CPU plan builder where a test calls a kernel builder directly
(``winograd.products``, ``native_matmul.add``): it records the steps added and runs them
(importable as ``step_recorder``: pytest puts ``tests/`` on the path through its conftest)."""

from __future__ import annotations


class StepRecorder:
    """The two things those builders use of a plan builder: ``add`` and ``node.op``."""

    class node:
        op = "test"

    def __init__(self):
        self.steps = []

    def add(self, fn, args, label=None):
        self.steps.append((fn, args, label))

    def run(self):
        for fn, args, _ in self.steps:
            fn(*args)
