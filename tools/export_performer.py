#!/usr/bin/env python3
"""Export a performer-pytorch checkpoint into a performer-serve model folder.

Usage:
    export_performer.py CHECKPOINT.pt OUT_DIR [--model-class PerformerLM|PerformerEncDec|FastAttention]
                        [--config JSON_FILE] [--dtype float32|float16|bfloat16]
                        [--drop-aliases] [--force]

The output folder has the layout of a golden performer fixture's model files:

  OUT_DIR/config.json          {"model_class": ..., <every constructor keyword, defaults filled in>}
  OUT_DIR/weights.safetensors  the state_dict (keys unchanged, state_dict order), floating tensors
                               converted to --dtype, integer buffers (the int64 redraw counter) kept

CHECKPOINT.pt is read with torch.load(map_location="cpu") and may be
  * a bare state_dict (name -> tensor): the constructor keywords must then come from --config,
    because a state_dict cannot tell heads from dim_head, causal, local_window_size, ... ;
  * a dict holding the state_dict under "state_dict" / "model_state_dict" / "model" and the
    constructor keywords under "config" / "kwargs" / "hparams" / "hyper_parameters"
    (optionally with "model_class");
  * a pickled nn.Module (only if its class can be imported here); keywords again from --config.
A common wrapper prefix ("module.", "model.", "_orig_mod.", or "net." of an AutoregressiveWrapper)
shared by every key is stripped.

--config JSON_FILE supplies keywords too (it may be a config.json written by this tool); its keys win
over the checkpoint's. The model class comes from --model-class, else the keywords' "model_class",
else the checkpoint's "model_class", else the key names (enc./dec.net. -> PerformerEncDec, a lone
projection_matrix -> FastAttention, otherwise PerformerLM).

config.json conventions (same as the fixtures): kernel_fn is the class name of the torch.nn
activation ("ReLU"); nb_features null means the library default int(dim_head * ln dim_head); tuples
are lists; PerformerEncDec is flattened into dim, ignore_index, pad_value, tie_token_embeds,
no_projection plus every PerformerLM keyword prefixed enc_ / dec_, with dec_causal and
dec_cross_attend forced true as the library does.

The keys under "...performer.proj_updater.instance." are the library's second reference to the
layer stack; they are kept (and checked equal to the originals) unless --drop-aliases is given.

Before anything is written the exporter validates: unknown keywords (error, listing them),
dim % heads == 0, the keys and shapes the configuration implies (token_emb.weight, every layer's
projections, projection matrices of nb_features rows, ...), and that every floating tensor is finite
(also after the dtype conversion). It refuses to write into an existing non-empty OUT_DIR unless
--force is given.

Exit status: 0 on success, 2 on a usage or validation error (message on stderr), 1 on an
unexpected internal error.
"""

import argparse
import collections
import collections.abc
import json
import math
import os
import struct
import sys
import tempfile

try:
    import numpy as np
    import torch
    _IMPORT_ERROR = None
except ImportError as e:  # --help still works; main() re-executes under /usr/bin/python3
    np = torch = None
    _IMPORT_ERROR = e

FORMAT_TAG = "performer-serve/1"
EXPORTER_NAME = "export_performer.py"
MODEL_CLASSES = ("PerformerLM", "PerformerEncDec", "FastAttention")
ALIAS_INFIX = "performer.proj_updater.instance."
NET_INFIX = "performer.net."


class ExportError(Exception):
    """A usage or validation problem: reported on stderr, exit status 2."""


# ---------------------------------------------------------------------------------------------
# safetensors reading / writing (the `safetensors` package is not required)
# ---------------------------------------------------------------------------------------------

def _st_dtypes():
    """name -> (torch dtype, numpy dtype used for the raw bytes, element size)."""
    return collections.OrderedDict([
        ("F64", (torch.float64, np.dtype("<f8"), 8)),
        ("F32", (torch.float32, np.dtype("<f4"), 4)),
        ("F16", (torch.float16, np.dtype("<f2"), 2)),
        ("BF16", (torch.bfloat16, np.dtype("<i2"), 2)),  # numpy has no bfloat16: move raw bits
        ("I64", (torch.int64, np.dtype("<i8"), 8)),
        ("I32", (torch.int32, np.dtype("<i4"), 4)),
        ("I16", (torch.int16, np.dtype("<i2"), 2)),
        ("I8", (torch.int8, np.dtype("i1"), 1)),
        ("U8", (torch.uint8, np.dtype("u1"), 1)),
        ("BOOL", (torch.bool, np.dtype("u1"), 1)),
    ])


