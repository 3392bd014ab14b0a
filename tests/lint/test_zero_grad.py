"""LC101-LC105: where gradients are reset relative to backward() and step()."""

from __future__ import annotations

import textwrap

import pytest

from loopcheck.lint.api import lint_source


def lc1(source: str) -> list[tuple[int, str]]:
    findings = lint_source(textwrap.dedent(source), path="train.py", select=["LC1"])
    return sorted((f.line or 0, f.code) for f in findings)


# ---- bugs --------------------------------------------------------------------------------


def test_missing_reset_is_reported_on_the_step() -> None:
    assert lc1("""
        import torch
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
    """) == [(8, "LC101")]


def test_reset_once_per_epoch_does_not_count_for_the_batch_loop() -> None:
    assert lc1("""
        import torch
        def train(model, loader, epochs):
            optimizer = torch.optim.Adam(model.parameters())
            for epoch in range(epochs):
                optimizer.zero_grad()
                for x, y in loader:
                    model(x).sum().backward()
                    optimizer.step()
    """) == [(9, "LC101")]


def test_missing_reset_message_names_the_optimizer_and_the_fix() -> None:
    findings = lint_source(textwrap.dedent("""
        import torch
        def fit(net, data):
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            for x, y in data:
                torch.nn.functional.mse_loss(net(x), y).backward()
                opt.step()
    """), select=["LC101"])
    assert len(findings) == 1
    assert "`opt`" in findings[0].message and "zero_grad()" in findings[0].message


def test_reset_between_backward_and_step() -> None:
    findings = lint_source(textwrap.dedent("""
        import torch
        def train(model, loader, optimizer):
            for x, y in loader:
                loss = model(x, y)
                loss.backward()
                optimizer.zero_grad()
                optimizer.step()
    """), select=["LC1"])
    assert [(f.line, f.code) for f in findings] == [(7, "LC102")]
    message = findings[0].message
    assert message.startswith("`optimizer.zero_grad()` (line 7) runs after `loss.backward()` (line 6) and before `optimizer.step()` (line 8)")
    assert "Move the reset before the forward pass or after the step" in message


def test_model_zero_grad_between_backward_and_step() -> None:
    assert lc1("""
        import torch
        net = torch.nn.Linear(3, 3)
        opt = torch.optim.Adam(net.parameters())
        for x in data:
            net(x).sum().backward()
            net.zero_grad()
            opt.step()
    """) == [(7, "LC102")]


def test_reset_in_a_helper_is_reported_in_the_helper() -> None:
    assert lc1("""
        import torch

        def clip_and_reset(model, optimizer):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.zero_grad()

        def train(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                model(x).sum().backward()
                clip_and_reset(model, optimizer)
                optimizer.step()
    """) == [(6, "LC102")]


def test_step_moved_to_the_top_wipes_the_previous_backward() -> None:
    # cyclic: backward of iteration i, then reset and step of iteration i + 1
    findings = lint_source(textwrap.dedent("""
        import torch
        def train(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                optimizer.zero_grad()
                optimizer.step()
                model(x).sum().backward()
    """), select=["LC102"])
    assert "after the previous iteration's `model(x).sum().backward()`" in findings[0].message
    assert lc1("""
        import torch
        def train(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                optimizer.zero_grad()
                optimizer.step()
                model(x).sum().backward()
    """) == [(6, "LC102")]


def test_reset_every_micro_batch_breaks_accumulation() -> None:
    assert lc1("""
        import torch
        def train(model, loader, accum_steps=4):
            optimizer = torch.optim.AdamW(model.parameters())
            for i, (x, y) in enumerate(loader):
                optimizer.zero_grad(set_to_none=True)
                loss = model(x, y) / accum_steps
                loss.backward()
                if (i + 1) % accum_steps == 0:
                    optimizer.step()
    """) == [(6, "LC103")]


