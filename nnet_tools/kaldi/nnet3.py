"""Kaldi nnet3 model files (src/nnet3/nnet-nnet.cc, nnet-descriptor.cc, am-nnet-simple.cc): a raw
``Nnet3`` (``final.raw``) or a ``final.mdl`` (TransitionModel, then AmNnetSimple: the Nnet3,
``<LeftContext> <RightContext> <Priors>``), binary and text.

A ``KaldiNnet`` holds the config lines as nodes (input-nodes, component-nodes, output-nodes) with
their descriptors parsed, and the components (components.py). Descriptors: a node name,
``Offset(d, t)`` and ``Append(d, ...)``, the ones a feed-forward TDNN needs; others (IfDefined,
Sum, Scale, Round, ReplaceIndex, Failover, Switch, Const) and dim-range-nodes are refused in one
line. Descriptors are tuples: ``("node", name)``, ``("offset", d, t)``, ``("append", [d, ...])``.
"""
import re

import numpy as np

from nnet_tools.errors import NnetError
from nnet_tools.kaldi import transition_model as transition
from nnet_tools.kaldi.components import read_component, write_component
from nnet_tools.kaldi.stream import KaldiWriter, read_kaldi_file

_NAME = re.compile(r"[A-Za-z_][-A-Za-z0-9_.]*$")


class KaldiNnet:
    def __init__(self, inputs, nodes, outputs, components, transition_model=None, priors=None,
                 context=None):
        self.inputs = inputs          # {name: dim}
        self.nodes = nodes            # [(name, component name, descriptor)], in file order
        self.outputs = outputs        # {name: (descriptor, objective)}
        self.components = components  # {name: Component}, in file order
        self.transition_model = transition_model  # a final.mdl's, else None (a raw nnet)
        self.priors = priors          # a final.mdl's <Priors> (maybe empty), else None
        self.context = context        # a final.mdl's (<LeftContext>, <RightContext>) as written

    @property
    def is_am(self):
        return self.transition_model is not None

    def node(self, name):
        return next((n for n in self.nodes if n[0] == name), None)

    def dim(self, desc):
        """The dimension a descriptor gives."""
        if desc[0] == "node":
            if desc[1] in self.inputs:
                return self.inputs[desc[1]]
            return self.components[self.node(desc[1])[1]].output_dim
        if desc[0] == "offset":
            return self.dim(desc[1])
        return sum(self.dim(d) for d in desc[1])

    def reach(self, desc):
        """(min, max) time offset of the input an output of ``desc`` at time 0 depends on."""
        if desc[0] == "node":
            node = self.node(desc[1])
            return (0, 0) if node is None else self.reach(node[2])
        if desc[0] == "offset":
            lo, hi = self.reach(desc[1])
            return lo + desc[2], hi + desc[2]
        spans = [self.reach(d) for d in desc[1]]
        return min(s[0] for s in spans), max(s[1] for s in spans)

    def model_context(self):
        """Kaldi's ComputeSimpleNnetContext for output 'output': (left, right), each >= 0."""
        lo, hi = self.reach(self.outputs["output"][0])
        return max(0, -lo), max(0, hi)


# --- descriptors --------------------------------------------------------------------------------