def read_safetensors(path):
    """Returns (OrderedDict name -> torch.Tensor in header order, metadata dict)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ExportError("%s: truncated safetensors file" % path)
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise ExportError("%s: header length %d exceeds the file" % (path, n))
    header = json.loads(blob[8:8 + n].decode("utf-8"),
                        object_pairs_hook=collections.OrderedDict)
    data = memoryview(blob)[8 + n:]
    metadata = dict(header.pop("__metadata__", {}) or {})
    dtypes = _st_dtypes()
    tensors = collections.OrderedDict()
    for name, info in header.items():
        if info["dtype"] not in dtypes:
            raise ExportError("%s: tensor %r has unsupported dtype %s" % (path, name, info["dtype"]))
        tdtype, npdtype, size = dtypes[info["dtype"]]
        shape = [int(d) for d in info["shape"]]
        begin, end = (int(o) for o in info["data_offsets"])
        numel = 1
        for d in shape:
            numel *= d
        if end - begin != numel * size or end > len(data) or begin > end:
            raise ExportError("%s: tensor %r has inconsistent data_offsets" % (path, name))
        arr = np.frombuffer(data[begin:end], dtype=npdtype).copy().reshape(shape)
        if info["dtype"] == "BOOL":
            t = torch.from_numpy(arr.astype(np.bool_))
        else:
            t = torch.from_numpy(arr.astype(npdtype.newbyteorder("=")))
            if info["dtype"] == "BF16":
                t = t.view(torch.bfloat16)
        tensors[name] = t
    return tensors, metadata


def _tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        arr = t.view(torch.int16).numpy()
    elif t.dtype == torch.bool:
        arr = t.numpy().astype(np.uint8)
    else:
        arr = t.numpy()
    return np.ascontiguousarray(arr.astype(arr.dtype.newbyteorder("<"), copy=False)).tobytes()


def write_safetensors(path, tensors, metadata=None):
    """Writes `tensors` (ordered mapping name -> tensor) packed in the given order."""
    to_st = {v[0]: k for k, v in _st_dtypes().items()}
    header = collections.OrderedDict()
    if metadata:
        header["__metadata__"] = collections.OrderedDict((str(k), str(v)) for k, v in metadata.items())
    chunks = []
    offset = 0
    for name, t in tensors.items():
        if t.dtype not in to_st:
            raise ExportError("tensor %r has dtype %s, which safetensors export does not support"
                              % (name, t.dtype))
        raw = _tensor_bytes(t)
        header[name] = collections.OrderedDict([
            ("dtype", to_st[t.dtype]),
            ("shape", [int(d) for d in t.shape]),
            ("data_offsets", [offset, offset + len(raw)]),
        ])
        chunks.append(raw)
        offset += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in chunks:
            f.write(raw)


# ---------------------------------------------------------------------------------------------
# Constructor keywords (docs/reference/performer-pytorch.md §1), in signature order
# ---------------------------------------------------------------------------------------------

_REQ = object()  # marks a required keyword

# name -> (default, kind)
LM_KEYWORDS = collections.OrderedDict([
    ("num_tokens", (_REQ, "int")),
    ("max_seq_len", (_REQ, "int")),
    ("dim", (_REQ, "int")),
    ("depth", (_REQ, "int")),
    ("heads", (_REQ, "int")),
    ("dim_head", (64, "int_or_none")),
    ("local_attn_heads", (0, "int_or_list")),
    ("local_window_size", (256, "int")),
    ("causal", (False, "bool")),
    ("ff_mult", (4, "int")),
    ("nb_features", (None, "int_or_none")),
    ("feature_redraw_interval", (1000, "int_or_none")),
    ("reversible", (False, "bool")),
    ("ff_chunks", (1, "int")),
    ("ff_glu", (False, "bool")),
    ("emb_dropout", (0.0, "float")),
    ("ff_dropout", (0.0, "float")),
    ("attn_dropout", (0.0, "float")),
    ("generalized_attention", (False, "bool")),
    ("kernel_fn", ("ReLU", "kernel")),
    ("use_scalenorm", (False, "bool")),
    ("use_rezero", (False, "bool")),
    ("cross_attend", (False, "bool")),
    ("no_projection", (False, "bool")),
    ("tie_embed", (False, "bool")),
    ("rotary_position_emb", (True, "bool")),
    ("axial_position_emb", (False, "bool")),
    ("axial_position_shape", (None, "shape_or_none")),
    ("auto_check_redraw", (True, "bool")),
    ("qkv_bias", (False, "bool")),
    ("attn_out_bias", (False, "bool")),
    ("shift_tokens", (False, "bool")),
])

FAST_ATTENTION_KEYWORDS = collections.OrderedDict([
    ("dim_heads", (_REQ, "int")),
    ("nb_features", (None, "int_or_none")),
    ("ortho_scaling", (0, "number")),
    ("causal", (False, "bool")),
    ("generalized_attention", (False, "bool")),
    ("kernel_fn", ("ReLU", "kernel")),
    ("no_projection", (False, "bool")),
])

ENCDEC_TOP_KEYWORDS = collections.OrderedDict([
    ("dim", (_REQ, "int")),
    ("ignore_index", (0, "int")),
    ("pad_value", (0, "int")),
    ("tie_token_embeds", (False, "bool")),
    ("no_projection", (False, "bool")),
])
# PerformerLM keywords that PerformerEncDec sets itself for both halves.
ENCDEC_SHARED = ("dim", "no_projection")
# Decoder keywords PerformerEncDec forces.
ENCDEC_DEC_FORCED = collections.OrderedDict([("causal", True), ("cross_attend", True)])

# Why a bare state_dict is not enough (docs/reference/performer-pytorch.md §2.4).
_UNKNOWABLE = ("heads vs dim_head (only their product is visible), causal, local_window_size and the "
               "number of local heads per layer, generalized_attention/kernel_fn/no_projection, "
               "ff_glu vs ff_mult, max_seq_len")


def _plain(value):
    """Turns numpy/torch scalars, tuples and Namespaces into plain JSON-able Python values."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def _kernel_name(value, where):
    if isinstance(value, torch.nn.Module):
        name = type(value).__name__
    elif isinstance(value, type):
        name = value.__name__
    elif isinstance(value, str):
        name = value.strip()
        if name.endswith("()"):
            name = name[:-2]
        name = name.rsplit(".", 1)[-1]
    else:
        raise ExportError("%s: kernel_fn must be a torch.nn activation module, class or class name, "
                          "got %r" % (where, value))
    cls = getattr(torch.nn, name, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise ExportError("%s: kernel_fn %r is not a torch.nn module class" % (where, name))
    return name


def _normalise(name, value, kind, where):
    """Checks one keyword's type and returns its config.json form."""
    label = "%s: keyword %s" % (where, name)
    if kind == "kernel":
        return _kernel_name(value, label)
    value = _plain(value)

    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)

    def as_int(v):
        if is_int(v):
            return v
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise ExportError("%s must be an integer, got %r" % (label, v))

    if kind == "int":
        return as_int(value)
    if kind == "int_or_none":
        return None if value is None else as_int(value)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if is_int(value) and value in (0, 1):
            return bool(value)
        raise ExportError("%s must be true/false, got %r" % (label, value))
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ExportError("%s must be a number, got %r" % (label, value))
        return float(value)
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ExportError("%s must be a number, got %r" % (label, value))
        return value
    if kind == "int_or_list":
        if isinstance(value, list):
            return [as_int(v) for v in value]
        return as_int(value)
    if kind == "shape_or_none":
        if value is None:
            return None
        if not isinstance(value, list) or len(value) != 2:
            raise ExportError("%s must be null or a list of 2 integers, got %r" % (label, value))
        return [as_int(v) for v in value]
    raise AssertionError(kind)


