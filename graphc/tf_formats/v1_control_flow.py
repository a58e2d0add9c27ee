"""TF1's own while loops (control flow v1: Enter/Merge/Switch/LoopCond/NextIteration/Exit
frames, what TF 1.x and `tf.compat.v1.disable_control_flow_v2()` write) rebuilt as While
ops whose bodies are functions, on graph_io node dicts.

A frame is the nodes between its Enter and Exit nodes. For each loop variable TF writes
    Enter -> Merge(Enter, NextIteration) -> Switch(Merge, LoopCond) -> Exit (Switch:0)
                                                            \\-> the body (Switch:1)
and a constant Enter (is_constant) for each tensor the loop reads from outside. The cond
is what LoopCond's input needs back to the Merges; the body what the NextIterations'
inputs need back to the Switches. Both become functions in TF 2.x's layout (every
variable and constant an argument; the body passes the constants through), and the frame
one While whose outputs the Exits' names keep (as Identities). Loops nested in a body are
rebuilt first, innermost out. TF1's conds (Switch/Merge outside a loop's bookkeeping)
and the stacks of TF1's loop gradients are not read: a graph holding them is refused,
naming the op."""
from graphc.tf_formats.graph_def import _functional, unique_name
from graphc.tf_formats.tensors import FormatError

_LOOP_OPS = frozenset({"Enter", "Merge", "Switch", "LoopCond", "NextIteration", "Exit",
                       "RefEnter", "RefMerge", "RefSwitch", "RefNextIteration", "RefExit"})


def rebuild_loops(nodes):
    """(node dicts, function dicts) with every v1 loop frame of `nodes` a While."""
    functions = []
    while True:
        frames = {}
        for node in nodes:
            if node["op"] == "Enter":
                frames.setdefault(node["attrs"].get("frame_name"), []).append(node)
        if not frames:
            return nodes, functions
        for frame, enters in frames.items():
            loop = _Loop(frame, enters, nodes)
            if loop.innermost():
                nodes = loop.rebuilt(functions)
                break
        else:
            raise FormatError(f"the TF1 loop frames {sorted(frames)} could not be read as "
                              "while loops")


def _name(tensor):
    return tensor.rsplit(":", 1)[0]