def parse_descriptor(text, where):
    tokens = re.findall(r"[A-Za-z_][-A-Za-z0-9_.]*|-?\d+|[(),]|\S", text)
    pos = 0

    def bad(what):
        return NnetError(f"{where}: descriptor '{text}': {what}")

    def take(expected=None):
        nonlocal pos
        if pos >= len(tokens):
            raise bad("ends too early")
        tok = tokens[pos]
        if expected is not None and tok != expected:
            raise bad(f"expected '{expected}', found '{tok}'")
        pos += 1
        return tok

    def integer():
        tok = take()
        if not re.fullmatch(r"-?\d+", tok):
            raise bad(f"expected an integer, found '{tok}'")
        return int(tok)

    def descriptor():
        name = take()
        if pos < len(tokens) and tokens[pos] == "(":
            take("(")
            if name == "Append":
                parts = [descriptor()]
                while tokens[pos:pos + 1] == [","]:
                    take(",")
                    parts.append(descriptor())
                take(")")
                return ("append", parts)
            if name == "Offset":
                inner = descriptor()
                take(",")
                t = integer()
                if tokens[pos:pos + 1] == [","]:
                    take(",")
                    if integer() != 0:
                        raise bad("Offset with an x offset is not supported")
                take(")")
                return ("offset", inner, t)
            raise bad(f"{name}(...) is not supported (only node names, Offset and Append)")
        if not _NAME.match(name):
            raise bad(f"expected a node name, found '{name}'")
        return ("node", name)

    desc = descriptor()
    if pos != len(tokens):
        raise bad(f"unexpected '{tokens[pos]}' after the descriptor")
    return desc


def descriptor_text(desc):
    """Descriptor::WriteConfig's form: ``Append(Offset(input, -1), input, Offset(input, 1))``."""
    if desc[0] == "node":
        return desc[1]
    if desc[0] == "offset":
        return f"Offset({descriptor_text(desc[1])}, {desc[2]})"
    return "Append(" + ", ".join(descriptor_text(d) for d in desc[1]) + ")" if len(desc[1]) > 1 \
        else descriptor_text(desc[1][0])


def _fields(line, where):
    """A config line's type and its key=value pairs (values may hold spaces inside parentheses)."""
    kind, _, rest = line.strip().partition(" ")
    fields, pos = {}, 0
    while pos < len(rest):
        while pos < len(rest) and rest[pos].isspace():
            pos += 1
        eq = rest.find("=", pos)
        if eq < 0:
            if rest[pos:].strip():
                raise NnetError(f"{where}: config line '{line}': '{rest[pos:].strip()}' is not key=value")
            break
        key, depth, end = rest[pos:eq].strip(), 0, eq + 1
        while end < len(rest) and (depth or not rest[end].isspace()):
            depth += {"(": 1, ")": -1}.get(rest[end], 0)
            end += 1
        fields[key], pos = rest[eq + 1:end], end
    return kind, fields


def _parse_config(lines, components, path):
    inputs, nodes, outputs = {}, [], {}
    for i, line in enumerate(lines):
        where = f"{path}: config line {i + 1}"
        kind, f = _fields(line, where)
        name = f.get("name")
        if not name or not _NAME.match(name):
            raise NnetError(f"{where}: '{line}': no valid name=")
        if kind == "input-node":
            inputs[name] = int(f.get("dim", "0"))
        elif kind == "component-node":
            if f.get("component") not in components:
                raise NnetError(f"{where}: component-node '{name}' names component '{f.get('component')}', "
                                f"which the file does not hold")
            nodes.append((name, f["component"], parse_descriptor(f.get("input", ""), where)))
        elif kind == "output-node":
            outputs[name] = (parse_descriptor(f.get("input", ""), where), f.get("objective", "linear"))
        else:
            raise NnetError(f"{where}: {kind} '{name}' is not supported (only input-, component- and "
                            f"output-nodes: a feed-forward network)")
    return inputs, nodes, outputs


def _check(net, path):
    if list(net.inputs) != ["input"] or list(net.outputs) != ["output"]:
        raise NnetError(f"{path}: need one input-node 'input' and one output-node 'output' (a simple nnet), "
                        f"found inputs {list(net.inputs)} and outputs {list(net.outputs)}")
    known = set(net.inputs)
    order = {name: i for i, (name, _, _) in enumerate(net.nodes)}

    def refs(desc):
        return [desc[1]] if desc[0] == "node" else refs(desc[1]) if desc[0] == "offset" \
            else [n for d in desc[1] for n in refs(d)]

    for i, (name, component, desc) in enumerate(net.nodes + [("output", None, net.outputs["output"][0])]):
        for ref in refs(desc):
            if ref not in known and order.get(ref, len(order) + 1) >= i:
                what = "a node defined after it (a recurrence)" if ref in order else "no node"
                raise NnetError(f"{path}: node '{name}' reads '{ref}', {what}: only feed-forward nets are supported")
        if component is not None:
            c = net.components[component]
            if net.dim(desc) != c.input_dim:
                raise NnetError(f"{path}: component-node '{name}': its input has dim {net.dim(desc)}, "
                                f"component '{component}' ({c.kind}) takes {c.input_dim}")
        known.add(name)


