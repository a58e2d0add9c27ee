"""tf.app.flags / tf.flags: TF1's flags are absl's (TF1 itself re-exports absl.flags), so
scripts' DEFINE_* calls, `--name=value` arguments, validators and help behave exactly as
there. What TF1 adds is kept here: FLAGS parses sys.argv on the first read of a flag when
nothing has parsed it yet (TF1 scripts that never call tf.app.run still see their command
line), and DEFINE_bool is DEFINE_boolean.
"""
import sys

from absl import flags as _absl
from absl.flags import (DEFINE, DEFINE_alias, DEFINE_bool, DEFINE_boolean,  # noqa: F401
                        DEFINE_enum, DEFINE_enum_class, DEFINE_flag, DEFINE_float,
                        DEFINE_integer, DEFINE_list, DEFINE_multi, DEFINE_multi_enum,
                        DEFINE_multi_float, DEFINE_multi_integer, DEFINE_multi_string,
                        DEFINE_spaceseplist, DEFINE_string, Error, Flag, FlagValues,
                        IllegalFlagValueError, UnrecognizedFlagError, ValidationError,
                        declare_key_flag, mark_flag_as_required, mark_flags_as_required,
                        register_validator, validator)


class _FlagValuesWrapper:
    """absl's FlagValues, parsing the command line on the first read of a flag as TF1's
    wrapper does (absl alone raises UnparsedFlagAccessError)."""

    def __init__(self, wrapped):
        self.__dict__["_wrapped"] = wrapped

    def __getattr__(self, name):
        wrapped = self.__dict__["_wrapped"]
        if not name.startswith("__") and not wrapped.is_parsed():
            # known_only: flags of other modules (pytest's, a notebook's) do not stop it
            wrapped(sys.argv, known_only=True)
        return getattr(wrapped, name)

    def __setattr__(self, name, value):
        setattr(self.__dict__["_wrapped"], name, value)

    def __delattr__(self, name):
        delattr(self.__dict__["_wrapped"], name)

    def __dir__(self):
        return dir(self.__dict__["_wrapped"])

    def __getitem__(self, name):
        return self.__dict__["_wrapped"][name]

    def __contains__(self, name):
        return name in self.__dict__["_wrapped"]

    def __iter__(self):
        return iter(self.__dict__["_wrapped"])

    def __len__(self):
        return len(self.__dict__["_wrapped"])

    def __call__(self, *args, **kwargs):
        return self.__dict__["_wrapped"](*args, **kwargs)


FLAGS = _FlagValuesWrapper(_absl.FLAGS)
