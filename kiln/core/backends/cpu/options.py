"""The CPU backend's tuning choices: ONE frozen :class:`CpuOptions` (docs/architecture.md,
"Options").

Every threshold, switch, block size and cost the CPU planner chooses kernels by is a field
here, with its default and one line on what it decides; the measurement behind a default
stays in a comment next to the code that reads it (or in docs/performance.md). What is a
fact of an algorithm or a calling convention (Winograd's matrices, IR type names, futex
numbers, ``spin_pool.MAX_ARRAYS``) and the sizes baked into generated code's symbols
(``native_matmul.LANES`` / ``BLOCK`` / ``CHUNK``, ``native_tile.REGISTERS`` ...) stay module
constants.

* :func:`build` makes the options of a target (``target.current()`` by default) and the
  environment: the one place a ``KILN_*`` switch that picks a kernel strategy is read here
  (``KILN_WINOGRAD``; ``KILN_CPU``, ``KILN_SPIN_POOL`` and ``KILN_BLAS`` are read by
  ``target.build``), validated with an error naming the variable.
* :func:`current` is what kernel choices read: the options :func:`use` set in this thread
  (a context variable: other threads keep theirs), else the defaults (built once per value
  of the environment switches and kept).
* A CPU program records ``current()`` when it is compiled (``program.options``) and builds
  each of its plans under them, so a plan built later (a new batch size) makes the same
  choices; the compile report names the fields that differ from the defaults
  (:func:`differences`).

Example (a test's way to try another choice, instead of patching a module):
    >>> from dataclasses import replace
    >>> with use(replace(current(), winograd_m=0)):   # im2col + GEMM, not Winograd
    ...     f = kiln.function([x, w], y)
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import threading
from collections.abc import Mapping

from kiln.core.backends.cpu import target as _target
from kiln.core.scoped import scoped


@dataclasses.dataclass(frozen=True)
class CpuOptions:
    """The CPU planner's tuning choices (defaults: the measured ones; see the module doc)."""

    # ---- threads: small work on the caller's thread (lowering.py) ----
    serial_work: int = 1 << 22  # a hand-written kernel under this many multiply-adds runs serially
    race: bool = True  # a plan's split steps spread or in order, as its calls measure (race.py)
    element_work: int = 8  # multiply-adds one element touched counts as (pooling, gathers ...)
    # ---- Dense products (gemm/native_matmul.py) ----
    native_matmul: bool = True  # kiln's own Dense product kernel (where the target has AVX-512)
    matmul_min_rows: int = 128  # fewer rows of A: not the native product
    matmul_max_inner: int = 1024  # a longer contracted dimension: not the native product
    matmul_serial_work: int = 1 << 22  # multiply-adds under which one thread runs the product
    matmul_column_rows: int = 512  # products of fewer rows split by their columns
    matmul_inner_block: int = 256  # a longer inner dimension runs in blocks this long (0: never)
    transpose_split: int = 1 << 16  # elements from which a native transpose is split over threads
    early_pack: bool = True  # a d @ W.T product's W.T packed once per step (kernels/linalg.py)
    # ---- batched products with small matrices (gemm/native_batched.py) ----
    native_batched: bool = True  # kiln's kernel for batches of products (an attention's heads)
    batched_max_edge: int = 256  # a larger M or N: the batch stays OpenBLAS's / NumPy's
    batched_max_inner: int = 2048  # ... or a longer inner dimension K
    batched_max_work: int = 1 << 23  # ... or more multiply-adds a product (no cache blocking)
    # ---- products of <= 4 rows in plans without updates (gemm/native_gemv.py) ----
    native_gemv: bool = True  # kiln's own row-vector product kernel (serving)
    gemv_split_work: int = 1 << 18  # multiply-adds from which its inner dimension splits
    gemv_stream_rows: int = 3  # rows up to which the streaming layout runs (AVX-512)
    gemv_stream_vectors: int = 4  # ... with at least this many vectors of columns
    # ---- BLAS (gemm/blas.py) ----
    blas_min_work: int = 1 << 21  # multiply-adds under which np.matmul computes a product
    blas_min_edge: int = 8  # an edge under this: np.matmul
    blas_placed_min_work: int = 4 * 65536 + 1  # with placed threads: single products from here
    # ---- generated loops (kernels/elementwise.py) ----
    loop_min_rank: int = 1  # loop nests are not padded to a higher rank
    parallel_min_bytes: int = 16 << 20  # a loop moving this many bytes splits over the threads
    spin_min_bytes: int = 512 << 10  # ... this many where the spinning workers run it
    wide_min_count: int = 1024  # float32 sums over this many elements accumulate in float64
    axpy_min_elements: int = 1 << 16  # an in-place add this large runs as BLAS's axpy
    # ---- sorting (kernels/sort.py) ----
    sort_parallel_min: int = 1 << 15  # elements from which top-k rows split over the threads
    # ---- convolutions (kernels/conv/conv.py, conv_tile.py, direct_small.py) ----
    conv_direct_max_taps: int = 16  # taps per output (kh * kw * Cin) up to which direct loops run
    native_tile: bool = True  # the register-tiled convolutions (where the target has AVX-512)
    filter_chunk: int = 256  # output pixels per chunk of the tiled kernel gradient
    conv_epilogue: bool = True  # bias + ReLU fused into a tiled forward convolution
    dot_max_out: int = 4  # convolutions into at most this many channels: the dot kernels
    dot_accumulators: int = 24  # vectors of sums the dot kernels' kernel gradient keeps
    input_as_forward: bool = True  # a few-output input gradient as a forward convolution
    direct_small: bool = True  # the small-input-channel direct convolution kernels
    direct_small_max_input_channels: int = 8  # ... for at most this many input channels
    direct_small_min_output_channels: int = 12  # ... into at least this many output channels
    # ---- Winograd convolutions (kernels/conv/winograd*.py) ----
    winograd_m: int = 4  # m of F(m x m, 3 x 3): 4, 2, or 0 for off (KILN_WINOGRAD)
    winograd_training_forward_m: int = 4  # a float32 training graph's forward (2: more accurate)
    winograd_min_outputs: int = 512  # output positions from which a forward conv pays (lowering)
    winograd_min_channels: int = 8  # channels the input transform reads, at least
    winograd_transform_lanes: int = 16  # lanes of the transforms where the target has AVX-512
    winograd_stride2_kernels: tuple[tuple[int, int], ...] = ((4, 4),)  # stride-2 kernel shapes
    winograd_max_kernel_transform_bytes: int = 16 << 20  # a larger kernel transform: im2col
    winograd_pipeline: bool = True  # the three stages as one pipeline over chunks of images
    winograd_pipeline_bytes: int = 1 << 20  # tile bytes per chunk of a pipeline
    winograd_pipeline_min_tiles: int = 64  # ... and at least this many tiles
    winograd_point_split_work: int = 1 << 17  # products' multiply-adds from which fewer images
    # than threads split over the transform's points (serving: winograd_pipeline.forward)
    winograd_partial_bytes: int = 3 << 19  # larger per-thread kernel-gradient partials: no pipeline
    winograd_adjoint: bool = True  # the input gradient over the forward's tiles where fewer
    winograd_cache: bool = True  # a predict plan transforms a kernel once per weight version
    winograd_cached_min_outputs: int = 80  # ... and its forward pays from this many positions
    winograd_cached_min_outputs_no_tiles: int = 25  # ... this many without the register tiles
    # ---- pooling (kernels/pool/pool.py, avg_tiled.py) ----
    pool_unrolled: bool = True  # the unrolled tiled max pooling kernels
    pool_index: bool = True  # max pooling records its argmax where its gradient is planned
    pool_max_index_taps: int = 16  # window taps up to which the unrolled kernels run
    avg_pool_max_channels: int = 32  # the tiled average pooling for at most this many channels
    avg_pool_max_taps: int = 16  # ... and at most this many taps (0: the generic kernels)
    avg_pool_max_grad_channels: int = 8  # its gradient's tiled kernel: at most this many channels
    # ---- feeds and compile batches (runtime/feeds.py, codegen/compile_batch.py) ----
    bind_min_bytes: int = 32768  # feeds from this size are read in place
    compile_kernel_base_cost: int = 300  # a kernel's fixed cost in the compile batch's balance
    compile_scalars_cost: int = 2800  # the scalar library's cost there
    compile_cost_per_ir_char: float = 0.02  # a native kernel's cost per character of its IR

    def differences(self, other: CpuOptions | None = None) -> dict[str, object]:
        """The fields whose value differs from ``other`` (default: :func:`build`'s)."""
        base = build() if other is None else other
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) != getattr(base, f.name)}

    def describe(self) -> str:
        """One line for the compile report: the fields that differ from the defaults ("" when
        none do)."""
        diff = self.differences()
        if not diff:
            return ""
        return "CPU options (not the defaults): " + ", ".join(f"{k}={v!r}"
                                                             for k, v in diff.items())


