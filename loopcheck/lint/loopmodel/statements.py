"""Statements: bodies, branches (folded when the test is constant), loops, with-blocks, assignments."""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator

import libcst as cst

from loopcheck.lint.loopmodel.facts import Binding, EventKind, Guard, Loop, LoopKind, Role
from loopcheck.lint.loopmodel.frames import _Frame, _Value
from loopcheck.lint.loopmodel.nodes import (
    STRING_ARGUMENT,
    _dotted,
    _feeds_back,
    _in_scope,
    _index,
    _is_none,
    _kw,
    _literal_bool,
    _positional,
    _scale_call,
    _string,
    _target_names,
    _unmoved,
    _yielded_param,
)
from loopcheck.lint.loopmodel.torch_api import ACCUMULATION_CONTEXTS, GRAD_CONTEXTS, SCALED_LOSS_CONTEXTS, LOADER_WRAPPERS, LOADER_WRAPPERS_ANY, _ANNOTATION_ROLES, _CONSTANTS, _PARAM_METHODS, is_accumulation_test
from loopcheck.lint.loopmodel.units import _Class, _constant_truth
from loopcheck.lint.loopmodel.traces import _Branch, _Jump, _LoopRef
from loopcheck.lint.positions import node_code
from loopcheck.lint.syntax import walk


