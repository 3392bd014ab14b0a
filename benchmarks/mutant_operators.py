"""The mutation operators of the recall benchmark: each seeds one kind of training-loop bug.

An operator reads a parsed module, finds its sites (the statements or expressions it can break)
and yields one `Mutant` per site: the whole mutated source, the line of the site in the original
file and the rule code a linter should report for it. Sites are found by syntax and by names
alone (`sched` in a receiver is a scheduler, `loss` in a name is a loss): an operator may seed a
change that does no harm in a given script, and those equivalent mutants are listed by hand in
`benchmarks/realworld/equivalent_mutants.tsv`.

Statements are moved and deleted only inside one block; a block left empty gets `pass`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider


@dataclass(frozen=True)
class Mutant:
    operator: str
    code: str  # the rule code a linter should newly report
    line: int  # line of the site in the original source
    source: str  # the whole mutated module
    what: str  # one line: what changed


SCHEDULER = re.compile(r"sched|lr_?sch|warmup", re.I)
ACCUMULATION = re.compile(r"accum|grad_acc|gradient_acc", re.I)
CLIP_CALLS = ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_grads_with_norm_")
NO_GRAD_CALLS = ("no_grad", "inference_mode")


class Site:
    """What one operator run sees: the module, positions, parents and shared name facts."""

    def __init__(self, source: str) -> None:
        self.wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
        self.module = self.wrapper.module
        self.positions = self.wrapper.resolve(PositionProvider)
        self.parents = self.wrapper.resolve(ParentNodeProvider)
        self.functions = {f.name.value: f for f in m.findall(self.module, m.FunctionDef())}
        self.step_funcs = self._functions_with(self.has_optimizer_step)
        self.eval_funcs = self._functions_with(lambda n: self.has_call(n, "eval"))

    # ---- small syntax facts ------------------------------------------------------------

    def line(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def text(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    @staticmethod
    def method_calls(node: cst.CSTNode, name: str) -> list[cst.Call]:
        return [c for c in m.findall(node, m.Call(func=m.Attribute(attr=m.Name(name))))]

    def has_call(self, node: cst.CSTNode, name: str) -> bool:
        return bool(self.method_calls(node, name))

    def is_scheduler_step(self, call: cst.Call) -> bool:
        return (isinstance(call.func, cst.Attribute) and call.func.attr.value == "step"
                and bool(SCHEDULER.search(self.text(call.func.value))))

    def has_optimizer_step(self, node: cst.CSTNode) -> bool:
        return any(not self.is_scheduler_step(c) for c in self.method_calls(node, "step"))

    def calls_local(self, node: cst.CSTNode, names: set[str]) -> bool:
        for call in m.findall(node, m.Call()):
            func = call.func
            name = func.value if isinstance(func, cst.Name) else (
                func.attr.value if isinstance(func, cst.Attribute) else None)
            if name in names:
                return True
        return False

    def steps_optimizer(self, node: cst.CSTNode) -> bool:
        """The statement steps an optimizer itself or through a function defined in the file."""
        return self.has_optimizer_step(node) or self.calls_local(node, self.step_funcs)

    def _functions_with(self, test: Callable[[cst.CSTNode], bool]) -> set[str]:
        return {name for name, f in self.functions.items() if test(f.body)}

    def statement(self, node: cst.CSTNode) -> cst.CSTNode:
        """The statement line that holds `node`."""
        while not isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement, cst.Module)):
            node = self.parents[node]
        return node

    def blocks(self) -> Iterator[cst.CSTNode]:
        yield self.module
        yield from m.findall(self.module, m.IndentedBlock())

    def call_statement(self, stmt: cst.CSTNode, name: str) -> cst.Call | None:
        """`x.name(...)` when `stmt` is exactly that call as a one-statement line."""
        if (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
                and isinstance(stmt.body[0], cst.Expr)
                and m.matches(stmt.body[0].value, m.Call(func=m.Attribute(attr=m.Name(name))))):
            return stmt.body[0].value
        return None

    def call_sites(self, name: str) -> Iterator[tuple[cst.CSTNode, list, int, cst.CSTNode, cst.Call]]:
        """(block, its statements, index, statement, call) of every one-line `x.name(...)`."""
        for block in self.blocks():
            body = list(block.body)
            for i, stmt in enumerate(body):
                call = self.call_statement(stmt, name)
                if call is not None:
                    yield block, body, i, stmt, call

    # ---- edits -------------------------------------------------------------------------

    def with_body(self, block: cst.CSTNode, body: Sequence[cst.CSTNode]) -> str:
        body = list(body) or [cst.SimpleStatementLine([cst.Pass()])]
        new = self.module.deep_replace(block, block.with_changes(body=tuple(body)))
        return new.code

    def replace(self, old: cst.CSTNode, new: cst.CSTNode) -> str:
        return self.module.deep_replace(old, new).code

    def delete(self, block: cst.CSTNode, stmt: cst.CSTNode) -> str:
        return self.with_body(block, [s for s in block.body if s is not stmt])

    def move(self, block: cst.CSTNode, stmt: cst.CSTNode, after: cst.CSTNode | None,
             before: cst.CSTNode | None = None) -> str:
        rest = [s for s in block.body if s is not stmt]
        at = rest.index(after) + 1 if after is not None else rest.index(before)
        return self.with_body(block, rest[:at] + [stmt] + rest[at:])


def _without(items: Sequence, target) -> list:
    """`items` without `target`; the new last item takes the removed one's trailing comma."""
    kept = [i for i in items if i is not target]
    if kept and items and items[-1] is target:
        kept[-1] = kept[-1].with_changes(comma=target.comma)
    return kept


