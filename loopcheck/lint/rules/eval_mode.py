"""Train/eval mode rules (LC301-LC304): evaluation loops in training mode or with autograd
recording, eval mode that leaks into the next training iteration, backward with recording off.

The checks read the model's flat event trace (helpers and local modules inlined) as a cycle over
the enclosing loop: what runs at the end of iteration i precedes what runs at the start of
iteration i + 1. A name's mode is only trusted when the script sets it with a constant
(`model.train()`, `model.eval()`, `model.train(False)`); `model.train(flag)` ends every check.
"""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from loopcheck.findings import Finding, Severity
from loopcheck.lint.loopmodel import CallSite, Event, EventKind, Loop, LoopKind, ModuleModel, Role
from loopcheck.lint.positions import node_code
from loopcheck.lint.rules._shared import Trace, exclusive, guard_key, inside, item_names, outermost
from loopcheck.lint.rules._display import at as cited, shown
from loopcheck.lint.rules.base import FileContext, Rule, module_nodes
from loopcheck.lint.syntax import walk

K = EventKind
_MODES = (K.TRAIN_MODE, K.EVAL_MODE)
# attributes that are the whole model, not a submodule: DDP / DataParallel and torch.compile wrappers
_WHOLE = (".module", "._orig_mod")
# an evaluation loop iterates data: a loader, a split, a dataset
_DATA_ITER = re.compile(r"loader|\bdl\b|_dl\b|val|test|eval|dataset|batches|data\b", re.I)
# loops that need the graph: input gradients, saliency maps, adversarial examples
_NEEDS_GRAPH = re.compile(r"autograd\.grad|requires_grad|\.backward\(|torch\.func\.|vjp\(|jacobian\(")


def _same_model(a: str | None, b: str | None) -> bool:
    """`model`, `model.module` and `model._orig_mod` are one network; `model.backbone` is a part."""
    if not a or not b:
        return False
    if a == b:
        return True
    for suffix in _WHOLE:
        if a + suffix == b or b + suffix == a:
            return True
    return False


def _mode_of(event: Event) -> str | None:
    """'train' / 'eval' for a mode switch with a constant argument, None when the mode is unknown."""
    if event.kind is K.EVAL_MODE:
        return "eval"
    if event.kind is not K.TRAIN_MODE:
        return None
    node = event.node
    if isinstance(node, cst.Expr):
        node = node.value
    if isinstance(node, cst.Call) and node.args:
        value = node.args[0].value
        if not (isinstance(value, cst.Name) and value.value == "True"):
            return None  # `model.train(flag)`: depends on the flag
    return "train"


def _trained(model: ModuleModel, events: list[Event] | None = None) -> set[str]:
    """Names of the networks being trained: what an optimizer updates, and what runs forward with
    autograd recording in a batch loop (only among `events`, when given)."""
    if events is not None:
        return {e.target for e in events if _trains(e)}
    names = {e.target for e in model.events if _trains(e)}
    for binding in model.bindings.values():
        if binding.role is Role.OPTIMIZER:
            names.update(n for n in binding.detail.get("params_of") or () if isinstance(n, str))
    return names


def _trains(e: Event) -> bool:
    """A forward pass with autograd recording, in a batch loop."""
    in_batch = e.loop is not None and e.loop.kind is LoopKind.BATCH
    return bool(e.kind is K.FORWARD and e.target and not e.no_grad and in_batch and not e.detail.get("generate"))


def _is_trained(name: str | None, trained: set[str]) -> bool:
    return any(_same_model(name, t) for t in trained)


def _index(events: list[Event], event: Event) -> int:
    for i, e in enumerate(events):
        if e is event:
            return i
    return -1


def _is_model_forward(model: ModuleModel, event: Event) -> bool:
    return event.kind is K.FORWARD and bool(event.target) and model.role(event.target) in (Role.MODEL, None)


def _evaluation_loops(model: ModuleModel, averaged: bool = False) -> Iterator[tuple[Loop, list[Event]]]:
    """Evaluation loops over data, each with the first forward pass of every network it runs
    (`encoder(x)` then `decoder(h)`: two networks, each with a mode of its own); with `averaged`,
    also the passes of an averaged copy (EMA / SWA weights: no mode question, but a graph all the same)."""
    for loop in model.walk_loops():
        if loop.kind is not LoopKind.EVAL or not isinstance(loop.node, cst.For):
            continue
        iterates_data = (loop.loader is not None and not _part_of_network(model, loop.loader)
                         or bool(_DATA_ITER.search(loop.iter_text)))
        by_index = bool(_COUNTED.match(loop.iter_text)) and loop.loader is None  # not `next(it)` per index
        if not iterates_data and not by_index and not loop.generates:
            continue
        forwards = [e for e in model.events if inside(e, loop) and (
            _is_model_forward(model, e) or averaged and e.kind is K.FORWARD and model.role(e.target) is Role.EMA)]
        if not forwards or _network_of_the_loop(model, loop, forwards[0]):
            continue
        if by_index and not loop.generates and not _HELD_OUT.search(_arguments_text(forwards[0])) and (
                forwards[0].target not in model.generating):
            continue  # `for i in range(n)`: only a loop slicing held-out data (`X_val[i:i + bs]`) evaluates,
            # or one that runs a network generating step by step (`images = sampler(noise)` per batch)
        firsts: dict[str, Event] = {}
        for event in forwards:
            if event.target not in firsts and (
                event is forwards[0] or _known_network(model, event.target) and not _network_of_the_loop(model, loop, event)
            ):
                firsts[event.target or ""] = event
        yield loop, list(firsts.values())


