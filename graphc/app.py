"""tf.app: `tf.app.run()` parses the command line into tf.flags.FLAGS, then calls
main(argv) with the arguments left over and exits with its return value, as TF1's (which
is absl.app.run tolerating flags it does not know: TF1 scripts pass flags that other
libraries define)."""
import sys

from absl import app as _absl_app

from graphc import flags  # noqa: F401  (tf.app.flags)
from graphc.flags import FLAGS


def _parse_known_flags(argv):
    return FLAGS(argv, known_only=True)


def run(main=None, argv=None):
    """Parses flags from argv (default sys.argv), then sys.exit(main(remaining argv)).
    main defaults to the `main` function of the __main__ module, as in TF1."""
    if main is None:
        main = getattr(sys.modules["__main__"], "main", None)
        if main is None:
            raise ValueError("tf.app.run(): no main given and the __main__ module defines "
                             "no function `main`")
    _absl_app.run(main, argv=argv, flags_parser=_parse_known_flags)
