#!/usr/bin/env python3
"""Export a fast-transformers language model into a performer-serve model folder.

Usage:
    export_fast_transformers.py CHECKPOINT.pt OUT_DIR [--config JSON_FILE]
                                [--dtype float32|float16|bfloat16] [--force]

The model is a FastTransformersLM (docs/models.md): token_emb + pos_emb (learned positions) + an
encoder built with fast-transformers' TransformerEncoderBuilder + to_logits. The folder holds

  OUT_DIR/config.json          {"model_class": "FastTransformersLM", "num_tokens", "max_seq_len",
                                "encoder": <the builder's keyword arguments>}
  OUT_DIR/weights.safetensors  the state_dict, keys as PyTorch names them, floats as --dtype

CHECKPOINT.pt is read with torch.load(map_location="cpu") and may be
  * a dict holding the state_dict under "state_dict" / "model_state_dict" / "model" and the
    configuration (num_tokens, max_seq_len, encoder) under "config" / "kwargs" / "hparams";
  * a bare state_dict (name -> tensor): the configuration must then come from --config;
  * a pickled nn.Module (only if its class can be imported here): its state_dict, the
    configuration from --config or from a dict attribute "config" of the module.
A wrapper prefix ("module.", "model.", "_orig_mod.") shared by every key is stripped.

--config JSON_FILE supplies the configuration too (it may be a config.json written by this tool);
its keys win. The encoder's feature map is {"type": <class>, <keyword arguments>...} with <class>
one of elu, Favor, RandomFourierFeatures, SmoothedRandomFourierFeatures,
GeneralizedRandomFeatures; absent = elu(x) + 1. Random feature maps must have been sampled once
(their omega is in the state_dict and is never resampled by the server).

Before anything is written the exporter validates: the configuration's fields and types, then the
keys and shapes the configuration implies (every one present, none unexpected, each of the right
shape), and that every floating tensor is finite (also after the dtype conversion). It refuses to
write into an existing non-empty OUT_DIR unless --force is given.

Exit status: 0 on success, 2 on a usage or validation error (message on stderr), 1 on an
unexpected internal error.
"""

import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_performer as common  # noqa: E402  (safetensors I/O, checkpoint loading, errors)

ExportError = common.ExportError
EXPORTER_NAME = "export_fast_transformers.py"
MODEL_CLASS = "FastTransformersLM"
ENCODER_INT_KEYS = ("n_layers", "n_heads", "query_dimensions", "value_dimensions",
                    "feed_forward_dimensions", "model_dimensions")
# The builder's defaults (fast-transformers 0.4.0).
ENCODER_DEFAULTS = {"n_layers": 4, "n_heads": 4, "query_dimensions": 64, "value_dimensions": 64,
                    "feed_forward_dimensions": 1024, "final_normalization": True}
FEATURE_MAPS = ("elu", "Favor", "RandomFourierFeatures", "SmoothedRandomFourierFeatures",
                "GeneralizedRandomFeatures")
STATE_DICT_KEYS = ("state_dict", "model_state_dict", "model")
CONFIG_KEYS = ("config", "kwargs", "hparams")
WRAPPER_PREFIXES = ("module.", "model.", "_orig_mod.")