# ---- the operators ---------------------------------------------------------------------


def zero_grad_after_backward(s: Site) -> Iterator[Mutant]:
    """Move a gradient reset between the backward pass and the optimizer step."""
    for block, body, i, stmt, _ in s.call_sites("zero_grad"):
        backward = [j for j, b in enumerate(body) if j != i and s.has_call(b, "backward")]
        steps = [k for k, b in enumerate(body) if k != i and s.steps_optimizer(b)]
        # its own pass: the first backward after it with a step later, or (a reset at the
        # end of the iteration) the last backward before the step that precedes it
        after = [j for j in backward if j > i and any(k > j for k in steps)]
        before = [j for j in backward if j < i and any(j < k < i for k in steps)]
        if not after and not before:
            continue
        j = after[0] if after else before[-1]
        yield Mutant("zero_grad_after_backward", "LC102", s.line(stmt),
                     s.move(block, stmt, after=body[j]),
                     f"zero_grad moved after the backward pass of line {s.line(body[j])}")


def scheduler_before_optimizer(s: Site) -> Iterator[Mutant]:
    """Move a scheduler step above the statement that steps the optimizer."""
    for block, body, i, stmt, call in s.call_sites("step"):
        if not s.is_scheduler_step(call) or call.args:
            continue
        earlier = [j for j in range(i) if s.steps_optimizer(body[j])]
        if earlier:
            target = body[earlier[-1]]
            yield Mutant("scheduler_before_optimizer", "LC201", s.line(stmt),
                         s.move(block, stmt, after=None, before=target),
                         f"scheduler step moved above line {s.line(target)}")


def _delete_calls(s: Site, name: str, operator: str, code: str,
                  keep: Callable[[cst.Call, cst.CSTNode, int], bool] = lambda c, b, i: True
                  ) -> Iterator[Mutant]:
    for block, _, i, stmt, call in s.call_sites(name):
        if keep(call, block, i):
            yield Mutant(operator, code, s.line(stmt), s.delete(block, stmt), f"`{s.text(call)}` deleted")