# --- files ------------------------------------------------------------------------------------

def _read_nnet(r):
    r.expect("<Nnet3>")
    if r.line().strip():
        raise r.fail("a newline after <Nnet3>")
    lines = []
    while (line := r.line()).strip():
        lines.append(line)
    r.expect("<NumComponents>")
    count = r.int32()
    if not 0 <= count < 100000:
        raise r.fail("a number of components in [0, 100000)", str(count))
    components = {}
    for _ in range(count):
        r.expect("<ComponentName>")
        name = r.token()
        components[name] = read_component(r, name)
    r.expect("</Nnet3>")
    return _parse_config(lines, components, r.path) + (components,)


def read(path):
    """A final.mdl or raw nnet3 file, binary or text."""
    r = read_kaldi_file(path)
    tm = transition.read(r) if r.peek_token() == "<TransitionModel>" else None
    if tm is None and r.peek_token() != "<Nnet3>":
        raise r.fail("<Nnet3> or <TransitionModel> (a Kaldi nnet3 final.raw or final.mdl)")
    inputs, nodes, outputs, components = _read_nnet(r)
    priors = context = None
    if tm is not None:
        r.expect("<LeftContext>")
        left = r.int32()
        r.expect("<RightContext>")
        context = (left, r.int32())
        r.expect("<Priors>")
        priors = r.vector()
    if not r.at_eof():
        raise r.fail("the end of the file")
    net = KaldiNnet(inputs, nodes, outputs, components, tm, priors, context)
    _check(net, path)
    out_dim = net.dim(net.outputs["output"][0])
    if tm is not None and tm.num_pdfs != out_dim:
        raise NnetError(f"{path}: the transition model has {tm.num_pdfs} pdfs, the nnet's output has dim {out_dim}")
    if priors is not None and len(priors) not in (0, out_dim):
        raise NnetError(f"{path}: <Priors> has {len(priors)} values, the nnet's output has dim {out_dim}")
    return net


def config_lines(net):
    """Nnet::GetConfigLines (without dims), in node order."""
    lines = [f"input-node name={name} dim={dim}" for name, dim in net.inputs.items()]
    lines += [f"component-node name={name} component={component} input={descriptor_text(desc)}"
              for name, component, desc in net.nodes]
    lines += [f"output-node name={name} input={descriptor_text(desc)} objective={objective}"
              for name, (desc, objective) in net.outputs.items()]
    return lines


def write(net, binary):
    """A KaldiWriter holding ``net`` as Kaldi writes it: a final.mdl when it has a transition model."""
    w = KaldiWriter(binary)
    if net.is_am:
        transition.write(w, net.transition_model)
    w.token("<Nnet3>")
    w.raw("\n" + "".join(line + "\n" for line in config_lines(net)) + "\n")
    w.token("<NumComponents>")
    w.int32(len(net.components))
    w.newline()
    for name, component in net.components.items():
        w.token("<ComponentName>")
        w.token(name)
        write_component(w, component)
        w.newline()
    w.token("</Nnet3>")
    if net.is_am:
        left, right = net.model_context()
        w.token("<LeftContext>")
        w.int32(left)
        w.token("<RightContext>")
        w.int32(right)
        w.token("<Priors>")
        w.vector(np.zeros(0, np.float32) if net.priors is None else np.asarray(net.priors, np.float32))
    return w