def _part_of_network(model: ModuleModel, name: str) -> bool:
    """`embedder.mesh_names`, `model.blocks`: something a network holds (its layers, the names of
    its heads or meshes), not data, when a name before the last part is a network."""
    parts = name.split(".")
    return any(model.role(".".join(parts[:k])) in (Role.MODEL, Role.EMA) for k in range(1, len(parts)))


def _in_loop_body(forward: Event, loop: Loop) -> Event | CallSite:
    """Where a forward shows in the evaluation loop's own code: the call of the helper that runs
    it (`loss = calc_loss_batch(x, y, model)`, a helper training shares), or the forward itself."""
    return _shown_in(forward, loop.via)


def _in_file(place: Event | CallSite, forward: Event, path: str) -> Event | CallSite:
    """`place`, or when it is in another module (`from test import validation`), the last call on
    the way to the forward that is written in the linted file: the evaluation that file runs."""
    if place.path == path:
        return place
    return next((site for site in reversed(forward.via) if site.path == path), place)


def _shown_in(forward: Event, via: tuple[CallSite, ...]) -> Event | CallSite:
    """The forward, or the call that leads to it from the code reached through `via`."""
    depth = len(via)
    if len(forward.via) > depth and forward.via[:depth] == via:
        return forward.via[depth]
    return forward


# a counted loop: `range(n)`, tqdm's `trange(n)`, `tqdm(range(n))`
_COUNTED = re.compile(r"\s*(?:t?range\(|tqdm\(\s*range\()")
# held-out data named in a forward's arguments: `model(X_val)`, `net(x_test[i:j])`
_HELD_OUT = re.compile(r"(?<![A-Za-z])(val|valid|validation|test|dev|holdout|eval)(?![a-z])", re.I)


def _arguments_text(event: Event) -> str:
    node = event.node
    if not isinstance(node, cst.Call):
        return ""
    try:
        return " ".join(node_code(a.value) for a in node.args)
    except Exception:  # a node libcst cannot print alone
        return ""


def _full_batch_evaluations(model: ModuleModel, trained: set[str], recording: bool = False) -> Iterator[tuple[Loop, Event]]:
    """A trained network run once on held-out data in the epoch loop, or every N steps in the step
    loop (`val_loss = criterion(model(X_val), y_val)`, `model(next(val_iter))`): an evaluation
    without a loop of its own. Under no_grad (the evaluation sign LC301 reads), or, with
    `recording`, without it and with nothing backpropagated after it in that loop (then samples
    of a generator from its fixed input, `netG(fixed_noise)`, count as well)."""
    for event in model.events:
        loop = event.loop
        if loop is None or event.no_grad is recording or event.detail.get("unseen"):
            continue  # (a helper past the inlining depth may switch modes and recording itself)
        periodic = loop.kind is LoopKind.BATCH and any("%" in g.text and not g.negated for g in event.guards)
        if loop.kind is not LoopKind.EPOCH and not periodic:
            continue
        if not _is_model_forward(model, event) or not _is_trained(event.target, trained):
            continue
        arguments = _arguments_text(event)
        if not _HELD_OUT.search(arguments) and not (recording and _FIXED_INPUT.search(arguments)):
            continue
        if recording and (event.grad_conditional or _backward_after(model, event)):
            continue
        yield loop, event


_COMPREHENSIONS = (cst.GeneratorExp, cst.ListComp, cst.SetComp, cst.DictComp)


def _comprehension_over_data(event: Event) -> str | None:
    """The iterable of the comprehension the forward is written in, when it iterates data
    (`sum(... for x, y in test_loader)`); None otherwise."""
    if event.module is None:
        return None
    parents = module_nodes(event.module)[1]
    node = parents.get(id(event.node))
    while node is not None and not isinstance(node, (cst.BaseStatement, cst.BaseSmallStatement, cst.Lambda)):
        if isinstance(node, _COMPREHENSIONS):
            try:
                text = node_code(node.for_in.iter, event.module)
            except Exception:  # a node libcst cannot print alone
                return None
            return text if _DATA_ITER.search(text) else None
        node = parents.get(id(node))
    return None