def _fill(table, given, where):
    """Fills defaults for one keyword table. `given` holds only names from `table`."""
    missing = [k for k, (d, _) in table.items() if d is _REQ and k not in given]
    if missing:
        raise ExportError("%s: missing required constructor keyword(s): %s"
                          % (where, ", ".join(missing)))
    out = collections.OrderedDict()
    for name, (default, kind) in table.items():
        out[name] = _normalise(name, given[name], kind, where) if name in given else default
    return out


def _warn(msg):
    sys.stderr.write("export_performer.py: warning: %s\n" % msg)


def resolve_config(model_class, keywords):
    """Returns the full config.json dict (model_class first) for the given constructor keywords."""
    kw = collections.OrderedDict((k, v) for k, v in keywords.items() if k != "model_class")
    if model_class == "PerformerLM":
        unknown = [k for k in kw if k not in LM_KEYWORDS]
        if unknown:
            raise ExportError("unknown PerformerLM keyword(s): %s" % ", ".join(unknown))
        cfg = _fill(LM_KEYWORDS, kw, "PerformerLM")
    elif model_class == "FastAttention":
        unknown = [k for k in kw if k not in FAST_ATTENTION_KEYWORDS]
        if unknown:
            raise ExportError("unknown FastAttention keyword(s): %s" % ", ".join(unknown))
        cfg = _fill(FAST_ATTENTION_KEYWORDS, kw, "FastAttention")
    elif model_class == "PerformerEncDec":
        top, halves, unknown, dropped = {}, {"enc": {}, "dec": {}}, [], []
        for k, v in kw.items():
            if k in ENCDEC_TOP_KEYWORDS:
                top[k] = v
            elif k.startswith("enc_") or k.startswith("dec_"):
                half, name = k[:3], k[4:]
                if name == "dim":
                    raise ExportError("PerformerEncDec: %s is not allowed (the library refuses it); "
                                      "give the shared dim" % k)
                if name not in LM_KEYWORDS:
                    unknown.append(k)
                elif name in ENCDEC_SHARED:
                    _warn("PerformerEncDec: %s is overridden by the top-level %s; ignored" % (k, name))
                elif half == "dec" and name in ENCDEC_DEC_FORCED and bool(v) != ENCDEC_DEC_FORCED[name]:
                    _warn("PerformerEncDec: %s=%r is overridden, the decoder is always %s=true"
                          % (k, v, name))
                else:
                    halves[half][name] = v
            else:
                dropped.append(k)
        if unknown:
            raise ExportError("unknown PerformerEncDec keyword(s): %s" % ", ".join(unknown))
        if dropped:
            _warn("PerformerEncDec silently drops keyword(s) with neither enc_/dec_ prefix nor a "
                  "top-level name: %s (not exported)" % ", ".join(dropped))
        cfg_top = _fill(ENCDEC_TOP_KEYWORDS, top, "PerformerEncDec")
        cfg = collections.OrderedDict(cfg_top)
        for half in ("enc", "dec"):
            given = dict(halves[half])
            given["dim"] = cfg_top["dim"]
            given["no_projection"] = cfg_top["no_projection"]
            if half == "dec":
                given.update(ENCDEC_DEC_FORCED)
            sub = _fill(LM_KEYWORDS, given, "PerformerEncDec (%s_)" % half)
            for name, value in sub.items():
                if name not in ENCDEC_SHARED:
                    cfg["%s_%s" % (half, name)] = value
    else:
        raise ExportError("unknown model class %r (expected one of %s)"
                          % (model_class, ", ".join(MODEL_CLASSES)))
    out = collections.OrderedDict([("model_class", model_class)])
    out.update(cfg)
    return out