class BuilderStatements:
    """The builder's part for statements."""


    def walk_body(self, stmts: list, frame: _Frame) -> None:
        block = self.blocks[-1]  # the same list after each statement (what a statement opens, it closes)
        for stmt in stmts:
            self.walk_stmt(stmt, frame)
            if block and type(block[-1]) is _Jump:
                break

    def walk_suite(self, suite: cst.BaseSuite, frame: _Frame) -> None:
        if type(suite) is cst.SimpleStatementSuite:
            for small in suite.body:
                self.walk_small(small, frame)
        else:
            self.walk_body(list(suite.body), frame)

    def sub_block(self, suite: cst.BaseSuite | None, frame: _Frame, guard: Guard | None = None) -> list:
        self.blocks.append([])
        if guard is not None:
            self.guards.append(guard)
        try:
            if suite is not None:
                self.walk_suite(suite, frame)
        finally:
            if guard is not None:
                self.guards.pop()
            block = self.blocks.pop()
        return block

    def walk_stmt(self, stmt: cst.CSTNode, frame: _Frame) -> None:
        if type(stmt) is cst.SimpleStatementLine:
            for small in stmt.body:
                self.walk_small(small, frame)
        elif type(stmt) is cst.If:
            self.walk_if(stmt, frame)
        elif type(stmt) in (cst.For, cst.While):
            self.walk_loop(stmt, frame)
        elif type(stmt) is cst.With:
            self.walk_with(stmt, frame)
        elif type(stmt) in (cst.Try, cst.TryStar):
            body = self.sub_block(stmt.body, frame)
            if stmt.orelse is not None:
                self.blocks.append(body)
                self.walk_suite(stmt.orelse.body, frame)
                self.blocks.pop()
            alts = [body] + [self.sub_block(h.body, frame) for h in stmt.handlers]
            self.block.append(_Branch(alts))
            if stmt.finalbody is not None:
                self.walk_suite(stmt.finalbody.body, frame)
        elif type(stmt) is cst.FunctionDef:
            frame.local_funcs[stmt.name.value] = stmt
        elif type(stmt) is cst.Match:
            self.walk_expr(stmt.subject, frame)
            self.block.append(_Branch([self.sub_block(case.body, frame) for case in stmt.cases] + [[]]))

    def walk_if(self, stmt: cst.If, frame: _Frame) -> None:
        self.walk_expr(stmt.test, frame)
        known = self._truth(stmt.test, frame)
        orelse = stmt.orelse
        if self.transparent or known is not None:
            if self.transparent and known is None and _selects_parameters(frame.unit.text(stmt.test)):
                self.param_filters += 1  # the rest of this parameter loop acts on a subset
            if known is not False:
                self.walk_suite(stmt.body, frame)
            if known is not True and orelse is not None:
                if type(orelse) is cst.If:
                    self.walk_if(orelse, frame)
                else:
                    self.walk_suite(orelse.body, frame)
            return
        text = frame.unit.text(stmt.test)
        accumulation = is_accumulation_test(text) or self._accumulation_flag(stmt.test, frame)
        frame.branches += 1
        try:
            narrowed = self._narrowed(stmt.test, frame)  # (most tests: None at once, no context entered)
            if narrowed is None:
                body = self.sub_block(stmt.body, frame, Guard(text, accumulation))
            else:
                with self._as_instance(*narrowed):
                    body = self.sub_block(stmt.body, frame, Guard(text, accumulation))
            negated = Guard(text, accumulation, negated=True)
            self.blocks.append([])
            self.guards.append(negated)
            try:
                if type(orelse) is cst.If:
                    self.walk_if(orelse, frame)
                elif orelse is not None:
                    self.walk_suite(orelse.body, frame)
            finally:
                self.guards.pop()
                other = self.blocks.pop()
        finally:
            frame.branches -= 1
        if frame.rebound:
            self._merge_rebound(frame)
        self.block.append(_Branch([body, other], [(frame.name, text, True), (frame.name, text, False)]))

    @contextmanager
    def _as_instance(self, name: str, cls: _Class) -> Iterator[None]:
        """`name` is an instance of `cls` while the block runs (what it was before, after)."""
        held = self.instances.get(name)
        self.instances[name] = cls
        try:
            yield
        finally:
            if self.instances.get(name) is cls:  # (unless the branch bound the name anew)
                if held is None:
                    del self.instances[name]
                else:
                    self.instances[name] = held

    def _narrowed(self, test: cst.BaseExpression, frame: _Frame) -> tuple[str, _Class] | None:
        """`isinstance(scheduler, WarmRestarts)` with a plain class of the project (no optimizer,
        scheduler, model or EMA by its bases): in that branch the name is an instance of it, whose
        methods are followed instead of read as torch's (`scheduler.step()` steps no torch schedule)."""
        if (type(test) is not cst.Call or type(test.func) is not cst.Name or test.func.value != "isinstance"
                or "isinstance" in frame.env or len(test.args) != 2 or any(a.keyword or a.star for a in test.args)):
            return None
        obj, kind = test.args[0].value, test.args[1].value
        if type(obj) not in (cst.Name, cst.Attribute) or type(kind) not in (cst.Name, cst.Attribute):
            return None
        name, cls = self.canon(obj, frame), frame.unit.lookup_class(_dotted(kind) or "")
        if name is None or cls is None or cls.kind() is not None:
            return None
        return name, cls

    def _merge_rebound(self, frame: _Frame) -> None:
        """After an `if` whose branch bound a dict to a name that held something before: either
        may reach the code that follows. `if extra is None: extra = dict()` over an argument
        leaves its keys unknown (the caller's dict may be the one); over a known dict, its keys
        join the branch's."""
        for name, held in frame.rebound:
            current = self.dicts.get(name)
            if current is None or current is held:
                continue
            if held is None:
                current.keys = None
            else:
                current.merge(held)
        if not frame.branches:
            frame.rebound.clear()

    def _accumulation_flag(self, test: cst.BaseExpression, frame: _Frame) -> bool:
        """`if is_update_step:` with `is_update_step = (i + 1) % accum_steps == 0` computed before
        (also `if flag and other:`): the flag holds the accumulation test."""
        if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
            return self._accumulation_flag(test.left, frame) or self._accumulation_flag(test.right, frame)
        if type(test) is not cst.Name:
            return False
        name = self.canon(test, frame)
        found = self.assigned.get(name) if name else None
        return found is not None and type(found[1]) is not cst.Name and is_accumulation_test(found[0].text(found[1]))

    def walk_ifexp(self, node: cst.IfExp, frame: _Frame) -> None:
        """`a() if test else b()`: the two calls are the two branches of an `if`
        (`net.train() if is_train else net.eval()`)."""
        self.walk_expr(node.test, frame)
        known = self._truth(node.test, frame)
        if self.transparent or known is not None:
            if known is not False:
                self.walk_expr(node.body, frame)
            if known is not True:
                self.walk_expr(node.orelse, frame)
            return
        text = frame.unit.text(node.test)
        sides = []
        for side, negated in ((node.body, False), (node.orelse, True)):
            self.blocks.append([])
            self.guards.append(Guard(text, is_accumulation_test(text), negated=negated))
            try:
                self.walk_expr(side, frame)
            finally:
                self.guards.pop()
                sides.append(self.blocks.pop())
        if any(sides):
            self.block.append(_Branch(sides))

    def _truth(self, test: cst.BaseExpression, frame: _Frame) -> bool | None:
        """The value of a test that is constant: a literal (`if 0:`), a module-level flag bound
        once to a constant (`if USE_AMP:`), or a parameter the caller left as None."""
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            inner = self._truth(test.expression, frame)
            return None if inner is None else not inner
        literal = _constant_truth(test)
        if literal is not None:
            return literal
        if type(test) is cst.Name and test.value not in frame.env and test.value in frame.unit.flags:
            return frame.unit.flags[test.value]
        if type(test) in (cst.Name, cst.Attribute):
            return _CONSTANTS.get(self.canon(test, frame) or "")
        if type(test) is cst.Comparison and len(test.comparisons) == 1:
            comp = test.comparisons[0]
            if type(comp.operator) in (cst.Equal, cst.NotEqual):
                # `if mode == "train":` in a helper called with `set_mode("eval")`
                left, right = _string_value(test.left, frame, self), _string_value(comp.comparator, frame, self)
                if left is not None and right is not None:
                    return (left == right) is (type(comp.operator) is cst.Equal)
            if _is_none(comp.comparator) and type(test.left) in (cst.Name, cst.Attribute) and self.canon(test.left, frame) == "None":
                if type(comp.operator) is cst.Is:
                    return True
                if type(comp.operator) is cst.IsNot:
                    return False
        return None

    def _param_loop_owner(self, iter_node: cst.BaseExpression, frame: _Frame, depth: int = 0) -> tuple[bool, str | None]:
        """Is this a loop over parameters (p.grad = None idioms)? And whose parameters?"""
        node = iter_node
        while type(node) is cst.Call and node.args and _dotted(node.func) in _ITER_WRAPPERS:
            node = node.args[-1].value  # (`list()`, with nothing to unwrap, ends it)
        if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in _PARAM_METHODS:
            return True, self.target(node.func.value, frame)
        if type(node) is cst.Attribute and node.attr.value == "param_groups":
            return True, self.target(node.value, frame)
        if type(node) is cst.Subscript and _string(_index(node)) == "params":
            owner = self.canon(node.value, frame)
            return True, self.param_owner.get(owner or "", None)
        if type(node) in (cst.Name, cst.Attribute):
            name = self.canon(node, frame)
            if name is not None and name in self.param_owner:
                return True, self.param_owner[name]
            if name is not None and name in self.assigned and depth < 2:
                # params = list(model.parameters()); for p in params: ...
                return self._param_loop_owner(self.assigned[name][1], frame, depth + 1)
        if type(node) is cst.ListComp:  # [p for p in model.parameters() if p.requires_grad]
            return self._param_loop_owner(node.for_in.iter, frame, depth + 1)
        return False, None

    def walk_loop(self, stmt: cst.For | cst.While, frame: _Frame) -> None:
        if type(stmt) is cst.For:
            self.walk_expr(stmt.iter, frame)
            is_params, owner = self._param_loop_owner(stmt.iter, frame)
            if is_params or self.transparent:
                for name in _target_names(stmt.target):
                    frame.env[name] = name
                    self.param_owner[name] = owner
                filters = self.param_filters
                if _filtered_iteration(stmt.iter, frame.unit.text(stmt.iter)):
                    self.param_filters += 1
                self.transparent += 1
                try:
                    self.walk_suite(stmt.body, frame)
                finally:
                    self.transparent -= 1
                    self.param_filters = filters
                return
            for name in _target_names(stmt.target):
                frame.env[name] = name
                self.param_owner.pop(name, None)
            iter_node = stmt.iter
        else:
            iter_node = stmt.test
        parent = self.loop_stack[-1] if self.loop_stack else None
        loop = Loop(kind=LoopKind.OTHER, node=stmt, path=frame.unit.path, module=frame.unit.module, parent=parent, via=frame.via,
                    iter_text=frame.unit.text(iter_node), guards=tuple(self.guards))
        loop.loader = self._loader_of(iter_node, frame) if type(stmt) is cst.For else None
        if type(stmt) is cst.For:
            loop.generates, loop.feeds_back = _generation_loop(frame, loop.iter_text, stmt)
        if loop.loader:
            self.candidates.setdefault(loop.loader, frame.unit.path)
        (parent.children if parent is not None else self.loops).append(loop)
        self.block.append(_LoopRef(loop))
        saved_guards = self.guards
        self.guards = []
        self.loop_stack.append(loop)
        self.blocks.append([])
        try:
            if type(stmt) is cst.While:
                self.walk_expr(stmt.test, frame)
            self.walk_suite(stmt.body, frame)
        finally:
            self.loop_blocks[id(loop)] = self.blocks.pop()
            self.loop_stack.pop()
            self.guards = saved_guards
        if stmt.orelse is not None:
            self.walk_suite(stmt.orelse.body, frame)

    def _loader_of(self, node: cst.BaseExpression, frame: _Frame, depth: int = 0) -> str | None:
        """The loader a `for` iterates, through the wrappers that hand its batches on: `tqdm`,
        `enumerate`, `zip(range(n), loader)`, `itertools.islice/cycle/chain`, a logger's
        `log_every(loader, ...)`, or a project generator (`def forever(dl): while True: yield from dl`)."""
        if depth > 4:
            return None
        if type(node) is cst.Call:
            name = _dotted(node.func) or ""
            last = name.rsplit(".", 1)[-1]
            args = [a.value for a in node.args if a.keyword is None and not a.star]
            if not args:
                return None
            if last in LOADER_WRAPPERS_ANY:
                return next(filter(None, (self._loader_of(a, frame, depth + 1) for a in args)), None)
            if last in LOADER_WRAPPERS:
                return self._loader_of(args[0], frame, depth + 1)
            generator = frame.unit.lookup_function(name) if name else None
            if generator is not None:
                index = _yielded_param(generator[0])
                if index is not None and index < len(args):
                    return self._loader_of(args[index], frame, depth + 1)
            return None
        name = self.canon(node, frame)
        if name is None:
            return None
        return self.iter_of.get(name, name)

    def walk_with(self, stmt: cst.With, frame: _Frame) -> None:
        saved = (frame.no_grad, frame.autocast, frame.grad_conditional, frame.synced)
        try:
            for item in stmt.items:
                self.walk_expr(item.item, frame)
                self._enter_context(item.item, item.item, frame)
                if item.asname is not None:
                    for name in _target_names(item.asname.name):
                        frame.env[name] = name
                    self._scaled_loss_context(item.item, item.asname.name, frame)
            self.walk_suite(stmt.body, frame)
        finally:
            frame.no_grad, frame.autocast, frame.grad_conditional, frame.synced = saved

    def _scaled_loss_context(self, expr: cst.BaseExpression, target: cst.BaseExpression, frame: _Frame) -> None:
        """`with amp.scale_loss(loss, optimizer) as scaled_loss:` (apex): the scaled loss is the loss
        times the loss scale, divided when the loss was."""
        if type(expr) is not cst.Call or type(target) is not cst.Name:
            return
        if (frame.unit.qualify(expr.func) or "").rsplit(".", 1)[-1] not in SCALED_LOSS_CONTEXTS:
            return
        loss = _positional(expr, 0) or _kw(expr, "loss")
        if loss is not None:
            self.divided[target.value] = self.value_of(loss, frame).divided

    def _enter_context(self, expr: cst.BaseExpression, node: cst.CSTNode, frame: _Frame) -> None:
        if type(expr) is cst.Name:  # `with gradient_context:` bound before
            found = self.assigned.get(self.canon(expr, frame) or "")
            if found is not None and type(found[1]) is cst.IfExp:
                expr = found[1]
        if type(expr) is cst.IfExp:
            # `torch.enable_grad() if fine_tune else torch.no_grad()`: recording depends on the run
            if any(type(e) is cst.Call and (frame.unit.qualify(e.func) or "").rsplit(".", 1)[-1] in GRAD_CONTEXTS
                   for e in (expr.body, expr.orelse)):
                frame.grad_conditional = True
            return
        if type(expr) is not cst.Call:
            return
        qual = frame.unit.qualify(expr.func) or ""
        last = qual.rsplit(".", 1)[-1]
        if last in ("no_grad", "inference_mode"):
            if last == "inference_mode" and _literal_bool(_positional(expr, 0) or _kw(expr, "mode")) is False:
                return
            frame.no_grad = True
            self.event(EventKind.NO_GRAD, None, node, frame, form=last)
        elif last == "set_grad_enabled":
            value = _literal_bool(_positional(expr, 0) or _kw(expr, "mode"))
            if value is False:
                frame.no_grad = True
                self.event(EventKind.NO_GRAD, None, node, frame, form="set_grad_enabled")
            elif value is True:
                frame.no_grad = False
            else:
                frame.grad_conditional = True
        elif last == "enable_grad":
            frame.no_grad = False
        elif last == "autocast":
            enabled = _literal_bool(_kw(expr, "enabled"))
            if enabled is not False:
                frame.autocast = True
        elif last in ACCUMULATION_CONTEXTS and type(expr.func) is cst.Attribute:
            owner = self.canon(expr.func.value, frame) or ""
            if ACCUMULATION_CONTEXTS[last] in owner.rsplit(".", 1)[-1].lower():
                networks = frozenset(filter(None, (self.target(a.value, frame) for a in expr.args)))
                frame.synced = (f"{owner}.sync_gradients", networks)


    def walk_small(self, small: cst.BaseSmallStatement, frame: _Frame) -> None:
        if type(small) is cst.Expr:
            self.walk_expr(small.value, frame)
            if type(small.value) is cst.Call:
                # `torch.set_grad_enabled(False)` as a statement switches grad off for what follows
                qual = frame.unit.qualify(small.value.func) or ""
                if qual.endswith("set_grad_enabled"):
                    self._enter_context(small.value, small, frame)
                entered = _entered_context(small.value)
                if entered is not None:  # `stack.enter_context(torch.no_grad())`: until the stack closes
                    self._enter_context(entered, small, frame)
        elif type(small) is cst.Assign:
            self.walk_expr(small.value, frame)
            for target in small.targets:
                self.assign(target.target, small.value, frame, small)
        elif type(small) is cst.AnnAssign:
            if small.value is not None:
                self.walk_expr(small.value, frame)
                self.assign(small.target, small.value, frame, small)
            self._annotate(small.target, small.annotation.annotation, frame)
        elif type(small) is cst.AugAssign:
            self.walk_expr(small.value, frame)
            name = self.canon(small.target, frame)
            if name is not None and type(small.operator) in (cst.DivideAssign, cst.FloorDivideAssign):
                self.divided[name] = True
        elif type(small) is cst.Return:
            if small.value is not None:
                self.walk_expr(small.value, frame)
                frame.returns.append(self.value_of(small.value, frame))
            self.block.append(_Jump("return"))
        elif type(small) in (cst.Continue, cst.Break):
            if not self.transparent:
                self.block.append(_Jump("continue" if type(small) is cst.Continue else "break"))
        elif type(small) is cst.Raise:
            if small.exc is not None:
                self.walk_expr(small.exc, frame)
            if not self.transparent:
                self.block.append(_Jump("raise"))
        elif type(small) in (cst.Import, cst.ImportFrom):
            frame.unit.add_import(small)

    def _annotate(self, target: cst.BaseExpression, annotation: cst.BaseExpression, frame: _Frame) -> None:
        name = self.canon(target, frame)
        text = frame.unit.qualify(annotation) if type(annotation) in (cst.Name, cst.Attribute) else None
        if name and text:
            for pattern, role in _ANNOTATION_ROLES:
                if pattern.search(text):
                    self.annotations.setdefault(name, role)
                    self.candidates.setdefault(name, frame.unit.path)
                    break


    def assign(self, target: cst.BaseExpression, value: cst.BaseExpression, frame: _Frame, stmt: cst.CSTNode) -> None:
        if type(target) is cst.Name:
            self._note_scaled(target.value, value, frame)
        if type(target) in (cst.Tuple, cst.List):
            val = self.value_of(value, frame)
            elems = [e.value for e in target.elements]
            if type(value) in (cst.Tuple, cst.List) and len(value.elements) == len(elems):
                for t, v in zip(elems, value.elements):
                    self.assign(t, v.value, frame, stmt)
                return
            for i, t in enumerate(elems):
                sub = val.elems[i] if val.elems is not None and i < len(val.elems) else _Value()
                self._assign_value(t, sub, None, frame)
            return
        if type(target) is cst.Subscript:
            base = self.canon(target.value, frame)
            key = _string(_index(target))
            if base is not None and base in self.dicts:
                self._put(self.dicts[base], key, value, frame)
            return
        if type(target) is cst.Attribute and target.attr.value == "grad":
            if _is_none(value) or (type(value) is cst.Call and (_dotted(value.func) or "").endswith("zeros_like")):
                owner = self._grad_owner(target.value, frame)
                self.event(EventKind.ZERO_GRAD, owner, stmt, frame, form="grad_none" if _is_none(value) else "grad_zero",
                           set_to_none=_is_none(value), subset=self.param_filters > 0)
            else:  # a gradient the code computed itself: what a step after it applies
                self.event(EventKind.GRAD_WRITE, self._grad_owner(target.value, frame), stmt, frame)
            return
        if type(target) is cst.Attribute and target.attr.value == "grad_sample":
            # per-sample gradients computed by hand, which a differentially private optimizer
            # (Opacus) clips, averages and applies instead of `.grad`
            self.event(EventKind.GRAD_WRITE, self._grad_owner(target.value, frame), stmt, frame)
            return
        if type(target) is cst.Attribute and target.attr.value == "requires_grad":
            if _literal_bool(value) is False:
                owner = self._grad_owner(target.value, frame)
                if owner:
                    self.frozen.add(owner)
            return
        self._assign_value(target, self.value_of(value, frame), value, frame)

    def _note_scaled(self, name: str, value: cst.BaseExpression, frame: _Frame,
                     into: dict[str, tuple[str | None, bool]] | None = None) -> None:
        """Whether local `name` now holds a scaled loss: `scaler.scale(loss)`, or an expression of
        a name of `frame` that does (`scaled / accumulation`). Noted in `frame.scaled`, or in `into`
        (the parameters of a call `value` is passed to)."""
        table = frame.scaled if into is None else into
        call = _scale_call(value)
        if call is None and type(value) is cst.BinaryOperation:  # `scaler.scale(loss) / accumulation`
            call = next((c for c in (_scale_call(n) for n, _ in walk(value)) if c is not None), None)
        if call is not None:
            table[name] = (self.target(call.func.value, frame), not frame.branches)  # type: ignore[attr-defined]
            return
        if not frame.scaled:
            return
        used = [frame.scaled[n.value] for n, _ in walk(value) if type(n) is cst.Name and n.value in frame.scaled]
        if used:
            table[name] = (used[0][0], all(certain for _, certain in used) and not frame.branches)
        else:
            table.pop(name, None)

    def _assign_value(self, target: cst.BaseExpression, val: _Value, value: cst.BaseExpression | None, frame: _Frame) -> None:
        if value is not None and (type(value) in (cst.Lambda, cst.Call) or self.deferred):
            name = self.canon(target, frame)
            if name is not None:
                self._remember_deferred(name, value, frame)
        if type(target) is cst.Name:
            name = target.value
            tc = name
            known = None
            if type(value) in (cst.Comparison, cst.UnaryOperation) or (
                type(value) is cst.Name and value.value not in _CONSTANTS
            ):
                known = self._truth(value, frame)
            if known is not None:  # `training = optimizer is not None` with optimizer left as None
                frame.env[name] = "True" if known else "False"
                return
        else:
            tc = self.canon(target, frame)
            if tc is None:
                return
            name = None
        bound = False
        built = val.built if val.built is not None and val.built[0] is not value else None
        if value is not None or built is not None:  # no value: an element of a returned tuple
            scoped = self._scoped(tc, frame)
            if value is not None and self._bind_ctor(scoped, value, frame) or (built is not None and self._bind_ctor(scoped, *built)):
                # the constructor here, or the one a helper returns (`self.optimizer = self.build_optimizer()`)
                self.binding_scope[scoped] = self._scope(tc, frame)
                tc, bound = scoped, True
        if bound:
            if name is not None:
                frame.env[name] = tc
            self.assigned[tc] = (frame.unit, value) if value is not None else (built[1].unit, built[0])  # type: ignore[index]
            self.divided[tc] = False
            self.dicts.pop(tc, None)
            self.instances.pop(tc, None)  # the name now holds a library object, not a project class's
            built_by = _unmoved(value)  # `Net(...).to(device)` returns the network itself
            network = self._project_class(built_by.func, frame) if type(built_by) is cst.Call else None
            if network is not None and network.kind() is Role.MODEL:
                self.networks[tc] = network  # a network of the project: its own methods are known
            else:
                self.networks.pop(tc, None)
            return
        if val.canon is not None and val.canon != tc and val.canon != "None":
            if name is not None:
                frame.env[name] = val.canon  # an alias: one object, one name
            else:
                src = self.bindings.get(val.canon)
                if src is not None:
                    self.bindings[tc] = Binding(name=tc, role=src.role, cls=src.cls, qualified=src.qualified,
                                                call=src.call, cadence=src.cadence, evidence=src.evidence,
                                                path=src.path, detail=dict(src.detail), node=src.node, module=src.module)
                else:
                    self.usage.setdefault(tc, set()).add("alias:" + val.canon)
                if val.canon in self.instances:
                    self.instances[tc] = self.instances[val.canon]
                if val.canon in self.dicts:
                    self.dicts[tc] = self.dicts[val.canon]
                if val.canon in self.iter_of:
                    self.iter_of[tc] = self.iter_of[val.canon]
            return
        # what the name held before, when this assignment may not run (in a branch of an `if`)
        before = frame.env.get(name, "") if name is not None and frame.branches else ""
        if name is not None:
            if val.canon is None and built is None and name not in frame.env:  # a new local, not a parameter
                tc = self._claim(tc, frame)
            frame.env[name] = tc
        if val.dict is not None:
            if before:
                frame.rebound.append((tc, self.dicts.get(before)))
            self.dicts[tc] = val.dict.copy()
        else:
            self.dicts.pop(tc, None)
        self.divided[tc] = val.divided
        if value is not None:
            self.assigned[tc] = (frame.unit, value)
            if type(value) is cst.Call:
                fn = _dotted(value.func) or ""
                if fn in ("iter", "cycle") or fn.endswith(".cycle") or fn.endswith("_iter"):
                    loader = self._loader_of(value, frame)
                    if loader:
                        self.iter_of[tc] = loader
                elif fn.endswith(".__iter__") and type(value.func) is cst.Attribute:  # `it = loader.__iter__()`
                    loader = self._loader_of(value.func.value, frame)
                    if loader:
                        self.iter_of[tc] = loader
                cls = self._project_class(value.func, frame)
                if cls is not None and cls.kind() is None and not self._bound_before(tc, value, frame):
                    self.instances[tc] = cls
                    loader = self._prefetched_loader(cls, value, frame)
                    if loader:
                        self.iter_of[tc] = loader  # `for x in prefetcher`, `prefetcher.next()`: its batches

    def _prefetched_loader(self, cls: _Class, call: cst.Call, frame: _Frame) -> str | None:
        """`prefetcher = CUDAPrefetcher(train_loader, device)`: a class of the project that hands
        out (`next()`, `__next__`, `__iter__`) the batches of the loader it is given, iterating it
        in `__init__` (`self.data = iter(loader)`) or where it hands them out (`for batch in
        self.loader:`). The loader its batches come from."""
        init = cls.method("__init__")
        givers = [found for found in (cls.method(m) for m in ("next", "__next__", "__iter__")) if found is not None]
        if init is None or not givers:
            return None
        params = [p.name.value for p in [*init[0].params.posonly_params, *init[0].params.params][1:]]
        init_text = init[1].unit.text(init[0]).replace(" ", "")
        giving = " ".join(owner.unit.text(fdef) for fdef, owner in givers).replace(" ", "")
        for i, pname in enumerate(params):
            kept = re.search(rf"self\.(\w+)={pname}\b", init_text)
            if f"iter({pname})" in init_text or kept and (
                    f"iter(self.{kept.group(1)})" in giving or f"inself.{kept.group(1)}:" in giving):
                arg = _positional(call, i) or _kw(call, pname)
                return self._loader_of(arg, frame) if arg is not None else None
        return None

    def _scope(self, tc: str, frame: _Frame) -> str:
        if tc.startswith("self.") and frame.cls is not None:
            return frame.cls.name
        return frame.name if frame.depth or frame.name != "<module>" else "<module>"

    def _bound_before(self, tc: str, value: cst.Call, frame: _Frame) -> bool:
        """This scope bound a library object to `tc` in another assignment (the other branch of an
        `if`: `scaler = GradScaler()` ... `else: scaler = NoOpScaler()`): the project class
        assigned now is a stand-in, and following its methods would hide the library object's
        events. (A project wrapper around the library object it is handed, `WarmupOptimizer(...,
        Adam(...))`, is bound by this very assignment: its methods are followed.)"""
        found = self.bindings.get(tc)
        if found is None or found.call is None or self.binding_scope.get(tc) != self._scope(tc, frame):
            return False
        return not any(node is found.call for node, _ in walk(value))

    def _claim(self, tc: str, frame: _Frame) -> str:
        """The name for a plain name this scope assigns an object the model does not know
        (`loader = make_loader(ds)`): the bare name is this scope's unless another function bound
        an object to it first (two functions, each with its own local `loader`). In a function
        this one is then `tc@function`; at module level, where every function reads the global,
        the other function's object gives the name up. A scope that claims the bare name first
        keeps it: an object bound to it later elsewhere takes `tc@function` (see `_scoped`)."""
        scope = self._scope(tc, frame)
        other = self.binding_scope.get(tc)
        if other == scope:
            return tc
        if other is not None and scope != "<module>":
            return _in_scope(tc, scope)
        if other is not None:
            for table in (self.bindings, self.assigned, self.dicts, self.divided, self.instances, self.networks, self.iter_of):
                table.pop(tc, None)
        self.binding_scope[tc] = scope
        return tc

    def _scoped(self, tc: str, frame: _Frame) -> str:
        """The canonical name for a new object bound to `tc` here: `tc`, unless another scope
        already bound a different object to the same name (two functions each building their
        own `scheduler`), then `tc@function`."""
        existing = self.binding_scope.get(tc)
        scope = self._scope(tc, frame)
        if existing is None or existing == scope or "." in tc and not tc.startswith("self."):
            return tc
        return _in_scope(tc, scope)

    def _grad_owner(self, node: cst.BaseExpression, frame: _Frame) -> str | None:
        name = self.canon(node, frame)
        if name is None:
            return None
        if name in self.param_owner:
            return self.param_owner[name]
        return name.split(".")[0] if "." in name else None