def test_skip_branch_that_still_steps() -> None:
    assert lc1("""
        import torch
        def train(model, loader, optimizer):
            for batch in loader:
                optimizer.zero_grad()
                loss = model(batch)
                if torch.isfinite(loss):
                    loss.backward()
                optimizer.step()
    """) == [(9, "LC104")]


@pytest.mark.parametrize("guard", ["(i + 1) % accum == 0", "i % args.grad_accum_steps == 0",
                                   "(step + 1) % gradient_accumulation_steps == 0 or last_batch"])
def test_accumulated_loss_not_divided(guard: str) -> None:
    assert lc1(f"""
        import torch
        def train(model, loader, optimizer, args, accum=4, gradient_accumulation_steps=4):
            for i, (x, y) in enumerate(loader):
                step = i
                last_batch = i == len(loader) - 1
                loss = model(x, y)
                loss.backward()
                if {guard}:
                    optimizer.step()
                    optimizer.zero_grad()
    """) == [(8, "LC105")]


# ---- correct look-alikes ------------------------------------------------------------------


def test_optimizer_built_in_each_iteration_over_a_fresh_copy_needs_no_reset() -> None:
    """A guidance loop optimises a fresh leaf copy of the latents at every timestep with a new
    optimizer: nothing carries over from one iteration to the next."""
    assert lc1("""
        import torch
        def guide(unet, latents, timesteps, scale):
            for t in timesteps:
                x = latents.detach().clone()
                x.requires_grad = True
                opt = torch.optim.SGD([x], lr=scale)
                with torch.enable_grad():
                    unet(x, t).pow(2).mean().backward()
                    opt.step()
                latents = x.detach()
            return latents
    """) == []


@pytest.mark.parametrize("division", [
    ["loss = model(x, y) / accum", "loss.backward()"],
    ["loss = model(x, y)", "loss = loss / accum", "loss.backward()"],
    ["loss = model(x, y)", "loss /= accum", "loss.backward()"],
    ["(model(x, y) / accum).backward()"],
    ["losses = [model(m, y) for m in x]", "loss = torch.stack(losses).mean()", "loss.backward()"],
], ids=["inline", "reassigned", "augmented", "in-backward", "mean"])
def test_divided_accumulation_is_clean(division: list[str]) -> None:
    body = "\n".join("        " + line for line in division)
    source = (
        "import torch\n"
        "def train(model, loader, optimizer, accum=4):\n"
        "    for i, (x, y) in enumerate(loader):\n"
        f"{body}\n"
        "        if (i + 1) % accum == 0:\n"
        "            optimizer.step()\n"
        "            optimizer.zero_grad()\n"
    )
    assert lint_source(source, select=["LC1"]) == []


def test_gan_with_two_optimizers_and_model_resets_is_clean() -> None:
    assert lc1("""
        import torch
        def train(netG, netD, loader, criterion):
            optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4)
            optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4)
            for real in loader:
                netD.zero_grad()
                errD_real = criterion(netD(real), 1.0)
                errD_real.backward()
                fake = netG(torch.randn(64, 100))
                errD_fake = criterion(netD(fake.detach()), 0.0)
                errD_fake.backward()
                optimizerD.step()
                netG.zero_grad()
                errG = criterion(netD(fake), 1.0)
                errG.backward()
                optimizerG.step()
    """) == []


INFO_GAN = """
    import itertools
    import torch
    def train(gen, disc, loader, epochs):
        opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4)
        opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4)
        opt_info = torch.optim.Adam(itertools.chain(gen.parameters(), disc.parameters()), lr=2e-4)
        for epoch in range(epochs):
            for x, code in loader:
                z = torch.randn(x.size(0), 62)
                opt_d.zero_grad()
                d_loss = disc(gen(z, code).detach())[0].mean() - disc(x)[0].mean()
                d_loss.backward()
                opt_d.step()
                opt_g.zero_grad()
                score, guess = disc(gen(z, code))
                (-score.mean()).backward(retain_graph=True)
                opt_g.step()
                info_loss = torch.nn.functional.mse_loss(guess, code)
                info_loss.backward()
                opt_info.step()
"""


