"""Re-parsing an edited buffer one top-level statement at a time gives the module a parse of the
whole text gives, node for node, or declines (and the whole text is parsed)."""

from __future__ import annotations

import random
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from loopcheck.lint.positions import statement_offsets
from loopcheck.server.reparse import Parsed, reparse

REPO = Path(__file__).resolve().parents[2]

# Module-level comments between statements, a decorated function, comments closing blocks at
# several depths, a class, a trailing comment: the places where libcst's owner of a line
# depends on what follows it.
SCRIPT = textwrap.dedent(
    '''\
    #!/usr/bin/env python
    """Train a small classifier."""

    import torch
    from torch import nn

    EPOCHS = 3


    class Head(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.fc = nn.Linear(width, 10)
            # the head has no bias tricks

        def forward(self, x):
            return self.fc(x)

    # a comment about the helper below

    @torch.no_grad()
    def evaluate(model, loader):
        model.eval()
        for x, y in loader:
            if x is None:
                continue
                # never here
            model(x)
        # done


    def train(model, loader, optimizer):
        model.train()
        for epoch in range(EPOCHS):
            for x, y in loader:
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()


    if __name__ == "__main__":
        train(Head(8), [], None)
    # end of file
    '''
)

SNIPPETS = ["\n", "    # note\n", "# note\n", "x = 1\n", "    x = 1\n", "        y = 2\n", "def g():\n",
            "    pass\n", "(", ")", ":", "\\\n", '"""', "@deco\n", "\t", " ", "#", "if a:\n", "else:\n"]


def _edits(text: str, rng: random.Random, count: int) -> list[str]:
    """Texts made from `text` by one random edit each: characters or whole lines inserted,
    deleted or replaced, anywhere."""
    lines = text.splitlines(keepends=True)
    out = []
    for _ in range(count):
        kind = rng.randrange(5)
        if kind == 0:  # insert a snippet at any character
            at = rng.randrange(len(text) + 1)
            out.append(text[:at] + rng.choice(SNIPPETS) + text[at:])
        elif kind == 1:  # delete a few characters
            at = rng.randrange(len(text))
            out.append(text[:at] + text[at + rng.randrange(1, 6):])
        elif kind == 2:  # insert a line at a line start
            at = rng.randrange(len(lines) + 1)
            out.append("".join(lines[:at] + [rng.choice(SNIPPETS).lstrip("(:)") or "\n"] + lines[at:]))
        elif kind == 3:  # delete a line
            at = rng.randrange(len(lines))
            out.append("".join(lines[:at] + lines[at + 1:]))
        else:  # change one word of a line, as typing does
            at = rng.randrange(len(lines))
            out.append("".join(lines[:at] + [lines[at].replace("x", "xs", 1).replace("model", "net", 1)] + lines[at + 1:]))
    return out


def _parse(text: str) -> cst.Module | None:
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError:
        return None


def _check_edits(text: str, seed: int, count: int) -> tuple[int, int]:
    """Each edit of `text` re-parsed from the module of `text`: when reparse answers, its module
    equals the whole text's parse; how many edits it answered, and how many parse."""
    rng = random.Random(seed)
    previous = Parsed(text, cst.parse_module(text))
    answered = parsing = 0
    for new in _edits(text, rng, count):
        found = reparse(previous, new)
        whole = _parse(new)
        parsing += whole is not None
        if found is None:
            continue
        answered += 1
        assert whole is not None, f"reparse accepted a text that does not parse:\n{new}"
        assert found.module.deep_equals(whole), f"the spliced module differs from the parse of:\n{new}"
        code, starts = statement_offsets(whole)
        if code == new:  # (libcst drops a line continuation after a decorator, for one)
            assert found.module.code == new
            assert found.starts == starts
        # and the next edit starts from the spliced module
        again = reparse(found, text)
        if again is not None:
            assert again.module.deep_equals(previous.module)
    return answered, parsing


def test_random_edits_of_a_script_give_the_whole_parse() -> None:
    answered, parsing = _check_edits(SCRIPT, seed=16, count=250)
    assert answered >= 0.8 * parsing  # most edits stay inside statements


