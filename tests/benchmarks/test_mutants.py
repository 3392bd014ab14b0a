"""The recall benchmark's mutation operators and its catch logic (no mirrors needed)."""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from mutant_operators import OPERATORS, mutants  # noqa: E402
from mutants import caught_by, finding_keys, load_equivalent  # noqa: E402

# One loop that gives every operator exactly one site.
SCRIPT = '''\
import torch
from torch.utils.data import DataLoader


def evaluate(model, loader):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += model(x).sum().item()
    return total


def fit(model, data, epochs, accum_steps, resume=None):
    loader = DataLoader(data, batch_size=16, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    warmup_sched = torch.optim.lr_scheduler.LinearLR(opt, total_iters=100)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
    scaler = torch.amp.GradScaler()
    if resume:
        model.load_state_dict(torch.load(resume, weights_only=True))
    losses = []
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        model.train()
        for step, (x, y) in enumerate(loader):
            opt.zero_grad()
            loss = model(x, y) / accum_steps
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            warmup_sched.step()
            losses.append(loss.item())
        score = evaluate(model, loader)
        model.train()
        plateau.step(score)
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, "last.pt")
'''
LINES = SCRIPT.splitlines(keepends=True)


def _at(text: str, nth: int = 0) -> int:
    hits = [i for i, line in enumerate(LINES) if line.strip() == text]
    return hits[nth]


def deleted(text: str, nth: int = 0) -> str:
    i = _at(text, nth)
    return "".join(LINES[:i] + LINES[i + 1:])


def moved(text: str, *, after: str | None = None, before: str | None = None) -> str:
    i = _at(text)
    rest = LINES[:i] + LINES[i + 1:]
    anchor = after if after is not None else before
    j = next(k for k, line in enumerate(rest) if line.strip() == anchor)
    j += 1 if after is not None else 0
    return "".join(rest[:j] + [LINES[i]] + rest[j:])


def replaced(old: str, new: str) -> str:
    assert SCRIPT.count(old) == 1
    return SCRIPT.replace(old, new)


def _scheduler_after_batch_loop() -> str:
    i = _at("warmup_sched.step()")
    rest = LINES[:i] + LINES[i + 1:]
    j = next(k for k, line in enumerate(rest) if line.strip() == "losses.append(loss.item())") + 1
    return "".join(rest[:j] + ["        warmup_sched.step()\n"] + rest[j:])


def _no_grad_removed() -> str:
    i = _at("with torch.no_grad():")
    body = [line[4:] for line in LINES[i + 1:i + 3]]
    return "".join(LINES[:i] + body + LINES[i + 3:])


EXPECTED = {
    "zero_grad_after_backward": ("LC102", lambda: moved("opt.zero_grad()", after="scaler.scale(loss).backward()")),
    "scheduler_before_optimizer": ("LC201", lambda: moved("warmup_sched.step()", before="scaler.step(opt)")),
    "delete_eval": ("LC301", lambda: deleted("model.eval()")),
    "delete_train": ("LC303", lambda: deleted("model.train()", 0)),
    "delete_train_after_eval": ("LC303", lambda: deleted("model.train()", 1)),
    "delete_unscale": ("LC401", lambda: deleted("scaler.unscale_(opt)")),
    "unscale_after_clip": ("LC401", lambda: moved(
        "scaler.unscale_(opt)", after="torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)")),
    "delete_set_epoch": ("LC701", lambda: deleted("loader.sampler.set_epoch(epoch)")),
    "remove_no_grad": ("LC302", _no_grad_removed),
    "drop_optimizer_from_checkpoint": ("LC501", lambda: replaced(
        '{"model": model.state_dict(), "optimizer": opt.state_dict()}', '{"model": model.state_dict()}')),
    "drop_item": ("LC601", lambda: replaced("losses.append(loss.item())", "losses.append(loss)")),
    "per_step_scheduler_to_epoch": ("LC202", _scheduler_after_batch_loop),
    "drop_plateau_metric": ("LC204", lambda: replaced("plateau.step(score)", "plateau.step()")),
    "drop_accumulation_division": ("LC105", lambda: replaced("model(x, y) / accum_steps", "model(x, y)")),
    "drop_shuffle": ("LC702", lambda: replaced("batch_size=16, shuffle=True)", "batch_size=16)")),
    "drop_weights_only": ("LC508", lambda: replaced("torch.load(resume, weights_only=True)", "torch.load(resume)")),
}


def test_every_operator_has_an_expected_mutant():
    assert set(EXPECTED) == set(OPERATORS)


@pytest.mark.parametrize("operator", sorted(EXPECTED))
def test_operator_rewrites_its_one_site(operator):
    code, expected = EXPECTED[operator]
    found = mutants(SCRIPT, [operator])
    assert len(found) == 1, [m.what for m in found]
    mutant = found[0]
    assert mutant.code == code
    assert mutant.source == expected()
    assert 1 <= mutant.line <= len(LINES)


def test_operators_leave_unrelated_code_alone():
    plain = "import torch\n\nx = torch.zeros(3)\nprint(x.sum().item())\n"
    assert mutants(plain) == []


def test_reset_at_the_end_of_the_iteration_moves_between_backward_and_step():
    source = (
        "for x in loader:\n"
        "    loss = model(x)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    optimizer.zero_grad()\n"
    )
    (mutant,) = mutants(source, ["zero_grad_after_backward"])
    assert mutant.source.splitlines()[2:5] == [
        "    loss.backward()", "    optimizer.zero_grad()", "    optimizer.step()"]


def test_only_a_new_finding_of_the_expected_code_counts():
    before = Counter({("LC508", "state = torch.load(path)"): 1})
    same = Counter(before)
    assert caught_by(before, same, "LC401") == (False, [])
    moved_line = before + Counter({("LC401", "clip(model)"): 1})
    assert caught_by(before, moved_line, "LC401") == (True, ["LC401"])
    other = before + Counter({("LC302", "out = model(x)"): 1})
    assert caught_by(before, other, "LC401") == (False, ["LC302"])


def test_a_seeded_bug_in_a_clean_fixture_is_caught(tmp_path, fixtures_dir):
    script = tmp_path / "train.py"
    shutil.copy(fixtures_dir / "amp_native_scaler_clean.py", script)
    original = script.read_text()
    (mutant,) = mutants(original, ["delete_unscale"])
    before = finding_keys(script, original)
    script.write_text(mutant.source)
    after = finding_keys(script, mutant.source)
    assert caught_by(before, after, "LC401")[0]
    assert not caught_by(before, before, "LC401")[0]


def test_equivalent_listing_is_read_and_checked(tmp_path):
    listing = tmp_path / "eq.tsv"
    listing.write_text("# comment\nowner/repo:train.py\tdelete_train\t12\tno eval() anywhere\n")
    assert load_equivalent(listing) == {("owner/repo:train.py", "delete_train", 12): "no eval() anywhere"}
    listing.write_text("owner/repo:train.py\tdelete_train\ttwelve\twhy\n")
    with pytest.raises(SystemExit, match="eq.tsv:1"):
        load_equivalent(listing)


def test_benchmark_lists_name_real_rule_codes():
    from loopcheck.catalog import codes

    sys.path.insert(0, str(ROOT / "benchmarks" / "realworld"))
    from history import HISTORY_FILE, load_bugs

    bugs = load_bugs(HISTORY_FILE)
    assert len(bugs) >= 20
    assert {b.code for b in bugs} <= set(codes())
    assert {code for code, _ in EXPECTED.values()} <= set(codes())
    assert len({(b.repo, b.file, b.line) for b in bugs}) == len(bugs)