def test_an_optimizer_whose_networks_the_others_reset_is_reset() -> None:
    # InfoGAN's information term: its optimizer updates both networks, whose gradients the
    # generator's and the discriminator's own resets clear each iteration. With one of them
    # never reset, the sum does run across iterations
    assert lc1(INFO_GAN) == []
    assert lc1(INFO_GAN.replace("opt_d.zero_grad()", "pass")) == [(14, "LC101"), (21, "LC101")]


def test_resetting_the_other_optimizer_between_backward_and_step_is_not_this_optimizers_problem() -> None:
    assert lc1("""
        import torch
        def train(gen, disc, loader):
            opt_g = torch.optim.Adam(gen.parameters())
            opt_d = torch.optim.Adam(disc.parameters())
            for x in loader:
                opt_g.zero_grad()
                gen(x).mean().backward()
                opt_d.zero_grad()
                opt_g.step()
                disc(x).mean().backward()
                opt_d.step()
    """) == []


def test_lbfgs_closure_is_clean() -> None:
    assert lc1("""
        import torch
        def fit(model, x, y, iters=100):
            optimizer = torch.optim.LBFGS(model.parameters(), lr=1)
            for it in range(iters):
                def closure():
                    optimizer.zero_grad()
                    loss = ((model(x) - y) ** 2).mean()
                    loss.backward()
                    return loss
                optimizer.step(closure)
    """) == []


def test_grad_none_loop_counts_as_reset() -> None:
    assert lc1("""
        import torch
        def train(model, loader):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                for p in model.parameters():
                    p.grad = None
                model(x).sum().backward()
                opt.step()
    """) == []


def test_grad_zero_over_param_groups_counts_as_reset() -> None:
    assert lc1("""
        import torch
        def train(model, loader):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                model(x).sum().backward()
                opt.step()
                for group in opt.param_groups:
                    for p in group["params"]:
                        if p.grad is not None:
                            p.grad.detach_()
                            p.grad.zero_()
    """) == []


def test_reset_at_the_end_of_the_iteration_is_clean() -> None:
    assert lc1("""
        import torch
        def train(model, batches, max_steps):
            optimizer = torch.optim.AdamW(model.parameters())
            it = iter(batches)
            step = 0
            while step < max_steps:
                x, y = next(it)
                model(x, y).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
    """) == []


def test_model_zero_grad_is_a_reset() -> None:
    assert lc1("""
        import torch
        net = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for x in data:
            net.zero_grad()
            net(x).sum().backward()
            opt.step()
    """) == []


def test_reset_in_a_helper_and_trainer_method_is_clean() -> None:
    assert lc1("""
        import torch

        class Trainer:
            def __init__(self, model):
                self.model = model
                self.optimizer = torch.optim.Adam(model.parameters())

            def reset(self):
                self.optimizer.zero_grad()

            def step(self, batch):
                self.reset()
                loss = self.model(batch)
                loss.backward()
                self.optimizer.step()

            def fit(self, loader):
                for batch in loader:
                    self.step(batch)
    """) == []


def test_accumulation_with_guarded_reset_is_clean() -> None:
    assert lc1("""
        import torch
        def train(model, loader, accum_steps):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for i, x in enumerate(loader):
                if i % accum_steps == 0:
                    optimizer.zero_grad()
                (model(x) / accum_steps).backward()
                if (i + 1) % accum_steps == 0:
                    optimizer.step()
    """) == []


def test_micro_batches_in_an_inner_loop_are_clean() -> None:
    assert lc1("""
        import torch
        def train(model, loader, chunks=4):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for batch in loader:
                optimizer.zero_grad()
                for micro in batch.chunk(chunks):
                    (model(micro).mean() / chunks).backward()
                optimizer.step()
    """) == []