def _comprehension_evaluations(model: ModuleModel, trained: set[str], recording: bool = False) -> Iterator[tuple[Loop | None, Event, str]]:
    """A trained network run over data in a comprehension outside the batch loop (after training, or
    once per epoch): `hits = sum((model(x).argmax(1) == y).sum().item() for x, y in test_loader)`.
    Under no_grad (the evaluation sign LC301 reads), or, with `recording`, without it and with
    nothing backpropagated after it."""
    for event in model.events:
        if event.no_grad is recording or event.grad_conditional:
            continue
        if event.loop is not None and event.loop.kind is not LoopKind.EPOCH:
            continue
        if not _is_model_forward(model, event) or not _is_trained(event.target, trained):
            continue
        source = _comprehension_over_data(event)
        if source is None or (recording and _backward_after(model, event)):
            continue
        yield event.loop, event, source


# the fixed input a generative model is sampled from every epoch to watch its progress
_FIXED_INPUT = re.compile(r"(?<![A-Za-z])fixed(?![a-z])", re.I)


def _backward_after(model: ModuleModel, event: Event) -> bool:
    """A backward written in the same loop body after `event` (its output may feed it)."""
    at = _index(model.events, event)
    return any(e.kind is K.BACKWARD and e.loop is event.loop and e.via == event.via for e in model.events[at + 1 :])


# a function called from the training loop to evaluate: `test()`, `evaluate(model)`, `validate_epoch`
_EVALUATION_FUNCTION = re.compile(r"^_?(test|eval|evaluate|evaluation|valid|validate|validation|val)(_|$)", re.I)


def _evaluation_calls(model: ModuleModel, trained: set[str]) -> Iterator[tuple[Loop, Event, CallSite]]:
    """A trained network run by an evaluation function that the training loop calls and that
    trains nothing (`train(); acc = test()` in the epoch loop of a full-graph GNN), with no loop
    over data of its own: each first forward per network and call, with the call."""
    seen: set[tuple[int, str]] = set()
    for event in model.events:
        loop = event.loop
        if loop is None or loop.kind not in (LoopKind.BATCH, LoopKind.EPOCH) or event.kind is not K.FORWARD:
            continue
        if event.detail.get("unseen"):
            continue  # the evaluation runs in a helper past the inlining depth: its modes are not seen
        depth = len(loop.via)
        if len(event.via) <= depth or event.via[:depth] != loop.via:
            continue
        site = event.via[depth]
        if not _EVALUATION_FUNCTION.search(site.callee.rsplit(".", 1)[-1]):
            continue
        if not _known_network(model, event.target) or not _is_trained(event.target, trained):
            continue  # a known network: `config.model_dump()` in `evaluate()` is no forward pass
        key = (id(site), event.target or "")
        if key in seen:
            continue
        seen.add(key)
        called = event.via[: depth + 1]
        if any(e.kind in (K.BACKWARD, K.STEP) and e.via[: depth + 1] == called for e in model.events):
            continue  # a shared step that also trains
        if any(
            e.kind is K.BACKWARD and e.loop is loop and e.via == loop.via and e.path == site.path and e.line > site.line
            for e in model.events
        ):
            continue  # `loss = val_loss(model, x, y); loss.backward()`: a loss helper of the step, by its name
        yield loop, event, site


_LOSS_LIKE = re.compile(r"loss|criterion", re.I)


def _known_network(model: ModuleModel, name: str | None) -> bool:
    """A network by more than its name: built by a constructor, used as one, or what an optimizer updates."""
    binding = model.bindings.get(name or "")
    if binding is None or binding.role is not Role.MODEL:
        return False
    if _LOSS_LIKE.search(f"{binding.cls or ''} {name}"):
        return False  # a loss module of the project (`CrossEntropyLoss2d`): no mode of interest
    if binding.evidence != "name":
        return True
    return any(
        name in (b.detail.get("params_of") or ()) for b in model.bindings.values() if b.role is Role.OPTIMIZER
    )


def _helpers_on_the_way(forward: Event, loop: Loop) -> Iterator[str]:
    """The sources of the helpers the loop calls on its way to `forward` (`_forward_and_gradient`
    that takes `torch.autograd.grad` of what its own helper `_forward` computed)."""
    if len(forward.via) <= len(loop.via):
        return
    for site in forward.via[len(loop.via) + 1:]:
        yield _function_source(site)
    yield _function_source(forward)


def _function_source(event: Event | CallSite) -> str:
    """The source of the function the event (or call) is written in ("" when unknown)."""
    if event.module is None:
        return ""
    parents = module_nodes(event.module)[1]
    node = parents.get(id(event.node))
    while node is not None and not isinstance(node, cst.FunctionDef):
        node = parents.get(id(node))
    if node is None:
        return ""
    try:
        return node_code(node, event.module)
    except Exception:  # a node libcst cannot print alone
        return ""


def _network_of_the_loop(model: ModuleModel, loop: Loop, forward: Event) -> bool:
    """The network run is what the loop iterates (`for block in self.blocks: x = block(x)`) or is
    built in its body (one model per config in a smoke test): not evaluation over data."""
    if forward.target in item_names(loop):
        return True
    binding = model.bindings.get(forward.target or "")
    if binding is None or binding.line is None or binding.path != loop.path:
        return False
    return loop.line <= binding.line <= loop.end_line