def _positive_int(where, name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ExportError("%s: %r must be a positive integer, got %r" % (where, name, value))
    return value


def check_config(config):
    """Validates the configuration; returns it with model_class set."""
    if not isinstance(config, dict):
        raise ExportError("the configuration must be a JSON object, got %r" % (config,))
    config = collections.OrderedDict(config)
    if config.get("model_class", MODEL_CLASS) != MODEL_CLASS:
        raise ExportError("model_class is %r; this exporter writes %s folders "
                          "(tools/export_performer.py writes performer-pytorch ones)"
                          % (config["model_class"], MODEL_CLASS))
    unknown = sorted(set(config) - {"model_class", "num_tokens", "max_seq_len", "encoder"})
    if unknown:
        raise ExportError("unknown configuration keys: %s" % ", ".join(unknown))
    for name in ("num_tokens", "max_seq_len"):
        if name not in config:
            raise ExportError("the configuration lacks %r" % name)
        _positive_int("config", name, config[name])
    encoder = config.get("encoder")
    if not isinstance(encoder, dict):
        raise ExportError("the configuration lacks \"encoder\": the builder's keyword arguments")
    for name in ENCODER_INT_KEYS:
        if name in encoder and encoder[name] is not None:
            _positive_int("encoder", name, encoder[name])
    feature_map = encoder.get("feature_map")
    if feature_map is not None:
        if not isinstance(feature_map, dict) or feature_map.get("type") not in FEATURE_MAPS:
            raise ExportError("encoder.feature_map must be {\"type\": one of %s, ...}, got %r"
                              % (", ".join(FEATURE_MAPS), feature_map))
    out = collections.OrderedDict([("model_class", MODEL_CLASS)])
    for name in ("num_tokens", "max_seq_len", "encoder"):
        out[name] = config[name]
    return out


def expected_shapes(config):
    """name -> shape of every tensor the configuration implies, in state_dict order."""
    enc = dict(ENCODER_DEFAULTS)
    enc.update({k: v for k, v in config["encoder"].items() if v is not None})
    heads, qd, vd = enc["n_heads"], enc["query_dimensions"], enc["value_dimensions"]
    d_model = enc.get("model_dimensions") or heads * vd
    ff = enc["feed_forward_dimensions"]
    vocab, length = config["num_tokens"], config["max_seq_len"]
    shapes = collections.OrderedDict()
    shapes["token_emb.weight"] = [vocab, d_model]
    shapes["pos_emb.weight"] = [length, d_model]
    feature_map = enc.get("feature_map")
    omega = None
    if feature_map is not None and feature_map["type"] != "elu":
        n_dims = feature_map.get("n_dims") or qd
        omega = [qd, n_dims] if feature_map["type"] == "GeneralizedRandomFeatures" else [qd, n_dims // 2]
    for i in range(enc["n_layers"]):
        p = "encoder.layers.%d." % i
        if omega is not None:
            shapes[p + "attention.inner_attention.feature_map.omega"] = omega
        for proj, rows, cols in (("query", heads * qd, d_model), ("key", heads * qd, d_model),
                                 ("value", heads * vd, d_model), ("out", d_model, heads * vd)):
            shapes[p + "attention.%s_projection.weight" % proj] = [rows, cols]
            shapes[p + "attention.%s_projection.bias" % proj] = [rows]
        shapes[p + "linear1.weight"] = [ff, d_model]
        shapes[p + "linear1.bias"] = [ff]
        shapes[p + "linear2.weight"] = [d_model, ff]
        shapes[p + "linear2.bias"] = [d_model]
        for norm in ("norm1", "norm2"):
            shapes[p + norm + ".weight"] = [d_model]
            shapes[p + norm + ".bias"] = [d_model]
    if enc.get("final_normalization", True):
        shapes["encoder.norm.weight"] = [d_model]
        shapes["encoder.norm.bias"] = [d_model]
    shapes["to_logits.weight"] = [vocab, d_model]
    shapes["to_logits.bias"] = [vocab]
    return shapes


def strip_wrapper(state):
    for prefix in WRAPPER_PREFIXES:
        if state and all(k.startswith(prefix) for k in state):
            return collections.OrderedDict((k[len(prefix):], v) for k, v in state.items())
    return state


def split_checkpoint(obj):
    """(state_dict, configuration or None) of a loaded checkpoint."""
    torch = common.torch
    if isinstance(obj, torch.nn.Module):
        config = getattr(obj, "config", None)
        return collections.OrderedDict(obj.state_dict()), config if isinstance(config, dict) else None
    if not isinstance(obj, dict):
        raise ExportError("the checkpoint is a %s, not a state_dict, a dict or a module"
                          % type(obj).__name__)
    for key in STATE_DICT_KEYS:
        if isinstance(obj.get(key), dict):
            config = next((obj[k] for k in CONFIG_KEYS if isinstance(obj.get(k), dict)), None)
            return collections.OrderedDict(obj[key]), config
    if all(isinstance(v, torch.Tensor) for v in obj.values()):
        return collections.OrderedDict(obj), None
    raise ExportError("the checkpoint dict has no state_dict under %s" % ", ".join(STATE_DICT_KEYS))


def check_tensors(state, config):
    shapes = expected_shapes(config)
    missing = [k for k in shapes if k not in state]
    unexpected = [k for k in state if k not in shapes]
    wrong = ["%s: %s, expected %s" % (k, list(state[k].shape), shapes[k])
             for k in shapes if k in state and list(state[k].shape) != shapes[k]]
    problems = []
    if missing:
        problems.append("missing keys: " + ", ".join(missing))
    if unexpected:
        problems.append("unexpected keys: " + ", ".join(unexpected))
    if wrong:
        problems.append("wrong shapes: " + "; ".join(wrong))
    if problems:
        raise ExportError("the state_dict does not match the configuration:\n  " +
                          "\n  ".join(problems))
    return collections.OrderedDict((k, state[k]) for k in shapes)


def convert(state, dtype):
    torch = common.torch
    out = collections.OrderedDict()
    for name, t in state.items():
        t = t.detach().cpu()
        if not t.is_floating_point():
            raise ExportError("tensor %r has dtype %s; a FastTransformersLM holds floats only"
                              % (name, t.dtype))
        if not torch.isfinite(t).all():
            raise ExportError("tensor %r has non-finite values" % name)
        converted = t.to(dtype).contiguous()
        if not torch.isfinite(converted.float()).all():
            raise ExportError("tensor %r overflows %s" % (name, dtype))
        out[name] = converted
    return out


def export(checkpoint, out_dir, config_file=None, dtype="float32", force=False):
    torch = common.torch
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if dtype not in dtypes:
        raise ExportError("--dtype must be one of %s" % ", ".join(dtypes))
    try:
        loaded = torch.load(checkpoint, map_location="cpu")
    except FileNotFoundError:
        raise ExportError("%s: no such file" % checkpoint)
    state, config = split_checkpoint(loaded)
    if config_file is not None:
        with open(config_file) as f:
            overrides = json.load(f, object_pairs_hook=collections.OrderedDict)
        config = dict(config or {}, **overrides)
    if config is None:
        raise ExportError("the checkpoint holds no configuration: give --config "
                          "(num_tokens, max_seq_len, encoder)")
    config = check_config(config)
    tensors = convert(check_tensors(strip_wrapper(state), config), dtypes[dtype])
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not force:
        raise ExportError("%s exists and is not empty (use --force to overwrite)" % out_dir)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
        f.write("\n")
    common.write_safetensors(os.path.join(out_dir, "weights.safetensors"), tensors,
                             {"format": "pt", "exporter": EXPORTER_NAME})
    return config


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("out_dir")
    parser.add_argument("--config")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    if common.torch is None:
        sys.stderr.write("export_fast_transformers.py needs torch and numpy (%s)\n"
                         % common._IMPORT_ERROR)
        return 2
    try:
        config = export(args.checkpoint, args.out_dir, args.config, args.dtype, args.force)
    except ExportError as e:
        sys.stderr.write("export_fast_transformers.py: %s\n" % e)
        return 2
    print("wrote %s (%s, %d layers)" % (args.out_dir, MODEL_CLASS,
                                        config["encoder"].get("n_layers", 4)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception as e:  # pylint: disable=broad-except
        sys.stderr.write("export_fast_transformers.py: internal error: %r\n" % (e,))
        sys.exit(1)