def lm_config_of(cfg, prefix):
    """The PerformerLM keywords of one half of a flattened PerformerEncDec config."""
    sub = collections.OrderedDict()
    for name in LM_KEYWORDS:
        sub[name] = cfg[name] if name in ENCDEC_SHARED else cfg[prefix + name]
    return sub


def default_nb_features(dim_head):
    return int(dim_head * math.log(dim_head))


# ---------------------------------------------------------------------------------------------
# Structural validation of the state_dict against the configuration
# ---------------------------------------------------------------------------------------------

class _Checker(object):
    def __init__(self, sd):
        self.sd = sd
        self.problems = []

    def need(self, key, shape=None):
        t = self.sd.get(key)
        if t is None:
            self.problems.append("missing key %s" % key)
        elif shape is not None and list(t.shape) != list(shape):
            self.problems.append("%s has shape %s, the configuration implies %s"
                                 % (key, list(t.shape), list(shape)))

    def need_any(self, keys_shapes):
        for key, shape in keys_shapes:
            if key in self.sd:
                return self.need(key, shape)
        self.problems.append("missing key %s" % " or ".join(k for k, _ in keys_shapes))

    def error(self, msg):
        self.problems.append(msg)


def _check_lm(c, lm, p):
    """Validates the keys of one PerformerLM whose keys start with prefix p."""
    where = p.rstrip(".") or "PerformerLM"
    dim, heads, depth = lm["dim"], lm["heads"], lm["depth"]
    for name in ("num_tokens", "max_seq_len", "dim", "depth", "heads"):
        if lm[name] <= 0:
            c.error("%s: %s must be positive, got %d" % (where, name, lm[name]))
    if heads <= 0 or dim % heads != 0:
        c.error("%s: dim (%d) must be divisible by heads (%d)" % (where, dim, heads))
        return
    dim_head = lm["dim_head"]
    if dim_head is None:
        if lm["rotary_position_emb"]:
            c.error("%s: dim_head=null is only legal with rotary_position_emb=false" % where)
            return
        dim_head = dim // heads
    if dim_head <= 0:
        c.error("%s: dim_head must be positive" % where)
        return
    local = lm["local_attn_heads"]
    if isinstance(local, list):
        if len(local) != depth:
            c.error("%s: local_attn_heads has %d entries, depth is %d" % (where, len(local), depth))
            return
    else:
        local = [local] * depth
    for i, n in enumerate(local):
        if n < 0 or n > heads:
            c.error("%s: layer %d has %d local heads, must be between 0 and heads (%d)"
                    % (where, i, n, heads))
    if lm["local_window_size"] <= 0 and any(local):
        c.error("%s: local_window_size must be positive" % where)
    nb = lm["nb_features"] if lm["nb_features"] is not None else default_nb_features(dim_head)
    if nb <= 0:
        c.error("%s: nb_features must be positive (resolved %d)" % (where, nb))
    inner = heads * dim_head

    c.need(p + "token_emb.weight", [lm["num_tokens"], dim])
    if lm["rotary_position_emb"]:
        c.need(p + "pos_emb.emb", [lm["max_seq_len"], dim])
        c.need(p + "layer_pos_emb.emb", [lm["max_seq_len"], dim_head])
    elif lm["axial_position_emb"]:
        shape = lm["axial_position_shape"] or [int(math.ceil(lm["max_seq_len"] / 64.0)), 64]
        c.need_any([(p + "pos_emb.weights.0", [1, shape[0], 1, dim]),
                    (p + "pos_emb.weights_0", [1, shape[0], 1, dim])])
        c.need_any([(p + "pos_emb.weights.1", [1, 1, shape[1], dim]),
                    (p + "pos_emb.weights_1", [1, 1, shape[1], dim])])
    else:
        c.need(p + "pos_emb.emb.weight", [lm["max_seq_len"], dim])
    c.need(p + "norm.weight", [dim])
    c.need(p + "norm.bias", [dim])
    if not lm["tie_embed"]:
        c.need(p + "to_out.weight", [lm["num_tokens"], dim])
        c.need(p + "to_out.bias", [lm["num_tokens"]])

    def wrapper(bp):
        if lm["use_scalenorm"]:
            c.need(bp + "g", [1])
        elif lm["use_rezero"]:
            c.need(bp + "g", [])
        else:
            c.need(bp + "norm.weight", [dim])
            c.need(bp + "norm.bias", [dim])

    def attention(ap):
        c.need(ap + "fast_attention.projection_matrix", [nb, dim_head])
        for proj in ("to_q", "to_k", "to_v"):
            c.need(ap + proj + ".weight", [inner, dim])
            if lm["qkv_bias"]:
                c.need(ap + proj + ".bias", [inner])
        c.need(ap + "to_out.weight", [dim, inner])
        if lm["attn_out_bias"]:
            c.need(ap + "to_out.bias", [dim])

    def feed_forward(fp):
        hidden = dim * lm["ff_mult"]
        c.need(fp + "w1.weight", [hidden * (2 if lm["ff_glu"] else 1), dim])
        c.need(fp + "w1.bias", [hidden * (2 if lm["ff_glu"] else 1)])
        c.need(fp + "w2.weight", [dim, hidden])
        c.need(fp + "w2.bias", [dim])

    n_layers = depth * (2 if lm["cross_attend"] else 1)
    for j in range(n_layers):
        cross = lm["cross_attend"] and j % 2 == 1
        if lm["reversible"]:
            a, f = "%sperformer.net.blocks.%d.f.net." % (p, j), "%sperformer.net.blocks.%d.g.net." % (p, j)
        else:
            a, f = "%sperformer.net.layers.%d.0." % (p, j), "%sperformer.net.layers.%d.1." % (p, j)
        shift = lm["shift_tokens"] and not cross
        wrapper(a)
        wrapper(f)
        attention(a + ("fn.fn." if shift else "fn."))
        feed_forward(f + ("fn.fn.fn." if shift else "fn.fn."))
    # A stray layer beyond depth means the configuration does not describe these weights.
    extra = "%sperformer.net.%s.%d." % (p, "blocks" if lm["reversible"] else "layers", n_layers)
    if any(k.startswith(extra) for k in c.sd):
        c.error("%s: weights hold more layers than depth=%d%s implies (found %s*)"
                % (where, depth, " with cross_attend" if lm["cross_attend"] else "", extra))