# ---------------------------------------------------------------------------------------------
# LC301
# ---------------------------------------------------------------------------------------------


def _handles(model: ModuleModel, target: str | None, others: frozenset[str] = frozenset()) -> set[str]:
    """`target` and the other names of its network: a wrapper of it or the network it wraps, a
    name bound to the same constructor call (`self.net = MLP()`; `self.model = DDP(self.net)` or
    `self.model = self.net`), minus the networks known to be distinct (`others`)."""
    found = {target} if target else set()
    binding = model.bindings.get(target or "")
    if binding is None:
        return found
    for name, other in model.bindings.items():
        if name in others or other.role is not Role.MODEL:
            continue
        if other.detail.get("wraps") == target or binding.detail.get("wraps") == name:
            found.add(name)
        elif binding.call is not None and other.call is binding.call:
            found.add(name)
    return found


def _last_mode(events: list[Event], target: str, others: frozenset[str] = frozenset(),
               handles: set[str] | None = None) -> Event | None:
    """The last mode switch in `events` that decides `target`'s mode: a switch of the network
    itself, of a network it is part of (`model.train()` decides `model.encoder`) or of one of its
    parts (the part that trains when the rest is frozen), or a switch of
    another network to eval mode (the names may be two handles of one model) unless that network
    is one of `others`, distinct networks run beside it. An explicit `eval()` of the network
    itself counts even when its parameters are frozen: it is the switch asked for."""
    for event in reversed(events):
        if event.kind in _MODES and any(_same_model(event.target, t) or _part_of(t, event.target) for t in handles or {target}):
            return event
        if event.kind in _MODES and any(_part_of(event.target, t) for t in handles or {target}):
            return event  # `model.saes.eval()`: the part that trains is switched, the rest is frozen
        if (
            event.kind is K.EVAL_MODE
            and not event.detail.get("frozen")
            and ("." not in (event.target or ".") or event.detail.get("container"))  # a registry may hold it
            and event.target not in others
        ):
            return event
    return None


def _part_of(name: str | None, whole: str | None) -> bool:
    """`model.encoder` is part of `model` (and of `model.module`'s network)."""
    if not name or not whole:
        return False
    return any(name.startswith(w + ".") for w in (whole, *(whole + s for s in _WHOLE)))


def _roots(names: set[str]) -> frozenset[str]:
    """The names and the networks they are parts of: `model.encoder` -> also `model`."""
    found = set(names)
    for name in names:
        parts = name.split(".")
        found.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return frozenset(found)