class _Loop:
    def __init__(self, frame, enters, nodes):
        self.frame, self.nodes = frame, nodes
        self.by_name = {n["name"]: n for n in nodes}
        consumers = {}
        for node in nodes:
            for t in node["inputs"]:
                consumers.setdefault(t, []).append(node)
        self.where = f"TF1 loop frame '{frame}'"
        self.constants = [e for e in enters if e["attrs"].get("is_constant")]
        self.variables = []  # (enter, merge, switch, next iteration, exit or None)
        for enter in enters:
            if enter["attrs"].get("is_constant"):
                continue
            merge = self._one(consumers, enter["name"] + ":0", "Merge")
            switch = self._one(consumers, merge["name"] + ":0", "Switch")
            nexts = [self.by_name.get(_name(t)) for t in merge["inputs"][1:]]
            if len(nexts) != 1 or nexts[0] is None or nexts[0]["op"] != "NextIteration":
                raise FormatError(f"{self.where}: Merge '{merge['name']}' does not take a "
                                  "NextIteration")
            exits = [n for n in consumers.get(switch["name"] + ":0", []) if n["op"] == "Exit"]
            self.variables.append((enter, merge, switch, nexts[0], exits[0] if exits else None))
        if not self.variables:
            raise FormatError(f"{self.where} has no loop variable")
        self.loop_cond = self.by_name.get(_name(self.variables[0][2]["inputs"][1]))
        if self.loop_cond is None or self.loop_cond["op"] != "LoopCond":
            raise FormatError(f"{self.where}: its Switches do not take a LoopCond")
        stops = {e["name"] for e in self.constants}
        self.cond_nodes = self._needed([self.loop_cond["inputs"][0]],
                                       stops | {v[1]["name"] for v in self.variables})
        self.body_nodes = self._needed([v[3]["inputs"][0] for v in self.variables],
                                       stops | {v[2]["name"] for v in self.variables})

    def _one(self, consumers, tensor, op):
        found = [n for n in consumers.get(tensor, []) if n["op"] == op]
        if len(found) != 1:
            raise FormatError(f"{self.where}: {tensor} feeds {len(found)} {op} nodes, "
                              "a loop variable's bookkeeping has one")
        return found[0]

    def _needed(self, tensors, stops):
        """The names of the nodes `tensors` need back to `stops`, in file order."""
        seen, stack = set(), [_name(t) for t in tensors]
        while stack:
            name = stack.pop()
            if name in seen or name in stops:
                continue
            node = self.by_name.get(name)
            if node is None:
                raise FormatError(f"{self.where}: node '{name}' is not in the graph")
            seen.add(name)
            stack.extend(_name(t) for t in node["inputs"])
            stack.extend(node["control_inputs"])
        return [n["name"] for n in self.nodes if n["name"] in seen]

    def innermost(self):
        """Whether no other frame is inside this one (those are rebuilt first)."""
        return not any(self.by_name[n]["op"] in _LOOP_OPS
                       for n in self.cond_nodes + self.body_nodes)

    # ---------------------------------------------------------- rebuilding
    def rebuilt(self, functions):
        """The node dicts with this frame one While (its bodies added to `functions`)."""
        names = {n["name"] for n in self.nodes}
        loop = unique_name(self.frame.replace("_context", "") or "while", names)
        entering = [v[0] for v in self.variables] + self.constants
        types = [e["attrs"]["T"] for e in entering]
        cond = self._function(f"{loop}_cond", self.cond_nodes, types,
                              {v[1]["name"] + ":0": k for k, v in enumerate(self.variables)},
                              [self.loop_cond["inputs"][0]])
        n = len(self.variables)
        body = self._function(
            f"{loop}_body", self.body_nodes, types,
            {v[2]["name"] + ":1": k for k, v in enumerate(self.variables)},
            [v[3]["inputs"][0] for v in self.variables], pass_through=range(n, len(types)))
        functions.extend([cond, body])
        inputs = [e["inputs"][0] for e in entering]
        attrs, inputs = _functional("While", {"T": types, "cond": cond["name"],
                                              "body": body["name"]}, inputs,
                                    f"node '{loop}' (op: 'While')")
        gone = {n for v in self.variables for n in (v[0]["name"], v[1]["name"], v[2]["name"],
                                                     v[3]["name"])}
        gone |= {e["name"] for e in self.constants} | {self.loop_cond["name"]}
        gone |= set(self.cond_nodes) | set(self.body_nodes)
        exits = {v[4]["name"]: k for k, v in enumerate(self.variables) if v[4] is not None}
        gone |= self._dead_ends(gone, exits)
        out = []
        for node in self.nodes:
            if node["name"] in exits:
                out.append(dict(node, op="Identity", attrs={}, control_inputs=[],
                                inputs=[f"{loop}:{exits[node['name']]}"]))
            elif node["name"] not in gone:
                out.append(node)
            if node is entering[0]:
                out.append({"name": loop, "op": "While", "inputs": inputs,
                            "control_inputs": sorted({c for e in entering
                                                      for c in e["control_inputs"]}),
                            "attrs": attrs, "device": "", "output_shapes": None,
                            "location": None, "gradient_of": None})
        return out

    def _dead_ends(self, frame, exits):
        """The nodes inside the frame that neither its cond nor its body needs (a nested
        loop's unused Exit): nodes reading the frame other than through its Exits, which
        nothing outside may read (TF does not run a frame's node from outside)."""
        dead, grown = set(), True
        while grown:
            grown = False
            for node in self.nodes:
                name = node["name"]
                if name in frame or name in exits or name in dead:
                    continue
                if any(_name(t) in frame or _name(t) in dead for t in node["inputs"]) or \
                        any(c in frame or c in dead for c in node["control_inputs"]):
                    dead.add(name)
                    grown = True
        return dead

    def _function(self, name, members, types, from_variables, results, pass_through=()):
        """A function dict of the frame's nodes `members`: its arguments stand for the
        loop variables (`from_variables` {tensor: variable index}) and the constants."""
        taken = set(members)
        args = [unique_name(f"{name}/arg", taken) for _ in types]
        renamed = {t: args[k] + ":0" for t, k in from_variables.items()}
        renamed.update({e["name"] + ":0": args[len(self.variables) + j]
                        + ":0" for j, e in enumerate(self.constants)})
        nodes = [{"name": a, "op": "Placeholder", "inputs": [], "control_inputs": [],
                  "attrs": {"dtype": t, "shape": _unknown()}, "device": "",
                  "output_shapes": None, "location": None, "gradient_of": None}
                 for a, t in zip(args, types)]
        for member in members:
            node = self.by_name[member]
            nodes.append(dict(node, inputs=[renamed.get(t, t) for t in node["inputs"]],
                              control_inputs=[c for c in node["control_inputs"]
                                              if c in taken]))
        outputs = [renamed.get(t, t) for t in results] + [args[k] + ":0" for k in pass_through]
        return {"name": name, "nodes": nodes, "inputs": [a + ":0" for a in args],
                "outputs": outputs, "ref_captures": []}


def _unknown():
    from graphc.framework.tensor_shape import TensorShape
    return TensorShape(None)