FIELDS = frozenset(f.name for f in dataclasses.fields(CpuOptions))


def winograd_setting(environ: Mapping[str, str] | None = None) -> int:
    """``KILN_WINOGRAD``: 4 (default), 2, or 0 (off).

    Raises:
        ValueError: another value (``"KILN_WINOGRAD must be 0, 2 or 4, got '3'"``).
    """
    env = (os.environ if environ is None else environ).get("KILN_WINOGRAD", "").strip()
    if not env:
        return CpuOptions.winograd_m
    if env not in ("0", "2", "4"):
        raise ValueError(f"KILN_WINOGRAD must be 0, 2 or 4, got {env!r}")
    return int(env)


def build(cpu: _target.CpuTarget | None = None,
          environ: Mapping[str, str] | None = None) -> CpuOptions:
    """The options for the target ``cpu`` and the environment ``environ`` (default
    ``os.environ``). The switches a target's features decide (``tile_conv``,
    ``native_matmul``, ``vector_lanes``: target.py) stay on the target, read beside these
    (``native_tile`` and ``tile_conv`` both on: the register tiles), so a test that picks
    another CPU with ``target.use`` keeps the options it set.

    Raises:
        ValueError: a ``KILN_*`` switch has a value it does not take.
    """
    del cpu  # the target's own choices (tile_conv, native_matmul, vector_lanes) stay on it
    m = winograd_setting(environ)  # KILN_WINOGRAD sets every op's tiles, training's forward too
    return CpuOptions(winograd_m=m, winograd_training_forward_m=m)