class EvalWithoutEvalMode(Rule):
    code = "LC301"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        model = ctx.model
        # the trace runs the entry points (functions of this file, the module body) one after the
        # other: what one of them does says nothing about the mode at the start of another
        trace = Trace.of(ctx)
        # a generation loop of the project (`for _ in range(n)` in `generate`) only counts when the
        # code that calls it switches the network back to train() after it: many generative networks
        # have no dropout or BatchNorm, and sampling in train mode is then harmless
        passes = [(loop, forward, {f.target or "" for f in forwards},
                   f"the evaluation loop over `{loop.iter_text}` ({cited(loop)})", _in_loop_body(forward, loop), "the loop")
                  for loop, forwards in _evaluation_loops(model) for forward in forwards
                  if not loop.generates or _train_after(model, loop, forward)]
        passes += [(loop, forward, set(), f"the evaluation pass on held-out data ({cited(forward)})", forward, "it")
                   for loop, forward in _full_batch_evaluations(model, _trained(model))]
        passes += [(loop, forward, set(), f"the evaluation over `{source}` ({cited(forward)})", forward, "it")
                   for loop, forward, source in _comprehension_evaluations(model, _trained(model))]
        passes += [(loop, forward, set(), f"the `{phase}` phase of the loop over `{loop.iter_text}` ({cited(loop)})", forward, "that phase")
                   for loop, forward, phase in _phase_evaluations(model)]
        passes += [(loop, forward, set(), f"the evaluation in `{site.callee}()` (called on {cited(site)})",
                    _shown_in(forward, loop.via + (site,)), "it")
                   for loop, forward, site in _evaluation_calls(model, _trained(model))]
        reported: set[tuple[str, int, int]] = set()
        for loop, forward, networks, what, place, where in passes:
            target = forward.target
            others = _roots(networks - {target or ""}) - _roots({target or ""})
            entry = trace.entry(forward)
            events = [e for e in model.events if trace.entry(e) == entry]
            at = _index(events, forward)
            if at < 0:
                continue
            if loop is None:  # an evaluation after training, outside any loop: what ran before it decides
                outer, first, last = None, at, at
            else:
                outer = outermost(loop)
                first = next((i for i, e in enumerate(events) if inside(e, outer)), at)
                last = max((i for i, e in enumerate(events) if inside(e, outer)), default=at)
            prefix, tail, before = events[first:at], events[at + 1 : last + 1], events[:first]
            backward_in_outer = any(e.kind is K.BACKWARD for e in events[first : last + 1])

            handles = _handles(model, target, others)
            switch = _last_mode(prefix, target, others, handles)
            if switch is not None:
                states = [(switch, events[_index(events, switch) : at])]
            else:
                states = []
                tail_switch = _last_mode(tail, target, others, handles)
                if tail_switch is not None:
                    states.append((tail_switch, events[_index(events, tail_switch) : last + 1] + prefix))
                pre = _last_mode(before, target, others, handles)
                states.append((pre, events[_index(events, pre) if pre else 0 : at]))

            for state, between in states:
                if state is None:
                    # never switched: a network built in train mode, trained here (or restored from
                    # saved weights by a script that trains nothing), evaluated as is
                    if not any(_is_trained(t, _trained(model, events)) for t in handles) and not _restored_for_inference(model, target):
                        continue
                    if _pretrained(model, target):
                        continue  # `from_pretrained(...)` hands it back in eval mode
                elif _mode_of(state) != "train":
                    continue
                elif not (any(e.kind is K.BACKWARD for e in between) or backward_in_outer and loop is not outer):
                    continue  # train() right before a forward-only pass: on purpose (BN recalibration)
                # never switched: the mode at entry is only known when the network is built here
                built_here = state is not None or _built_here(model, target)
                # the file whose code trains the network or sets the mode it is evaluated in (its
                # last `train()`, or its constructor) holds the defect: an evaluation reached from
                # here whose network is built, trained and switched in another module, by code this
                # file only calls, is that module's (reported there, once)
                evidence = {state.path if state is not None else _bound_in(model, target)}
                evidence |= {e.path for e in events if e.kind is K.BACKWARD}
                place = _in_file(place, forward, ctx.path if evidence & {None, ctx.path} else place.path)
                key = (place.path, place.line, place.column)
                if key not in reported:
                    reported.add(key)
                    free = target in model.mode_free
                    yield self.finding(
                        ctx,
                        place,
                        what
                        + f" runs `{target}` in training mode (no `{target}.eval()` since "
                        + (f"`{state.target}.train()` on {cited(state)}" if state else "it was built")
                        + "): " + (_NO_EFFECT_YET if free else "dropout stays on and BatchNorm uses and updates batch statistics; ")
                        + f"call `{target}.eval()` before {where}",
                        severity=None if built_here and not free else Severity.WARNING,
                    )
                break


def _phase_evaluations(model: ModuleModel) -> Iterator[tuple[Loop, Event, str]]:
    """`for phase in ["train", "val"]:` with backward only in some phases (`if phase == "train":`):
    each first forward per network that runs in every phase, with the held-out phase's name."""
    for loop in model.walk_loops():
        node = loop.node
        if not isinstance(node, cst.For) or not isinstance(node.target, cst.Name):
            continue
        if not isinstance(node.iter, (cst.List, cst.Tuple)):
            continue
        phases = [el.value.evaluated_value for el in node.iter.elements if isinstance(el.value, cst.SimpleString)]
        held_out = [p for p in phases if isinstance(p, str) and _HELD_OUT.fullmatch(p)]
        if len(phases) != len(node.iter.elements) or not held_out:
            continue
        on_phase = re.compile(rf"\b{re.escape(node.target.value)}\b")
        inside_events = [e for e in model.events if inside(e, loop)]
        backwards = [e for e in inside_events if e.kind is K.BACKWARD]
        if not backwards or not all(any(on_phase.search(g.text) for g in e.guards) for e in backwards):
            continue
        seen: set[str] = set()
        trained = _trained(model)
        for e in inside_events:
            if (_is_model_forward(model, e) and e.target not in seen
                    and (_known_network(model, e.target) or _is_trained(e.target, trained))
                    and not any(on_phase.search(g.text) for g in e.guards)):
                seen.add(e.target or "")
                yield loop, e, held_out[0]


def _restored_for_inference(model: ModuleModel, target: str | None) -> bool:
    """An inference script: the network is built by a constructor the model read (so it starts in
    train mode), its weights are loaded with `load_state_dict`, and nothing in the file trains."""
    if not _built_here(model, target) or any(e.kind in (K.BACKWARD, K.STEP) for e in model.events):
        return False
    return any(e.kind is K.LOAD and e.target == target for e in model.events)


def _train_after(model: ModuleModel, loop: Loop, forward: Event) -> bool:
    """A function on the way to the loop switches the network to train() after it, before any
    backward: the code expects to have left train mode for the loop."""
    handles = _handles(model, forward.target)
    for event in model.events[_index(model.events, forward) + 1 :]:
        if event.kind is K.BACKWARD:
            return False
        if (
            event.kind is K.TRAIN_MODE
            and any(_same_model(event.target, t) for t in handles)
            and loop.via[: len(event.via)] == event.via
        ):
            return True
    return False