def _string_value(node: cst.BaseExpression, frame: _Frame, builder) -> str | None:
    """The value of a string literal, or of a parameter an inlined call bound to one."""
    if type(node) is cst.SimpleString:
        return _string(node)
    if type(node) is cst.Name:
        canon = builder.canon(node, frame) or ""
        return canon[len(STRING_ARGUMENT):] if canon.startswith(STRING_ARGUMENT) else None
    return None


# calls that iterate their last argument: `for i, p in enumerate(model.parameters())`
_ITER_WRAPPERS = frozenset({"zip", "enumerate", "list", "filter", "tqdm"})
# tests that keep every parameter with a gradient (`if p.grad is not None:`) select no subset
_EVERY_PARAMETER = re.compile(r"^\s*(not\s+)?\(?\s*[\w.]+\.grad\s+is\s+(not\s+)?None\s*\)?\s*$|^\s*[\w.]+\.requires_grad\s*$")


def _selects_parameters(test_text: str) -> bool:
    """Does an `if` inside a loop over parameters pick some of them (`if "bias" in name:`)?"""
    return not _EVERY_PARAMETER.match(test_text)


def _filtered_iteration(iter_node: cst.BaseExpression, text: str) -> bool:
    """`[p for p in ... if cond]` or `filter(...)` over parameters: a subset, unless the filter only
    keeps trainable parameters or those with a gradient."""
    node = iter_node
    if type(node) is cst.ListComp or type(node) is cst.GeneratorExp:
        return any(_selects_parameters(node_code(c.test)) for c in node.for_in.ifs)
    return "filter(" in text and "requires_grad" not in text and ".grad is not None" not in text


