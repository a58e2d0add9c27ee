"""Device strings of tf.device scopes: parsed, merged with the enclosing scope, canonical.

"/cpu:0", "/gpu:1", "/device:GPU:0" and "/job:worker/task:1/device:CPU:0" are all
accepted; ops record the canonical form ("/device:GPU:0", with job/replica/task
first when given), as TF1 does. An inner scope overrides only the fields it names.
"""
import re

_FIELDS = ("job", "replica", "task", "device_type", "device_index")


def parse_device(spec):
    """{field: value} of a device string; ValueError for a malformed one."""
    fields = {}
    for part in (spec or "").split("/"):
        if not part:
            continue
        key, _, rest = part.partition(":")
        key_l = key.lower()
        if key_l in ("job", "replica", "task") and rest:
            fields[key_l] = rest
        elif key_l in ("cpu", "gpu") and re.fullmatch(r"\d+|\*", rest):
            fields["device_type"], fields["device_index"] = key_l.upper(), rest
        elif key_l == "device" and re.fullmatch(r"[A-Za-z_]+(:(\d+|\*))?", rest):
            dtype, _, index = rest.partition(":")
            fields["device_type"] = dtype.upper() if dtype.lower() in ("cpu", "gpu") else dtype
            fields["device_index"] = index or "*"
        else:
            raise ValueError(f"Unknown attribute: '{part}' in '{spec}'")
    return fields


def to_string(fields):
    out = "".join(f"/{k}:{fields[k]}" for k in ("job", "replica", "task") if k in fields)
    if "device_type" in fields:
        index = fields.get("device_index", "*")
        out += f"/device:{fields['device_type']}" + ("" if index == "*" else f":{index}")
    return out


def merge_device(outer, inner):
    """The device of a scope `inner` opened inside a scope `outer` (both strings)."""
    if not inner:
        return outer or ""
    fields = parse_device(outer)
    fields.update(parse_device(inner))
    return to_string(fields)


def device_type(spec):
    """"CPU", "GPU", ... of a canonical device string, or None when it names no device."""
    return parse_device(spec).get("device_type")