def test_skipping_the_whole_iteration_is_clean() -> None:
    assert lc1("""
        import torch
        def train(model, loader, optimizer):
            for batch in loader:
                optimizer.zero_grad()
                loss = model(batch)
                if not torch.isfinite(loss):
                    continue
                loss.backward()
                optimizer.step()
    """) == []


def test_step_hidden_in_an_unknown_helper_is_not_guessed() -> None:
    # the optimizer escapes into code the linter cannot see: it may well reset there
    assert lc1("""
        import torch
        from somewhere import optimizer_step
        def train(model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
                optimizer_step(optimizer)
    """) == []


def test_a_gradient_written_by_hand_is_what_the_step_applies() -> None:
    # the temperature gets a gradient computed in closed form, written by hand before its step
    source = """
        import torch
        def train(model, log_temp, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            temp_optimizer = torch.optim.Adam([log_temp], lr=1e-3)
            for x, y in loader:
                temp_optimizer.zero_grad()
                log_temp.grad = closed_form_gradient(model, x, y)
                temp_optimizer.step()
                optimizer.zero_grad()
                loss = model(x, y, log_temp.exp().detach())
                loss.backward()
                optimizer.step()
    """
    assert lc1(source) == []
    # without the write, the reset leaves the step nothing (the previous backward's gradient is gone)
    assert lc1(source.replace("log_temp.grad = closed_form_gradient(model, x, y)", "pass")) == [(7, "LC102")]


def test_loss_from_an_unknown_helper_is_not_judged() -> None:
    # compute_loss lives in a library the linter cannot read: it may already divide
    assert lc1("""
        import torch
        from mylib import compute_loss
        def train(model, loader, optimizer, accum=4):
            for i, batch in enumerate(loader):
                loss = compute_loss(model, batch)
                loss.backward()
                if (i + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
    """) == []


def test_loss_divided_in_a_helper_of_the_file_is_clean() -> None:
    assert lc1("""
        import torch
        import torch.nn.functional as F
        def compute_loss(model, batch, accum):
            x, y = batch
            return F.cross_entropy(model(x), y) / accum
        def train(model, loader, optimizer, accum=4):
            for i, batch in enumerate(loader):
                loss = compute_loss(model, batch, accum)
                loss.backward()
                if (i + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
    """) == []


def test_reset_after_the_micro_batch_loop_that_ran_backward() -> None:
    assert lc1("""
        import torch
        def train(model, loader, optimizer, k):
            for batch in loader:
                for piece in batch.split(k):
                    (model(piece).mean() / k).backward()
                optimizer.zero_grad()
                optimizer.step()
    """) == [(7, "LC102")]


def test_reset_before_the_micro_batch_loop_is_fine() -> None:
    assert lc1("""
        import torch
        def train(model, loader, optimizer, k):
            for batch in loader:
                optimizer.zero_grad()
                for piece in batch.split(k):
                    (model(piece).mean() / k).backward()
                optimizer.step()
    """) == []


def test_inner_loop_with_its_own_step_does_not_feed_the_outer_one() -> None:
    # the batch loop steps its own optimizer; the reset before the epoch-level loss is right
    assert lc1("""
        import torch
        def train(model, loader, optimizer, extra):
            for epoch in range(10):
                for x in loader:
                    optimizer.zero_grad()
                    model(x).mean().backward()
                    optimizer.step()
                optimizer.zero_grad()
                extra(model).backward()
                optimizer.step()
    """) == []


def test_reset_between_two_losses_of_one_of_two_optimizers() -> None:
    assert lc1("""
        import torch
        def train(gen, disc, loader):
            opt_g = torch.optim.Adam(gen.parameters())
            opt_d = torch.optim.Adam(disc.parameters())
            for real in loader:
                disc(real).mean().backward()
                disc.zero_grad()
                fake = gen(torch.randn(8, 16))
                disc(fake.detach()).mean().neg().backward()
                opt_d.step()
                gen.zero_grad()
                disc(fake).mean().backward()
                opt_g.step()
    """) == [(8, "LC102")]