@pytest.mark.parametrize("name", ["eval_generation_and_periodic_switches.py", "eval_nested_helpers_and_two_networks.py",
                                  "ckpt_missing_optimizer_scheduler.py", "amp_clip_before_unscale.py"])
def test_random_edits_of_fixtures_give_the_whole_parse(name: str) -> None:
    text = (REPO / "fixtures" / name).read_text(encoding="utf-8")
    answered, parsing = _check_edits(text, seed=len(name), count=60)
    assert answered >= 0.5 * parsing


@pytest.mark.parametrize("style", ["lf", "crlf", "tabs"])
def test_a_session_of_edits_each_from_the_last(style: str) -> None:
    """Edits made one after the other, each re-parsed from the previous result (as the server
    does): every result equals the parse of its whole text, whatever the newlines and indents."""
    text = {"lf": SCRIPT, "crlf": SCRIPT.replace("\n", "\r\n"), "tabs": SCRIPT.replace("    ", "\t")}[style]
    rng = random.Random(7)
    current = Parsed(text, cst.parse_module(text))
    answered = 0
    for _ in range(300):
        new = _edits(current.text, rng, 1)[0]
        whole = _parse(new)
        if whole is None:
            continue
        found = reparse(current, new)
        if found is not None:
            answered += 1
            assert found.module.deep_equals(whole), f"the spliced module differs from the parse of:\n{new}"
            code, starts = statement_offsets(whole)
            assert code != new or found.starts == starts
        current = found if found is not None else Parsed(new, whole)
    assert answered > 50


def test_typing_a_function_character_by_character() -> None:
    """Every prefix of a new function typed at the end of a statement's body: each re-parse
    starts from the previous one, as in an editor."""
    anchor = "    # done\n"
    typed = "    for x in loader:\n        model(x)\n"
    previous = Parsed(SCRIPT, cst.parse_module(SCRIPT))
    at = SCRIPT.index(anchor) + len(anchor)
    for n in range(1, len(typed) + 1):
        text = SCRIPT[:at] + typed[:n] + SCRIPT[at:]
        found = reparse(previous, text)
        whole = _parse(text)
        if found is None:
            previous = Parsed(text, whole) if whole is not None else previous
            continue
        assert whole is not None and found.module.deep_equals(whole)
        previous = found


def test_a_change_in_the_header_or_footer() -> None:
    for new in (SCRIPT.replace("#!/usr/bin/env python", "#!/usr/bin/python3"),
                SCRIPT.replace("# end of file", "# the end"),
                SCRIPT + "print('x')\n",
                SCRIPT.rstrip("\n")):
        found = reparse(Parsed(SCRIPT, cst.parse_module(SCRIPT)), new)
        if found is not None:
            assert found.module.deep_equals(cst.parse_module(new))


def test_an_edit_inside_a_loop_reparses_only_its_statement() -> None:
    """The other statements of the function, and of the loop, are the previous module's nodes."""
    previous = Parsed(SCRIPT, cst.parse_module(SCRIPT))
    new = SCRIPT.replace("            loss.backward()\n", "            (loss / 2).backward()\n")
    assert new != SCRIPT
    found = reparse(previous, new)
    assert found is not None and found.module.deep_equals(cst.parse_module(new))
    train = next(s for s in found.module.body if getattr(s, "name", None) and s.name.value == "train")
    old_train = next(s for s in previous.module.body if getattr(s, "name", None) and s.name.value == "train")
    assert train is not old_train and train.body.body[0] is old_train.body.body[0]  # model.train() kept
    inner, old_inner = train.body.body[1].body.body[0].body.body, old_train.body.body[1].body.body[0].body.body
    assert [a is b for a, b in zip(inner, old_inner)] == [True, True, False, True]


def test_an_unchanged_text_is_not_parsed_again() -> None:
    previous = Parsed(SCRIPT, cst.parse_module(SCRIPT))
    assert reparse(previous, SCRIPT) is previous


def test_a_syntax_error_is_left_to_the_whole_parse() -> None:
    previous = Parsed(SCRIPT, cst.parse_module(SCRIPT))
    assert reparse(previous, SCRIPT.replace("model.train()", "model.train(")) is None
