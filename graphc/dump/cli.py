"""The graphc-dump command line (console script `graphc-dump`)."""
import argparse
import json
import sys

from graphc.dump import graphviz, html_page, text
from graphc.dump.model import DumpError, read_dump

FORMATS = ("text", "json", "dot", "svg", "html")


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # one line, no usage block: the user asked for something we do not understand
        raise DumpError(f"{message} (see graphc-dump --help)")


def _parser():
    p = _Parser(prog="graphc-dump", description=(
        "Show a graphc compiled file (gc.export) or saved graph (gc.train.write_graph, "
        "export_meta_graph): ops, kernel clusters, memory plan, pass counts, code."))
    p.add_argument("file", help="a compiled file or a saved graph")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text summary (default), json for tools, dot/svg (Graphviz), html "
                        "(one self-contained interactive page)")
    p.add_argument("--stage", choices=("before", "after"),
                   help="the graph before or after the passes (default after)")
    p.add_argument("--after-pass", metavar="NAME", help="print the IR text after pass NAME")
    p.add_argument("--code", metavar="KERNEL",
                   help="print a kernel's generated code (index, kernel name, function "
                        "name, or 'all' for the whole module)")
    p.add_argument("--memory", action="store_true", help="print the memory plan as a timeline")
    p.add_argument("-o", "--output", metavar="PATH", help="write to PATH instead of stdout")
    return p


def render(args):
    views = [v for v in ("after_pass", "code", "memory") if getattr(args, v)]
    if len(views) > 1:
        raise DumpError("--after-pass, --code and --memory are separate views: give one")
    if views and args.format != "text":
        raise DumpError(f"--{views[0].replace('_', '-')} prints text; it does not combine "
                        f"with --format {args.format}")
    d = read_dump(args.file)
    if args.after_pass:
        return text.after_pass_view(d, args.after_pass)
    if args.code:
        return text.code_view(d, args.code)
    if args.memory:
        return text.memory_view(d)
    if args.format == "text":
        return text.summary(d, args.stage)
    if args.format == "json":
        text.stage_name(d, args.stage)  # the same stage checks as the other formats
        return json.dumps(d.to_dict(), indent=1) + "\n"
    if args.format == "html":
        return html_page.to_html(d, args.stage)
    dot = graphviz.to_dot(d, args.stage)
    return dot if args.format == "dot" else graphviz.to_svg(dot)


def _render_one_line_errors(args):
    """render(args), where the file's contents are what failed: a compiled file's debug
    section (graphs, kernels, memory plan) is display data the runtime never checks, so a
    damaged one must end in graphc-dump's one-line error, not a traceback."""
    try:
        return render(args)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError,
            RecursionError) as e:
        raise DumpError(f"{args.file}: damaged or inconsistent contents "
                        f"({type(e).__name__}: {str(e)[:200]})") from None


def main(argv=None):
    try:
        args = _parser().parse_args(argv)
        out = _render_one_line_errors(args)
        if args.output:
            try:
                with open(args.output, "w") as f:
                    f.write(out)
            except OSError as e:
                raise DumpError(f"cannot write {args.output}: {e.strerror or e}") from None
        else:
            sys.stdout.write(out)
    except DumpError as e:
        print(f"graphc-dump: {e}", file=sys.stderr)
        return 1 if "see graphc-dump --help" not in str(e) else 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    return 0