def validate(cfg, sd):
    """Raises ExportError listing every inconsistency between config and state_dict."""
    c = _Checker(sd)
    mc = cfg["model_class"]
    if mc == "PerformerLM":
        _check_lm(c, cfg, "")
    elif mc == "PerformerEncDec":
        _check_lm(c, lm_config_of(cfg, "enc_"), "enc.")
        _check_lm(c, lm_config_of(cfg, "dec_"), "dec.net.")
    else:
        d = cfg["dim_heads"]
        if d <= 0:
            c.error("dim_heads must be positive")
        else:
            nb = cfg["nb_features"] if cfg["nb_features"] is not None else default_nb_features(d)
            c.need("projection_matrix", [nb, d])
    # Alias copies must mirror the layer stack they alias.
    for k, t in sd.items():
        if ALIAS_INFIX in k:
            orig = k.replace(ALIAS_INFIX, NET_INFIX, 1)
            o = sd.get(orig)
            if o is None:
                c.error("alias key %s has no original %s" % (k, orig))
            elif o.shape != t.shape or o.dtype != t.dtype or not torch.equal(o, t):
                c.error("alias key %s differs from %s" % (k, orig))
    for k, t in sd.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            c.error("tensor %s holds non-finite values" % k)
    if c.problems:
        shown = c.problems[:20]
        more = len(c.problems) - len(shown)
        raise ExportError("the weights do not match the %s configuration:\n  %s%s"
                          % (mc, "\n  ".join(shown), "\n  (... %d more)" % more if more else ""))


