"""tf.contrib.training.HParams: named hyperparameters with TF1's typing and parsing.

Each hyperparameter keeps the type of its first value (int, float, bool, str, or a list of
one of them): set_hparam/override_from_dict/parse convert to it where TF1 does (an int
into a float) and refuse the rest (a float into an int, anything into a bool but a bool).
parse("a=1,b=[1,2],c=x") and parse_json/to_json read and write them.
"""
import json
import numbers
import re

__all__ = ["HParams"]

_PARAM_RE = re.compile(r"""
  (?P<name>[a-zA-Z][\w\.]*)      # variable name: "var" or "x"
  (\[\s*(?P<index>\d+)\s*\])?    # (optional) index: "1" or None
  \s*=\s*
  ((?P<val>[^,\[]*)              # single value: "a" or None
   |
   \[(?P<vals>[^\]]*)\])         # list of values: None or "1,2,3"
  ($|,\s*)""", re.VERBOSE)


def _cast(name, param_type, value):
    """value as param_type where TF1 allows it, else ValueError."""
    def fail():
        return ValueError(f"Could not cast hparam '{name}' of type '{param_type}' from value "
                          f"{value!r}")
    if issubclass(param_type, type(None)):
        return value
    if issubclass(param_type, (str, bytes)) and not isinstance(value, (str, bytes)):
        raise fail()
    if issubclass(param_type, bool) != isinstance(value, bool):
        raise fail()
    if issubclass(param_type, numbers.Integral) and not isinstance(value, numbers.Integral):
        raise fail()
    if issubclass(param_type, numbers.Number) and not isinstance(value, numbers.Number):
        raise fail()
    return param_type(value)


def _parse_scalar(name, param_type, text):
    if param_type is bool:
        if text in ("true", "True"):
            return True
        if text in ("false", "False"):
            return False
        try:
            return bool(int(text))
        except ValueError:
            raise ValueError(f"Could not parse hparam '{name}' of type bool from {text!r}")
    try:
        return param_type(text)
    except ValueError:
        raise ValueError(f"Could not parse hparam '{name}' of type '{param_type.__name__}' "
                         f"from {text!r}") from None


class HParams:
    def __init__(self, hparam_def=None, model_structure=None, **kwargs):
        if hparam_def is not None:
            raise ValueError("HParams(hparam_def=...): the protobuf form is not supported by "
                             "graphc; pass the values as keyword arguments")
        self._hparam_types = {}  # name -> (element type, is_list)
        self._model_structure = model_structure
        for name, value in kwargs.items():
            self.add_hparam(name, value)

    def add_hparam(self, name, value):
        if getattr(self, name, None) is not None:
            raise ValueError(f"Hyperparameter name is reserved: {name}")
        if isinstance(value, (list, tuple)):
            if not value:
                raise ValueError(f"Multi-valued hyperparameters cannot be empty: {name}")
            self._hparam_types[name] = (type(value[0]), True)
        else:
            self._hparam_types[name] = (type(value), False)
        setattr(self, name, value)

    def set_hparam(self, name, value):
        if name not in self._hparam_types:
            raise KeyError(f"Unknown hyperparameter: {name}")
        param_type, is_list = self._hparam_types[name]
        if isinstance(value, list):
            if not is_list:
                raise ValueError(f"Must not pass a list for single-valued parameter: {name}")
            setattr(self, name, [_cast(name, param_type, v) for v in value])
        else:
            if is_list:
                raise ValueError(f"Must pass a list for multi-valued parameter: {name}.")
            setattr(self, name, _cast(name, param_type, value))

    def del_hparam(self, name):
        if hasattr(self, name):
            delattr(self, name)
            del self._hparam_types[name]

    def parse(self, values):
        """Overrides hyperparameters from "name=value,name=[v1,v2],..."; names must exist."""
        for name, value in self._parse_values(values).items():
            self.set_hparam(name, value)
        return self

    def _parse_values(self, values):
        results, pos = {}, 0
        while pos < len(values):
            m = _PARAM_RE.match(values, pos)
            if not m:
                raise ValueError(f"Malformed hyperparameter value: {values[pos:]!r}")
            pos = m.end()
            name = m.group("name")
            if name not in self._hparam_types:
                raise ValueError(f"Unknown hyperparameter type for {name}")
            if name in results:
                raise ValueError(f"Multiple assignments to variable '{name}' in {values!r}")
            param_type, is_list = self._hparam_types[name]
            if m.group("index") is not None:
                raise ValueError(f"Indexed assignment ({name}[i]=...) is not supported by "
                                 "graphc's HParams.parse")
            if m.group("vals") is not None:
                if not is_list:
                    raise ValueError(f"Must not pass a list for single-valued parameter: "
                                     f"{name}")
                items = [v.strip() for v in m.group("vals").split(",") if v.strip()]
                results[name] = [_parse_scalar(name, param_type, v) for v in items]
            else:
                if is_list:
                    raise ValueError(f"Must pass a list for multi-valued parameter: {name}.")
                results[name] = _parse_scalar(name, param_type, m.group("val").strip())
        return results

    def override_from_dict(self, values_dict):
        for name, value in values_dict.items():
            self.set_hparam(name, value)
        return self

    def set_model_structure(self, model_structure):
        self._model_structure = model_structure

    def get_model_structure(self):
        return self._model_structure

    def to_json(self, indent=None, separators=None, sort_keys=False):
        return json.dumps(self.values(), indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def parse_json(self, values_json):
        return self.override_from_dict(json.loads(values_json))

    def values(self):
        return {name: getattr(self, name) for name in self._hparam_types}

    def get(self, key, default=None):
        if key not in self._hparam_types:
            return default
        if default is not None:
            param_type, is_list = self._hparam_types[key]
            wanted = list if is_list else param_type
            if not isinstance(default, wanted) and not (
                    wanted is float and isinstance(default, numbers.Integral)
                    and not isinstance(default, bool)):
                raise ValueError(f"Hparam '{key}' of type '{wanted}' is incompatible with "
                                 f"default={default!r}")
        return getattr(self, key)

    def __contains__(self, key):
        return key in self._hparam_types

    def __str__(self):
        return str(sorted(self.values().items()))

    def __repr__(self):
        return f"{type(self).__name__}({self.__str__()})"