def delete_eval(s: Site) -> Iterator[Mutant]:
    """Delete a `model.eval()` statement."""
    yield from _delete_calls(s, "eval", "delete_eval", "LC301", lambda c, b, i: not c.args)


def _train_mode_call(s: Site, call: cst.Call) -> bool:
    return not call.args or (len(call.args) == 1 and s.text(call.args[0].value) == "True")


def _after_evaluation(s: Site, block: cst.CSTNode, i: int) -> bool:
    return any(s.has_call(b, "eval") or s.calls_local(b, s.eval_funcs) for b in block.body[:i])


def delete_train(s: Site) -> Iterator[Mutant]:
    """Delete a `model.train()` statement that does not follow an evaluation in its block."""
    yield from _delete_calls(s, "train", "delete_train", "LC303",
                             lambda c, b, i: _train_mode_call(s, c) and not _after_evaluation(s, b, i))


def delete_train_after_eval(s: Site) -> Iterator[Mutant]:
    """Delete the `model.train()` that restores training mode after an evaluation."""
    yield from _delete_calls(s, "train", "delete_train_after_eval", "LC303",
                             lambda c, b, i: _train_mode_call(s, c) and _after_evaluation(s, b, i))


def delete_unscale(s: Site) -> Iterator[Mutant]:
    """Delete `scaler.unscale_(optimizer)`."""
    yield from _delete_calls(s, "unscale_", "delete_unscale", "LC401")


def unscale_after_clip(s: Site) -> Iterator[Mutant]:
    """Move `scaler.unscale_(...)` below the gradient clipping that follows it."""
    for block, body, i, stmt, _ in s.call_sites("unscale_"):
        clips = [b for b in body[i + 1:] if any(
            m.findall(b, m.Call(func=m.Attribute(attr=m.Name(n)) | m.Name(n))) for n in CLIP_CALLS)]
        if clips:
            yield Mutant("unscale_after_clip", "LC401", s.line(stmt),
                         s.move(block, stmt, after=clips[0]),
                         f"unscale_ moved after the clipping of line {s.line(clips[0])}")


def delete_set_epoch(s: Site) -> Iterator[Mutant]:
    """Delete `sampler.set_epoch(epoch)`."""
    yield from _delete_calls(s, "set_epoch", "delete_set_epoch", "LC701")


def _is_no_grad(s: Site, expr: cst.BaseExpression) -> bool:
    target = expr.func if isinstance(expr, cst.Call) else expr
    name = target.attr.value if isinstance(target, cst.Attribute) else (
        target.value if isinstance(target, cst.Name) else None)
    return name in NO_GRAD_CALLS


def remove_no_grad(s: Site) -> Iterator[Mutant]:
    """Drop a `with torch.no_grad():` (its body stays) or a `@torch.no_grad()` decorator."""
    for block in s.blocks():
        body = list(block.body)
        for i, stmt in enumerate(body):
            if not isinstance(stmt, cst.With):
                continue
            grads = [item for item in stmt.items if _is_no_grad(s, item.item)]
            if not grads:
                continue
            if len(stmt.items) == 1:
                source = s.with_body(block, body[:i] + list(stmt.body.body) + body[i + 1:])
            else:
                source = s.replace(stmt, stmt.with_changes(items=_without(stmt.items, grads[0])))
            yield Mutant("remove_no_grad", "LC302", s.line(stmt), source,
                         f"`{s.text(grads[0].item)}` context removed")
    for func in s.functions.values():
        for dec in func.decorators:
            if _is_no_grad(s, dec.decorator):
                new = func.with_changes(decorators=[d for d in func.decorators if d is not dec])
                yield Mutant("remove_no_grad", "LC302", s.line(dec), s.replace(func, new),
                             f"`@{s.text(dec.decorator)}` removed from `{func.name.value}`")


def _optimizer_state(s: Site, node: cst.CSTNode) -> bool:
    return bool(re.search(r"\bopt\w*(\.\w+)*\.state_dict\(\)", s.text(node), re.I))