def test_reset_dropping_another_networks_gradients_is_fine() -> None:
    # the generator's backward also fills the discriminator's gradients: resetting them before
    # the discriminator's own backward is what the code means
    assert lc1("""
        import torch
        def train(gen, disc, loader):
            opt_g = torch.optim.Adam(gen.parameters())
            opt_d = torch.optim.Adam(disc.parameters())
            for real in loader:
                gen.zero_grad()
                fake = gen(torch.randn(8, 16))
                disc(fake).mean().backward()
                disc.zero_grad()
                (disc(real).mean() - disc(fake.detach()).mean()).backward()
                opt_d.step()
                opt_g.step()
    """) == []


def test_a_first_pass_that_keeps_its_graph_for_a_second_one_is_not_wiped() -> None:
    # two-pass clipping: the first backward's hooks measure per-sample norms, the reset drops its
    # gradients, and the second backward (through the kept graph) is the one the step applies
    source = """
        import torch
        def train(model, loader, optimizer, criterion):
            for x, y in loader:
                per_sample = criterion(model(x), y)
                per_sample.mean().backward(retain_graph=True)
                optimizer.zero_grad()
                weights = model.clipping_factors()
                (weights * per_sample).sum().backward()
                optimizer.step()
    """
    assert lc1(source) == []
    # without keeping the graph the first pass is a loss whose gradients the reset throws away
    assert lc1(source.replace("backward(retain_graph=True)", "backward()")) == [(7, "LC102")]


def test_per_sample_gradients_written_by_hand_feed_the_step() -> None:
    # a private-training loop: one branch computes per-sample gradients with functorch and hands
    # them to the optimizer through `p.grad_sample`, the other runs backward
    source = """
        import torch
        def train(model, params, loader, optimizer, criterion, functional):
            for x, y in loader:
                if functional:
                    grads = per_sample_grads(params, x, y)
                    for p, g in zip(params, grads):
                        p.grad_sample = g
                else:
                    criterion(model(x), y).backward()
                optimizer.step()
                optimizer.zero_grad()
    """
    assert lc1(source) == []
    assert lc1(source.replace("p.grad_sample = g", "p.data = g")) == [(11, "LC104")]


def test_a_gan_built_by_one_factory_called_twice_is_clean() -> None:
    # the two networks and their optimizers come from one helper (its locals are the same names
    # both times): nothing may be read as one network reset or trained by the other's optimizer
    source = """
        import torch
        from torch import nn

        def make(width):
            net = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))
            opt = torch.optim.Adam(net.parameters(), lr=2e-4)
            return net, opt

        def train(loader):
            gen, opt_g = make(16)
            disc, opt_d = make(16)
            for real in loader:
                fake = gen(torch.randn(8, 16))
                opt_d.zero_grad()
                (disc(real).mean() - disc(fake.detach()).mean()).backward()
                opt_d.step()
                opt_g.zero_grad()
                (-disc(fake).mean()).backward()
                opt_g.step()
    """
    assert lint_source(textwrap.dedent(source), path="train.py", select=["LC1", "LC3"]) == []


def test_branches_on_one_test_are_taken_together() -> None:
    # two copies trained side by side, each only on the ranks that hold it: the reset, the
    # backward and the step of a copy all sit under the same test
    source = """
        import torch
        def compare(model_a, model_b, opt_a, opt_b, loader, rank, size_a, size_b):
            for x, dy in loader:
                if rank < size_a:
                    opt_a.zero_grad()
                if rank < size_b:
                    opt_b.zero_grad()
                if rank < size_a:
                    model_a(x).backward(dy)
                if rank < size_b:
                    model_b(x).backward(dy)
                if rank < size_a:
                    opt_a.step()
                if rank < size_b:
                    opt_b.step()
    """
    assert lc1(source) == []
    # a backward under a test of its own can be skipped while the reset and the step run
    skipped = source.replace("if rank < size_a:\n                    model_a(x)", "if warmed_up:\n                    model_a(x)")
    assert skipped != source and (14, "LC104") in lc1(skipped)