_lock = threading.Lock()
_defaults: dict[object, CpuOptions] = {}
# KILN_WINOGRAD as os.environ stores it: a dict lookup (~50 ns) where os.environ.get encodes the
# key first (~0.5 us); current() runs on kernels' paths (a Winograd kernel transform per call)
try:
    _ENV_DATA: Mapping = os.environ._data  # type: ignore[attr-defined]
    _ENV_KEY: object = os.environ.encodekey("KILN_WINOGRAD")
except AttributeError:  # another os.environ: the public lookup
    _ENV_DATA, _ENV_KEY = os.environ, "KILN_WINOGRAD"
_scoped: contextvars.ContextVar[CpuOptions | None] = contextvars.ContextVar(
    "kiln_cpu_options", default=None)


def current() -> CpuOptions:
    """The options kernel choices follow: those :func:`use` set in this thread, else the
    defaults (:func:`build`; kept per value of the environment switches)."""
    scoped = _scoped.get()
    if scoped is not None:
        return scoped
    key = _ENV_DATA.get(_ENV_KEY)
    found = _defaults.get(key)
    if found is None:
        found = build()
        with _lock:
            _defaults[key] = found
    return found


def use(opts: CpuOptions) -> contextlib.AbstractContextManager[CpuOptions]:
    """Kernel choices in this thread follow ``opts`` inside the block (other threads keep
    theirs); the options before are back after it, also on an error.

    Raises:
        TypeError: ``opts`` is not a :class:`CpuOptions`.
    """
    return scoped(_scoped, opts, CpuOptions, "options.use")