def _entered_context(call: cst.Call) -> cst.BaseExpression | None:
    """The context manager of `stack.enter_context(cm)` (an ExitStack entering it)."""
    func = call.func
    if type(func) is cst.Attribute and func.attr.value == "enter_context" and len(call.args) == 1:
        return call.args[0].value
    return None


# functions that produce outputs step by step: `generate`, `sample`, `p_sample_loop`, `greedy_decode`
_GENERATION_FUNCTION = re.compile(r"generat|sampl|decod|greedy|beam", re.I)


# a count of outputs to produce (`range(num_samples)`, `range(max_new_tokens)`)
_GENERATION_COUNT = re.compile(r"sampl|generat|new_tokens", re.I)


def _generation_loop(frame: _Frame, iter_text: str, stmt: cst.For) -> tuple[bool, bool]:
    """Whether the loop generates, and whether each step reads what the last produced
    (`_feeds_back`). A counted loop in a generation function (`for t in reversed(range(steps))`
    in `sample`), or one counting the outputs it produces that feeds what a call returned back
    into that call (`for i in range(num_samples): output, state = model(input, state)`), unless it
    keeps log-probabilities for a policy-gradient backward or is a method of a network."""
    if frame.cls is not None and frame.cls.kind() is Role.MODEL:
        return False, False  # a network's own decoding steps (`vae.tiled_decode`): its callers choose no_grad
    if "range(" not in iter_text:
        return False, False
    named = bool(_GENERATION_FUNCTION.search(frame.name.rsplit(".", 1)[-1]))
    if not named and not _GENERATION_COUNT.search(iter_text):
        return False, False
    feeds = _feeds_back(stmt.body)
    if not (named or feeds) or "log_prob" in frame.unit.text(stmt.body):
        return False, False
    return True, feeds