# ---------------------------------------------------------------------------------------------
# Checkpoint loading
# ---------------------------------------------------------------------------------------------

_SD_FIELDS = ("state_dict", "model_state_dict", "model")
_CFG_FIELDS = ("config", "kwargs", "hparams", "hyper_parameters")
_STRIP_PREFIXES = ("module.", "_orig_mod.", "model.", "net.")


def _is_tensor_map(obj):
    return (isinstance(obj, collections.abc.Mapping) and len(obj) > 0
            and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()))


def _as_keywords(obj, where):
    if obj is None:
        return None
    if isinstance(obj, argparse.Namespace):
        obj = vars(obj)
    if not isinstance(obj, collections.abc.Mapping):
        if hasattr(obj, "__dict__"):
            obj = vars(obj)
        else:
            raise ExportError("%s is not a mapping of constructor keywords (got %s)"
                              % (where, type(obj).__name__))
    return collections.OrderedDict((str(k), v) for k, v in obj.items())


def load_checkpoint(path):
    """Returns (state_dict OrderedDict, keywords OrderedDict or None, model_class or None)."""
    try:
        obj = torch.load(path, map_location="cpu")
    except FileNotFoundError:
        raise ExportError("checkpoint %s does not exist" % path)
    except Exception as e:  # unpickling problems, corrupt files, missing classes
        raise ExportError("cannot load checkpoint %s: %s: %s (a pickled model needs its class "
                          "importable; prefer saving model.state_dict() with its keywords)"
                          % (path, type(e).__name__, e))
    keywords, model_class = None, None
    if isinstance(obj, torch.nn.Module):
        model_class = type(obj).__name__ if type(obj).__name__ in MODEL_CLASSES else None
        sd = obj.state_dict()
    elif isinstance(obj, collections.abc.Mapping):
        field = next((f for f in _SD_FIELDS if f in obj), None)
        if field is not None and not _is_tensor_map(obj):
            sd = obj[field]
            if isinstance(sd, torch.nn.Module):
                if model_class is None and type(sd).__name__ in MODEL_CLASSES:
                    model_class = type(sd).__name__
                sd = sd.state_dict()
            if not _is_tensor_map(sd):
                raise ExportError("checkpoint field %r is not a state_dict (name -> tensor)" % field)
            cfg_field = next((f for f in _CFG_FIELDS if f in obj and obj[f] is not None), None)
            if cfg_field is not None:
                keywords = _as_keywords(obj[cfg_field], "checkpoint field %r" % cfg_field)
            mc = obj.get("model_class")
            if mc is not None:
                model_class = mc if isinstance(mc, str) else getattr(mc, "__name__", str(mc))
        elif _is_tensor_map(obj):
            sd = obj
        else:
            raise ExportError("checkpoint %s is neither a state_dict nor a dict holding one under %s "
                              "(top-level keys: %s)" % (path, " / ".join(repr(f) for f in _SD_FIELDS),
                                                        ", ".join(map(str, list(obj)[:12]))))
    else:
        raise ExportError("checkpoint %s holds a %s, expected a state_dict or a dict"
                          % (path, type(obj).__name__))
    sd = collections.OrderedDict(sd.items())
    if keywords is not None and "model_class" in keywords:
        model_class = model_class or keywords["model_class"]
    return sd, keywords, model_class