def _bound_in(model: ModuleModel, target: str | None) -> str | None:
    """The file of the statement that bound the network (None: not bound in the code read)."""
    binding = model.bindings.get(target or "")
    return binding.path if binding is not None and binding.node is not None else None


def _built_here(model: ModuleModel, target: str | None) -> bool:
    """The network's constructor is in the code the model read, so it starts in train mode."""
    binding = model.bindings.get(target or "")
    return binding is not None and binding.evidence == "constructor" and not _pretrained(model, target)


def _pretrained(model: ModuleModel, target: str | None) -> bool:
    """Built by a checkpoint's `from_pretrained(...)`, which hands the network back in eval mode."""
    binding = model.bindings.get(target or "")
    return binding is not None and binding.cls == "from_pretrained"


# ---------------------------------------------------------------------------------------------
# LC302
# ---------------------------------------------------------------------------------------------


def _loop_source(ctx: FileContext, loop: Loop) -> str:
    try:
        return node_code(loop.node)
    except Exception:  # a node libcst cannot print alone: treat as plain code
        return ""


def _recording_cost(model: ModuleModel, loop: Loop, forward: Event) -> str:
    """What running `forward` with recording on costs in `loop`."""
    if loop.feeds_back:
        return ("each step keeps its activations, and what it produces goes into the next step, so the "
                "graph grows with every step until the loop ends")
    if forward.target in model.generating:
        return "its forward produces its output step by step, and the graph of every step is kept until the output is dropped"
    what = "step" if loop.generates else "batch"
    return f"every {what} keeps its activations for a backward that never comes"


class EvalWithoutNoGrad(Rule):
    code = "LC302"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        stopping = ctx.model.stops_recording  # networks whose forward may turn recording off itself
        for loop, forwards in _evaluation_loops(ctx.model, averaged=True):
            forward = forwards[0]
            if forward.no_grad or forward.grad_conditional or forward.detail.get("generate"):
                continue  # a library's `generate` turns recording off itself
            if forward.target in stopping:
                continue
            if _NEEDS_GRAPH.search(_loop_source(ctx, loop)) or any(
                    _NEEDS_GRAPH.search(source) for source in _helpers_on_the_way(forward, loop)):
                continue
            yield self.finding(
                ctx,
                _in_file(_in_loop_body(forward, loop), forward, ctx.path),
                f"`{forward.target}` runs forward in the {'generation' if loop.generates else 'evaluation'} "
                f"loop over `{loop.iter_text}` with autograd recording: {_recording_cost(ctx.model, loop, forward)}; "
                f"wrap the loop in `torch.no_grad()` or `torch.inference_mode()`",
            )
        model = ctx.model
        # single forwards outside an evaluation loop: (forward, what it runs on, what it costs)
        passes = [(forward, "an evaluation forward (on held-out data or a fixed sampling input)", "nothing backpropagates it")
                  for _, forward in _full_batch_evaluations(model, _trained(model), recording=True)]
        passes += [(forward, f"forward over `{source}`", "nothing backpropagates it")
                   for _, forward, source in _comprehension_evaluations(model, _trained(model), recording=True)]
        passes += [(forward, f"forward on the batch in the training loop ({cited(loop)})",
                    "no optimizer updates it: backward also runs through it and fills gradients nothing uses")
                   for loop, forward in _frozen_forwards(ctx)]
        for forward, what, why in passes:
            if forward.target in stopping:
                continue
            yield self.finding(
                ctx,
                _in_file(forward, forward, ctx.path),
                f"`{forward.target}` runs {what} with autograd recording, and {why}: the activations are "
                f"kept for a backward that brings nothing; wrap it in `torch.no_grad()`",
            )
        for loop, forward, site in _evaluation_calls(model, _trained(model)):
            if forward.no_grad or forward.grad_conditional or forward.detail.get("generate") or forward.target in stopping:
                continue
            if _NEEDS_GRAPH.search(_function_source(forward)):
                continue
            yield self.finding(
                ctx,
                _in_file(_shown_in(forward, loop.via + (site,)), forward, ctx.path),
                f"`{forward.target}` runs forward in `{site.callee}()`, the evaluation called from the "
                f"training loop ({cited(site)}), with autograd recording: the activations are kept for a "
                f"backward that never comes; decorate it with `@torch.no_grad()` or wrap its body in "
                f"`torch.no_grad()`",
            )


