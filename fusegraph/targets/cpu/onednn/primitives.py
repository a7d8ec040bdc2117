"""The bound compute primitives: convolution, deconvolution, matmul and pooling (fp32, inference).

Geometry follows fusegraph's ops (ops/conv.py): tensors are N, C, *spatial; `padding` is the begins of
every spatial axis then the ends; `stride`/`dilation` one entry per axis; `()` means the default.
oneDNN counts dilation from 0, ours from 1: the conversion happens here and nowhere else.

Activation layouts: a shape plus `"nchw"` (C-contiguous), `"nhwc"` (channels last, passed as the
logical N, C, *spatial view of a channels-last buffer) or `"any"` (oneDNN picks, typically blocked
nChw16c: an opaque buffer of `desc.nbytes`, read back with a `Reorder`); or an exact `MemDesc`, e.g.
the previous primitive's `dst_desc`, so that chains of blocked convs need no reorders between them.
Weights are reordered once, at construction, into the layout the chosen kernel prefers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ....errors import CompileError
from ....ops.conv import window_out_len
from . import _lib
from .base import Primitive, pack
from .memory import MemDesc, aligned_empty
from .postops import Attr, PostOp, Sum, binary_descs, binary_slots
from .quant import Quant

Layout = str | MemDesc
LAYOUTS = ("nchw", "nhwc", "any")


def activation_desc(shape: Sequence[int], layout: Layout, dtype: str = "f32") -> MemDesc:
    if isinstance(layout, MemDesc):
        if tuple(layout.shape) != tuple(shape):
            raise CompileError(f"oneDNN: descriptor {layout} does not have shape {list(shape)}")
        return layout
    if layout == "nchw":
        return MemDesc.plain(shape, dtype)
    if layout == "nhwc":  # channels innermost, then the spatial axes, batch outermost
        n, c, *sp = shape
        sp_strides = [c * math.prod(sp[i + 1:]) for i in range(len(sp))]
        return MemDesc.plain(shape, dtype, strides=[c * math.prod(sp), 1, *sp_strides])
    if layout == "any":
        return MemDesc.any(shape, dtype)
    raise CompileError(f"oneDNN: unknown layout {layout!r}; choose one of {LAYOUTS} or a MemDesc")


def _geometry(nsp: int, stride, padding, dilation) -> tuple[list[int], list[int], list[int], list[int]]:
    strides = list(stride or (1,) * nsp)
    pads = list(padding or (0,) * (2 * nsp))
    dils = list(dilation or (1,) * nsp)
    if len(strides) != nsp or len(pads) != 2 * nsp or len(dils) != nsp:
        raise CompileError(f"oneDNN: stride {stride}, padding {padding}, dilation {dilation} do not match "
                           f"{nsp} spatial axes")
    return strides, pads[:nsp], pads[nsp:], dils


def _f32(a: np.ndarray, what: str, quant: Quant | None = None) -> np.ndarray:
    want = np.float32 if quant is None else np.int8  # int8 arithmetic: s8 weights, float32 bias
    if a.dtype != want:
        raise CompileError(f"oneDNN: {what} must be {np.dtype(want)}, got {a.dtype}")
    return a


def _bias(bias: np.ndarray | None, n: int) -> tuple[MemDesc | None, np.ndarray | None]:
    if bias is None:
        return None, None
    b = np.asarray(_f32(bias, "bias")).reshape(-1)
    if b.size != n:
        raise CompileError(f"oneDNN: bias has {b.size} values for {n} output channels")
    packed = aligned_empty(b.nbytes, np.float32)
    packed[:] = b
    return MemDesc.plain((n,)), packed


class _WindowPrimitive(Primitive):
    """Convolution and deconvolution: weights packed once, bias, post-ops, per-call binary operands."""

    _what = ""

    def _build(self, create, alg: int, src_shape, w_dims, dst_shape, weights_view: np.ndarray, bias,
               strides, pb, pe, dils, post_ops, src_layout, dst_layout, fpmath, threads,
               quant: Quant | None = None) -> None:
        if any(isinstance(p, Sum) for p in post_ops) and dst_layout == "any":
            raise CompileError(f"oneDNN {self._what}: a Sum post-op needs a known dst layout, not 'any'")
        src_md = activation_desc(src_shape, src_layout, quant.src if quant else "f32")
        dst_md = activation_desc(dst_shape, dst_layout, quant.dst if quant else "f32")
        w_any = MemDesc.any(w_dims, "s8" if quant else "f32")
        bias_md, bias_arr = _bias(bias, dst_shape[1])
        src1 = binary_descs(post_ops, dst_shape)
        lib = self._lib
        # per output channel: weights are (G, M/G, ...) when grouped, so both leading dims select it
        mask = 0b11 if len(w_dims) == len(src_shape) + 1 else 0b1
        with Attr(post_ops, src1, fpmath, quant, mask) as attr:
            quant_consts = attr.constants
            pd = self._create(f"{self._what} {list(src_shape)} -> {list(dst_shape)} weights {list(w_dims)}",
                              create, lib.engine, _lib.FORWARD_INFERENCE, alg, src_md.handle, w_any.handle,
                              bias_md.handle if bias_md else None, dst_md.handle, _lib.dims(strides),
                              _lib.dims(d - 1 for d in dils), _lib.dims(pb), _lib.dims(pe), attr.handle)
        w_md = self.query_md(_lib.Q_WEIGHTS_MD)
        self.weights = pack(weights_view, w_md, threads)
        consts = [(_lib.ARG_WEIGHTS, w_md, self.weights), *quant_consts]
        if bias_md is not None:
            consts.append((_lib.ARG_BIAS, bias_md, bias_arr))
        # _finish asks the primitive for each argument's descriptor (what was `any` is concrete there)
        slots = [(_lib.ARG_SRC, src_md, "src"), *binary_slots(src1), (_lib.ARG_DST, dst_md, "dst")]
        self._finish(pd, slots, consts)
        self.src_desc, self.out_shape = self._slots[0].desc, tuple(dst_shape)
        self._needs_out = any(isinstance(p, Sum) for p in post_ops)

    def _fresh_out(self) -> np.ndarray:
        if self._needs_out:
            raise CompileError(f"oneDNN {self._what}: a Sum post-op accumulates into `out`; pass it")
        return super()._fresh_out()


class Convolution(_WindowPrimitive):
    """y = conv(x, w) (+ bias), then post-ops. x: N, C, *sp (1-3 spatial axes); w: M, C/groups, *k."""

    _what = "convolution"

    def __init__(self, src: Sequence[int] | MemDesc, weights: np.ndarray, bias: np.ndarray | None = None, *,
                 stride: Sequence[int] = (), padding: Sequence[int] = (), dilation: Sequence[int] = (),
                 groups: int = 1, post_ops: Sequence[PostOp] = (), src_layout: Layout = "nchw",
                 dst_layout: Layout = "nchw", fpmath: str = "strict", threads: int | None = None,
                 allow_ref: bool = False, quant: Quant | None = None):
        super().__init__(threads, allow_ref)
        src_shape = tuple(src.shape if isinstance(src, MemDesc) else src)
        src_layout = src if isinstance(src, MemDesc) else src_layout
        w = _f32(np.asarray(weights), "weights", quant)
        nsp = w.ndim - 2
        if not 1 <= nsp <= 3 or len(src_shape) != w.ndim:
            raise CompileError(f"oneDNN convolution: input {list(src_shape)} and weights {list(w.shape)} "
                               "must both be N, C + 1-3 spatial axes")
        m, cg = w.shape[:2]
        if groups < 1 or src_shape[1] != cg * groups or m % groups:
            raise CompileError(f"oneDNN convolution: {src_shape[1]} input channels, weights {list(w.shape)}, "
                               f"groups {groups} do not match")
        strides, pb, pe, dils = _geometry(nsp, stride, padding, dilation)
        out_sp = [window_out_len(n, k, b, e, s, d)
                  for n, k, b, e, s, d in zip(src_shape[2:], w.shape[2:], pb, pe, strides, dils)]
        if min(out_sp) < 1:
            raise CompileError(f"oneDNN convolution: window {list(w.shape[2:])} does not fit {list(src_shape)}")
        # grouped weights are (G, M/G, C/G, *k) to oneDNN: the same bytes, one more axis
        wv = w.reshape(groups, m // groups, *w.shape[1:]) if groups > 1 else w
        lib = self._lib
        self._build(lib.dnnl_convolution_forward_primitive_desc_create, _lib.CONVOLUTION_DIRECT, src_shape,
                    wv.shape, (src_shape[0], m, *out_sp), wv, bias, strides, pb, pe, dils, post_ops,
                    src_layout, dst_layout, fpmath, threads, quant)


class Deconvolution(_WindowPrimitive):
    """Transposed convolution (ONNX ConvTranspose): x: N, C, *sp; w: C, M/groups, *k; y: N, M, *out with
    out = (in - 1) * stride + (k - 1) * dilation + 1 + output_padding - pad begins - pad ends."""

    _what = "deconvolution"

    def __init__(self, src: Sequence[int] | MemDesc, weights: np.ndarray, bias: np.ndarray | None = None, *,
                 stride: Sequence[int] = (), padding: Sequence[int] = (), dilation: Sequence[int] = (),
                 groups: int = 1, output_padding: Sequence[int] = (), post_ops: Sequence[PostOp] = (),
                 src_layout: Layout = "nchw", dst_layout: Layout = "nchw", fpmath: str = "strict",
                 threads: int | None = None, allow_ref: bool = False):
        super().__init__(threads, allow_ref)
        src_shape = tuple(src.shape if isinstance(src, MemDesc) else src)
        src_layout = src if isinstance(src, MemDesc) else src_layout
        w = _f32(np.asarray(weights), "weights")
        nsp = w.ndim - 2
        c, mg = w.shape[:2]
        if not 1 <= nsp <= 3 or len(src_shape) != w.ndim or src_shape[1] != c or c % groups:
            raise CompileError(f"oneDNN deconvolution: input {list(src_shape)}, weights {list(w.shape)} "
                               f"(C, M/groups, *k) and groups {groups} do not match")
        strides, pb, pe, dils = _geometry(nsp, stride, padding, dilation)
        extra = list(output_padding or (0,) * nsp)
        # output_padding grows the far end: to oneDNN that is a smaller (possibly negative) end padding
        pe = [e - x for e, x in zip(pe, extra)]
        out_sp = [(n - 1) * s + (k - 1) * d + 1 - b - e
                  for n, k, b, e, s, d in zip(src_shape[2:], w.shape[2:], pb, pe, strides, dils)]
        if min(out_sp) < 1:
            raise CompileError(f"oneDNN deconvolution: padding leaves no output for {list(src_shape)}")
        # oneDNN wants (G,) M/G, C/G, *k; ours is C, M/G, *k = (G, C/G, M/G, *k): swap two axes (a view)
        wv = w.reshape(groups, c // groups, mg, *w.shape[2:]).swapaxes(1, 2)
        if groups == 1:
            wv = wv[0]
        lib = self._lib
        self._build(lib.dnnl_deconvolution_forward_primitive_desc_create, _lib.DECONVOLUTION_DIRECT,
                    src_shape, wv.shape, (src_shape[0], mg * groups, *out_sp), wv, bias, strides, pb, pe,
                    dils, post_ops, src_layout, dst_layout, fpmath, threads)


class Pooling(Primitive):
    """Max or average pooling over the spatial axes, like fusegraph's `pooling` op (its geometry and
    ceil mode; average divides by in-range taps, or with `count_include_pad` by taps inside the
    explicit padding)."""

    def __init__(self, src: Sequence[int] | MemDesc, mode: str, kernel: Sequence[int], *,
                 stride: Sequence[int] = (), padding: Sequence[int] = (), dilation: Sequence[int] = (),
                 ceil_mode: bool = False, count_include_pad: bool = False, src_layout: Layout = "nchw",
                 dst_layout: Layout = "nchw", threads: int | None = None, allow_ref: bool = True):
        # oneDNN's reference pooling (dilated windows, mixed layouts) is a plain C loop: slower than its
        # jit kernels, no slower than any alternative; unlike a reference convolution it is accepted
        super().__init__(threads, allow_ref)
        src_shape = tuple(src.shape if isinstance(src, MemDesc) else src)
        src_layout = src if isinstance(src, MemDesc) else src_layout
        nsp = len(src_shape) - 2
        if mode not in ("max", "average") or len(kernel) != nsp or nsp < 1:
            raise CompileError(f"oneDNN pooling: mode {mode!r} (max|average), kernel {list(kernel)} and input "
                               f"{list(src_shape)} do not match")
        strides, pb, pe, dils = _geometry(nsp, stride, padding, dilation)
        out_sp = [window_out_len(n, k, b, e, s, d, ceil_mode)
                  for n, k, b, e, s, d in zip(src_shape[2:], kernel, pb, pe, strides, dils)]
        if min(out_sp) < 1:
            raise CompileError(f"oneDNN pooling: window {list(kernel)} does not fit {list(src_shape)}")
        # oneDNN wants the end padding that makes its floor formula give exactly out_sp
        pr = [(o - 1) * s + (k - 1) * d + 1 - n - b
              for o, s, k, d, n, b in zip(out_sp, strides, kernel, dils, src_shape[2:], pb)]
        alg = "max"
        if mode == "average":
            alg = "avg_include_padding" if count_include_pad and any(pb + pe) else "avg_exclude_padding"
            if alg == "avg_include_padding" and any(r > e for r, e in zip(pr, pe)):
                raise CompileError("oneDNN pooling: average with count_include_pad cannot exclude the extra "
                                   "positions ceil_mode adds past explicit padding")
        dst_shape = (*src_shape[:2], *out_sp)
        src_md, dst_md = activation_desc(src_shape, src_layout), activation_desc(dst_shape, dst_layout)
        lib = self._lib
        with Attr((), ()) as attr:
            pd = self._create(f"{alg} pooling {list(src_shape)} -> {list(dst_shape)}",
                              lib.dnnl_pooling_forward_primitive_desc_create, lib.engine, _lib.FORWARD_INFERENCE,
                              _lib.POOLING[alg], src_md.handle, dst_md.handle, _lib.dims(strides),
                              _lib.dims(kernel), _lib.dims(d - 1 for d in dils), _lib.dims(pb), _lib.dims(pr),
                              attr.handle)
        self.src_desc, self.out_shape = self.query_md(_lib.Q_SRC_MD), dst_shape
        self._finish(pd, [(_lib.ARG_SRC, self.src_desc, "src"), (_lib.ARG_DST, self.query_md(_lib.Q_DST_MD), "dst")])