def strip_wrapper_prefixes(sd):
    """Strips a prefix every key shares ("module.", "model.", ...). Returns (sd, stripped list)."""
    stripped = []
    while True:
        for pre in _STRIP_PREFIXES:
            if all(k.startswith(pre) for k in sd):
                # "net." only for an AutoregressiveWrapper around a PerformerLM.
                if pre == "net." and not any(k == "net.token_emb.weight" for k in sd):
                    continue
                sd = collections.OrderedDict((k[len(pre):], v) for k, v in sd.items())
                stripped.append(pre)
                break
        else:
            return sd, stripped


def infer_model_class(sd):
    keys = list(sd)
    if any(k.startswith("enc.") for k in keys) and any(k.startswith("dec.net.") for k in keys):
        return "PerformerEncDec"
    if keys == ["projection_matrix"]:
        return "FastAttention"
    return "PerformerLM"


def convert_dtype(sd, dtype, drop_aliases):
    out = collections.OrderedDict()
    for k, t in sd.items():
        if drop_aliases and ALIAS_INFIX in k:
            continue
        t = t.detach().cpu()
        if t.is_floating_point():
            t = t.to(dtype)
            if not bool(torch.isfinite(t).all()):
                raise ExportError("tensor %s does not fit in %s (values become non-finite)"
                                  % (k, str(dtype).replace("torch.", "")))
        out[k] = t.contiguous().clone()
    return out


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

_DTYPES = ("bfloat16", "float16", "float32")


def build_parser():
    p = argparse.ArgumentParser(
        prog="export_performer.py",
        description="Export a performer-pytorch checkpoint (.pt) into a performer-serve model folder "
                    "(config.json + weights.safetensors).",
        epilog="Exit status: 0 success, 2 usage/validation error. See the module docstring for the "
               "accepted checkpoint layouts and config.json conventions.")
    p.add_argument("checkpoint", metavar="CHECKPOINT.pt", help="file written by torch.save")
    p.add_argument("out_dir", metavar="OUT_DIR", help="output folder (created if missing)")
    p.add_argument("--model-class", choices=MODEL_CLASSES,
                   help="model class (default: from the checkpoint, else inferred from the keys)")
    p.add_argument("--config", metavar="JSON_FILE",
                   help="JSON object of constructor keywords; wins over the checkpoint's keywords")
    p.add_argument("--dtype", choices=_DTYPES, default="float32",
                   help="dtype of the exported floating tensors (default float32)")
    p.add_argument("--drop-aliases", action="store_true",
                   help="leave out the duplicate %s* keys" % ALIAS_INFIX)
    p.add_argument("--force", action="store_true", help="write into a non-empty OUT_DIR")
    return p