def _frozen_forwards(ctx: FileContext) -> Iterator[tuple[Loop, Event]]:
    """A network no optimizer updates (a teacher, a frozen backbone) run with recording on the
    batch of a training loop (`soft = teacher(x)`) beside the network that is updated: its graph
    only serves a backward into weights that never change. Only when every optimizer's parameters
    are known and nothing in the file asks for gradients of frozen weights or inputs (`requires_grad`)."""
    model = ctx.model
    optimizers = [b for b in model.bindings.values() if b.role is Role.OPTIMIZER]
    if not optimizers or any(not b.detail.get("params_of") for b in optimizers) or "requires_grad" in ctx.source:
        return
    updated = {n for b in optimizers for n in b.detail["params_of"] if isinstance(n, str)}
    seen: set[tuple[int, str]] = set()
    for event in model.events:
        loop = event.loop
        if loop is None or loop.kind is not LoopKind.BATCH or not isinstance(loop.node, cst.For):
            continue
        if event.no_grad or event.grad_conditional or event.detail.get("generate") or not _is_model_forward(model, event):
            continue
        target = event.target or ""
        if (id(loop), target) in seen or any(_same_model(target, u) or _part_of(target, u) or _part_of(u, target) for u in updated):
            continue
        if not any(e.kind is K.BACKWARD and inside(e, loop) for e in model.events):
            continue
        if not any(e.kind is K.FORWARD and inside(e, loop) and any(_same_model(e.target, u) for u in updated)
                   for e in model.events):
            continue  # the network the optimizer updates must run here too (`self.model` may be `model`)
        node = event.node
        args = node.args if isinstance(node, cst.Call) else ()
        names = {n for a in args for n in _plain_names(a.value)}
        if not args or not names or not names <= item_names(loop):
            continue  # run on something computed (a generator's output): gradients may need to flow through it
        seen.add((id(loop), target))
        yield loop, event


def _plain_names(expr: cst.CSTNode) -> set[str]:
    """The variable names an expression reads (`x.to(device)` -> x, device; not attribute names)."""
    return {n.value for n, parent in walk(expr)
            if type(n) is cst.Name and not (type(parent) is cst.Attribute and parent.attr is n)}


# ---------------------------------------------------------------------------------------------
# LC303
# ---------------------------------------------------------------------------------------------


def _innermost_training_loop(model: ModuleModel, event: Event) -> Loop | None:
    loop = event.loop
    while loop is not None:
        if any(e.kind is K.BACKWARD and inside(e, loop) for e in model.events):
            return loop
        loop = loop.parent
    return None


class TrainModeNotRestored(Rule):
    code = "LC303"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        model = ctx.model
        trained = _trained(model)
        run = _trained(model, model.events)  # networks run forward with recording in a batch loop
        for event in model.events:
            if event.kind is not K.EVAL_MODE or event.detail.get("frozen"):
                continue
            target = event.target
            if not _is_trained(target, trained):
                continue  # a teacher, an EMA copy, a frozen part: kept in eval mode on purpose
            loop = _innermost_training_loop(model, event)
            if loop is None:
                continue
            iteration = [e for e in model.events if inside(e, loop)]
            at = _index(iteration, event)
            if at < 0:
                continue
            if any(e.kind is K.TRAIN_MODE and _same_model(e.target, target) and exclusive(e, event) for e in iteration):
                continue  # `train()` on one branch, `eval()` on the other: the mode is chosen on purpose
            # the rest of this iteration (minus the other side of the eval()'s `if`), then the next
            rest = [e for e in iteration[at + 1 :] if not exclusive(e, event)]
            # the next iteration: up to the eval() again, or down the other branch of its `if`
            # (`for phase in ["train", "val"]:` trains in the phase after the evaluation)
            following = iteration[:at] + [e for e in iteration[at + 1 :] if exclusive(e, event)]
            occasional: list[Event] = []  # train() calls skipped as not run every iteration
            for later in rest + following:
                if later.kind in _MODES and _now_and_then(later, event, loop):
                    if later.kind is K.TRAIN_MODE and _same_model(later.target, target):
                        occasional.append(later)
                    continue  # `if step % eval_every == 0: evaluate()`: not every iteration switches
                if later.kind in _MODES and _same_model(later.target, target):
                    break  # switched again (back to train, or eval again: that one is judged)
                if later.kind is K.TRAIN_MODE and (later.target or "").startswith(f"{target}."):
                    break  # the part that trains is switched back (`model.head.train()`, the rest frozen)
                if later.kind is K.TRAIN_MODE and later.detail.get("container"):
                    break  # `getattr(self, name).train()`, `self.models[k].train()`: it may be this one
                if later.kind is K.TRAIN_MODE and "." not in (later.target or ".") and not (
                    later.target in run and target in run and not _wrapped(model, later.target, target)
                ):
                    break  # another handle of the network is switched back: say nothing
                    # (two networks that both run forward in training, `encoder` and `decoder`,
                    # are not two handles of one)
                if later.kind is K.BACKWARD and not _only_with_graph(later):
                    if any(_runs_whenever(switch, later) for switch in occasional):
                        break  # the condition that runs this backward ran a train() first (a step
                        # called on both sides of an accumulation test, switching back itself)
                    where = "epoch" if loop.kind is not LoopKind.BATCH else "batch"
                    # that training wants train mode shows in a `train()` on the network somewhere,
                    # or in its constructor (a network starts in train mode); a network handed in
                    # and never switched to it may be trained in eval mode on purpose (an RL policy
                    # kept without dropout) or come in eval mode (a pretrained checkpoint)
                    wanted = _built_here(model, target) or any(
                        e.kind is K.TRAIN_MODE and _same_model(e.target, target) for e in model.events)
                    # the training loop's file holds the defect: a loop of another module (reached
                    # through a call of this one) is reported there, once, not at each caller
                    free = target in model.mode_free
                    yield self.finding(
                        ctx,
                        _in_file(event, event, loop.path),
                        _switch_text(event, target, "eval")
                        + (f"({cited(event)}, reached from this call) " if event.path != loop.path else "")
                        + f"in the {where} loop is never undone: the next backward "
                        f"({cited(later)}) trains `{target}` in eval mode"
                        + (": " + _NO_EFFECT_YET if free else ", with dropout off and BatchNorm statistics frozen; ")
                        + f"call `{target}.train()` before training resumes"
                        + ("" if wanted else f" (the code read never puts `{target}` in train mode: if it "
                                             "trains in eval mode on purpose, suppress this)"),
                        severity=None if wanted and not free else Severity.WARNING,
                    )
                    break