def drop_optimizer_from_checkpoint(s: Site) -> Iterator[Mutant]:
    """Remove the optimizer state from a saved checkpoint (a dict entry or its own save)."""
    if "save" not in s.module.code:
        return
    for d in m.findall(s.module, m.Dict()):
        for el in d.elements:
            if isinstance(el, cst.DictElement) and (_optimizer_state(s, el.value) or (
                    re.search(r"optim", s.text(el.key), re.I) and re.search(r"opt|state_dict", s.text(el.value), re.I))):
                yield Mutant("drop_optimizer_from_checkpoint", "LC501", s.line(el),
                             s.replace(d, d.with_changes(elements=_without(d.elements, el))),
                             f"checkpoint entry `{s.text(el.key)}` removed")
    for block in s.blocks():
        for stmt in block.body:
            call = s.call_statement(stmt, "save")
            state = call.args[0].value if call is not None and call.args else None
            if m.matches(state, m.Call(func=m.Attribute(attr=m.Name("state_dict")))) and _optimizer_state(s, state):
                yield Mutant("drop_optimizer_from_checkpoint", "LC501", s.line(stmt),
                             s.delete(block, stmt), "separate save of the optimizer state deleted")


def _loss_items(s: Site, node: cst.CSTNode) -> list[cst.Call]:
    return [c for c in s.method_calls(node, "item")
            if not c.args and "loss" in s.text(c.func.value).lower()]


def drop_item(s: Site) -> Iterator[Mutant]:
    """`total += loss.item()` / `losses.append(loss.item())` keep the tensor instead."""
    kept = [aug.value for aug in m.findall(s.module, m.AugAssign(operator=m.AddAssign()))]
    kept += [arg.value for call in s.method_calls(s.module, "append") for arg in call.args]
    for value in kept:
        for call in _loss_items(s, value):
            yield Mutant("drop_item", "LC601", s.line(call), s.replace(call, call.func.value),
                         f"`{s.text(call)}` kept as a tensor")


def _enclosing_loop(s: Site, node: cst.CSTNode) -> cst.CSTNode | None:
    parent = s.parents.get(node)
    while parent is not None and not isinstance(parent, (cst.For, cst.While, cst.FunctionDef)):
        parent = s.parents.get(parent)
    return parent if isinstance(parent, (cst.For, cst.While)) else None


def per_step_scheduler_to_epoch(s: Site) -> Iterator[Mutant]:
    """Move a scheduler step from the batch loop to after it, in the epoch loop."""
    for _, _, _, stmt, call in s.call_sites("step"):
        if not s.is_scheduler_step(call) or call.args:
            continue
        batch_loop = _enclosing_loop(s, stmt)
        if batch_loop is None or not (s.has_call(batch_loop, "backward") or s.steps_optimizer(batch_loop)):
            continue
        epoch_loop = _enclosing_loop(s, batch_loop)
        holder = s.parents.get(batch_loop)
        if epoch_loop is None or holder is not epoch_loop.body:
            continue
        rest = list(holder.body)
        at = rest.index(batch_loop) + 1
        new_holder = holder.with_changes(body=tuple(rest[:at] + [stmt] + rest[at:]))
        # one edit of the epoch loop's block: insert after the batch loop, remove inside it
        inner = s.parents[stmt]
        kept = [x for x in inner.body if x is not stmt] or [cst.SimpleStatementLine([cst.Pass()])]
        new_inner = inner.with_changes(body=tuple(kept))
        new_holder = new_holder.deep_replace(inner, new_inner)
        yield Mutant("per_step_scheduler_to_epoch", "LC202", s.line(stmt),
                     s.replace(holder, new_holder),
                     f"scheduler step moved after the batch loop of line {s.line(batch_loop)}")