def export(args):
    if os.path.exists(args.out_dir):
        if not os.path.isdir(args.out_dir):
            raise ExportError("OUT_DIR %s exists and is not a folder" % args.out_dir)
        if os.listdir(args.out_dir) and not args.force:
            raise ExportError("OUT_DIR %s exists and is not empty; pass --force to overwrite"
                              % args.out_dir)

    sd, keywords, ckpt_class = load_checkpoint(args.checkpoint)
    sd, stripped = strip_wrapper_prefixes(sd)
    if stripped:
        _warn("stripped key prefix %s from every state_dict key" % "".join(stripped))

    if args.config:
        try:
            with open(args.config) as f:
                extra = json.load(f, object_pairs_hook=collections.OrderedDict)
        except (OSError, ValueError) as e:
            raise ExportError("cannot read --config %s: %s" % (args.config, e))
        if not isinstance(extra, dict):
            raise ExportError("--config %s must hold a JSON object" % args.config)
        merged = collections.OrderedDict(keywords or {})
        merged.update(extra)
        keywords = merged

    model_class = (args.model_class or (keywords or {}).get("model_class") or ckpt_class
                   or infer_model_class(sd))
    if model_class not in MODEL_CLASSES:
        raise ExportError("unknown model class %r (expected one of %s)"
                          % (model_class, ", ".join(MODEL_CLASSES)))

    if not keywords or all(k == "model_class" for k in keywords):
        required = {"PerformerLM": LM_KEYWORDS, "FastAttention": FAST_ATTENTION_KEYWORDS}
        if model_class == "PerformerEncDec":
            req = ["dim"] + ["%s_%s" % (h, k) for h in ("enc", "dec")
                             for k, (d, _) in LM_KEYWORDS.items() if d is _REQ and k != "dim"]
        else:
            req = [k for k, (d, _) in required[model_class].items() if d is _REQ]
        raise ExportError(
            "the checkpoint carries no constructor keywords for %s: pass --config JSON_FILE "
            "(missing required: %s; a state_dict alone cannot tell %s)"
            % (model_class, ", ".join(req), _UNKNOWABLE if model_class != "FastAttention"
               else "causal, generalized_attention, kernel_fn, no_projection"))

    cfg = resolve_config(model_class, keywords)
    validate(cfg, sd)
    tensors = convert_dtype(sd, getattr(torch, args.dtype), args.drop_aliases)

    os.makedirs(args.out_dir, exist_ok=True)
    metadata = collections.OrderedDict([
        ("format", FORMAT_TAG),
        ("source", os.path.basename(args.checkpoint)),
        ("exporter", EXPORTER_NAME),
    ])
    # Write into temporaries first so that a failure never leaves half a model behind.
    written = []
    try:
        fd, tmp_w = tempfile.mkstemp(prefix=".weights.", suffix=".tmp", dir=args.out_dir)
        os.close(fd)
        written.append(tmp_w)
        write_safetensors(tmp_w, tensors, metadata)
        fd, tmp_c = tempfile.mkstemp(prefix=".config.", suffix=".tmp", dir=args.out_dir)
        written.append(tmp_c)
        with os.fdopen(fd, "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        os.replace(tmp_w, os.path.join(args.out_dir, "weights.safetensors"))
        os.replace(tmp_c, os.path.join(args.out_dir, "config.json"))
        written = []
    finally:
        for t in written:
            if os.path.exists(t):
                os.remove(t)
    return cfg, tensors


def _reexec_with_system_python():
    """Under a Python without torch (e.g. a pyenv shim), retry once with /usr/bin/python3."""
    system = "/usr/bin/python3"
    if (os.environ.get("EXPORT_PERFORMER_REEXEC") or not os.path.exists(system)
            or os.path.realpath(sys.executable) == os.path.realpath(system)):
        return
    os.environ["EXPORT_PERFORMER_REEXEC"] = "1"
    sys.stderr.flush()
    os.execv(system, [system, os.path.abspath(__file__)] + sys.argv[1:])


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)  # exits with status 2 on a usage error
    if _IMPORT_ERROR is not None:
        if argv is None:
            _reexec_with_system_python()
        sys.stderr.write("export_performer.py: error: needs torch and numpy (%s); run it with a "
                         "Python that has them (Debian: /usr/bin/python3 with python3-torch)\n"
                         % _IMPORT_ERROR)
        return 2
    try:
        cfg, tensors = export(args)
    except ExportError as e:
        sys.stderr.write("export_performer.py: error: %s\n" % e)
        return 2
    sys.stderr.write("export_performer.py: wrote %s (%s, %d tensors, %s)\n"
                     % (args.out_dir, cfg["model_class"], len(tensors), args.dtype))
    return 0


if __name__ == "__main__":
    sys.exit(main())