def _switch_text(event: Event, target: str, mode: str) -> str:
    """`model.eval()`, or the switch as written when it names the network otherwise (`self.eval()`
    in the network's own method, called on `model`), with the network it switches."""
    written = node_code(event.node, event.module).strip() if event.module is not None else ""
    if not written or written == f"{shown(target)}.{mode}()" or type(event.node) is not cst.Call:
        return f"`{target}.{mode}()` "
    return f"`{written}` (on `{target}`) "


# a network whose class has no layer that depends on the mode (`ModuleModel.mode_free`)
_NO_EFFECT_YET = ("its class has no dropout, no batch norm and nothing that reads `self.training`, so "
                  "nothing changes today, but a layer added later would silently misbehave; ")


def _wrapped(model: ModuleModel, a: str | None, b: str | None) -> bool:
    """One of the two names wraps the other (`engine, ... = deepspeed.initialize(model=net)`,
    `ddp = DistributedDataParallel(net)`): one network."""
    for outer, inner in ((a, b), (b, a)):
        binding = model.bindings.get(outer or "")
        if binding is not None and binding.detail.get("wraps") == inner:
            return True
    return False


def _now_and_then(later: Event, event: Event, within: Loop | None = None) -> bool:
    """`later` sits under an every-N-steps condition (`step % k == 0`) that `event` is not under:
    most iterations do not run it. `within`: the loop whose iterations count (the conditions of
    the loops nested in it, between it and either event, count too)."""
    own = {guard_key(g.text, g.negated) for g in _guards_within(event, within)}
    return any("%" in g.text and not g.negated and guard_key(g.text, g.negated) not in own
               for g in _guards_within(later, within))


def _guards_within(event: Event, outer: Loop | None) -> list:
    """The conditions `event` runs under inside `outer`: its own, then those of each nested loop
    around it up to `outer` (`evaluate()` under `if it % k == 0:`, whose loop switches modes)."""
    guards = list(event.guards)
    loop = event.loop
    while outer is not None and loop is not None and loop is not outer:
        guards.extend(loop.guards)
        loop = loop.parent
    return guards


def _runs_whenever(first: Event, then: Event) -> bool:
    """Every condition `first` runs under also holds for `then`: when `then` runs, so did `first`."""
    return {guard_key(g.text, g.negated) for g in first.guards} <= {guard_key(g.text, g.negated) for g in then.guards}


def _only_with_graph(event: Event) -> bool:
    """A backward under `if loss.requires_grad:` / `if torch.is_grad_enabled():`: a step shared by
    training and evaluation that only trains when the loss carries a graph."""
    return any(not g.negated and ("requires_grad" in g.text or "is_grad_enabled" in g.text) for g in event.guards)


# ---------------------------------------------------------------------------------------------
# LC304
# ---------------------------------------------------------------------------------------------


class BackwardUnderNoGrad(Rule):
    code = "LC304"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        events = ctx.model.events
        trace = Trace.of(ctx)
        for i, event in enumerate(events):
            if event.kind is not K.BACKWARD or not event.no_grad or event.grad_conditional or _only_with_graph(event):
                continue
            # the forward that produced the loss: the nearest one before, back to the previous backward
            forward = None
            entry = trace.entry(event)
            for prev in reversed(events[:i]):
                if prev.kind is K.BACKWARD or trace.entry(prev) != entry:
                    break
                if prev.kind is K.FORWARD:
                    forward = prev
                    break
            if forward is None or not forward.no_grad:
                continue  # a graph recorded outside the block: autograd still computes the gradients
            loss = event.target or "loss"
            yield self.finding(
                ctx,
                event,
                f"`{loss}.backward()` runs under no_grad / inference_mode, and so does the forward "
                f"pass of `{forward.target}` that produced it ({cited(forward)}): no graph is "
                f"recorded and backward raises RuntimeError; move the training step out of the "
                f"no_grad region or wrap it in `torch.enable_grad()`",
            )