def drop_plateau_metric(s: Site) -> Iterator[Mutant]:
    """`plateau.step(val_loss)` becomes `plateau.step()`."""
    names = set()
    for assign in m.findall(s.module, m.Assign(value=m.Call())):
        if s.text(assign.value.func).split(".")[-1] == "ReduceLROnPlateau":
            names.update(s.text(t.target) for t in assign.targets)
    for call in s.method_calls(s.module, "step"):
        if call.args and s.text(call.func.value) in names:
            yield Mutant("drop_plateau_metric", "LC204", s.line(call),
                         s.replace(call, call.with_changes(args=())),
                         f"metric of `{s.text(call)}` dropped")


def drop_accumulation_division(s: Site) -> Iterator[Mutant]:
    """Remove the division of the loss by the number of accumulation steps."""
    for op in m.findall(s.module, m.BinaryOperation(operator=m.Divide())):
        if ACCUMULATION.search(s.text(op.right)) and "loss" in s.text(s.statement(op)).lower():
            yield Mutant("drop_accumulation_division", "LC105", s.line(op),
                         s.replace(op, op.left), f"`{s.text(op)}` no longer divided")
    for block in s.blocks():
        for stmt in block.body:
            if (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
                    and m.matches(stmt.body[0], m.AugAssign(operator=m.DivideAssign()))
                    and ACCUMULATION.search(s.text(stmt.body[0].value))
                    and "loss" in s.text(stmt.body[0].target).lower()):
                yield Mutant("drop_accumulation_division", "LC105", s.line(stmt),
                             s.delete(block, stmt), f"`{s.text(stmt.body[0])}` deleted")


def _drop_keyword(s: Site, operator: str, code: str, func: re.Pattern, keyword: str,
                  keep: Callable[[cst.Arg], bool]) -> Iterator[Mutant]:
    for call in m.findall(s.module, m.Call()):
        if not func.search(s.text(call.func)):
            continue
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == keyword and keep(arg):
                yield Mutant(operator, code, s.line(arg),
                             s.replace(call, call.with_changes(args=_without(call.args, arg))),
                             f"`{s.text(arg).rstrip(', ')}` removed from `{s.text(call.func)}`")


def drop_shuffle(s: Site) -> Iterator[Mutant]:
    """Remove `shuffle=...` (anything but False) from a DataLoader."""
    yield from _drop_keyword(s, "drop_shuffle", "LC702", re.compile(r"DataLoader$"), "shuffle",
                             lambda a: s.text(a.value) != "False")


def drop_weights_only(s: Site) -> Iterator[Mutant]:
    """Remove `weights_only=...` from `torch.load`."""
    yield from _drop_keyword(s, "drop_weights_only", "LC508", re.compile(r"(^|\.)load$"),
                             "weights_only", lambda a: True)


OPERATORS: dict[str, Callable[[Site], Iterator[Mutant]]] = {
    "zero_grad_after_backward": zero_grad_after_backward,
    "scheduler_before_optimizer": scheduler_before_optimizer,
    "delete_eval": delete_eval,
    "delete_train": delete_train,
    "delete_train_after_eval": delete_train_after_eval,
    "delete_unscale": delete_unscale,
    "unscale_after_clip": unscale_after_clip,
    "delete_set_epoch": delete_set_epoch,
    "remove_no_grad": remove_no_grad,
    "drop_optimizer_from_checkpoint": drop_optimizer_from_checkpoint,
    "drop_item": drop_item,
    "per_step_scheduler_to_epoch": per_step_scheduler_to_epoch,
    "drop_plateau_metric": drop_plateau_metric,
    "drop_accumulation_division": drop_accumulation_division,
    "drop_shuffle": drop_shuffle,
    "drop_weights_only": drop_weights_only,
}


def mutants(source: str, operators: Sequence[str] | None = None) -> list[Mutant]:
    """Every mutant of `source` by the named operators (all when None), in operator order."""
    found: list[Mutant] = []
    for name in operators or OPERATORS:
        site = Site(source)  # fresh per operator: deep_replace never touches the shared tree
        found.extend(OPERATORS[name](site))
    return found
