"""LC301-LC304: evaluation loops in training mode or with autograd on, eval mode leaking into
training, backward with recording off.

Each case is a small script whose offending lines carry `# expect: LC3xx`; the test asserts that
the LC3 findings are exactly those (line, code) pairs.
"""

from __future__ import annotations

import textwrap

import pytest

from loopcheck.lint.loopmodel.resolution import _steps_through_name

from . import _support

HEAD = """\
import torch
from torch import nn
import torch.nn.functional as F
"""

TRAIN_ONE_EPOCH = """
def train_one_epoch(model, loader, optimizer):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
"""


def check(body: str, *, prelude: str = "") -> None:
    _support.check(HEAD + textwrap.dedent(prelude) + textwrap.dedent(body), "LC3")


# --------------------------------------------------------------------------- LC301


def test_evaluate_without_eval_after_training_epoch():
    check(
        """
        def evaluate(model, loader):
            hits = 0
            with torch.no_grad():
                for x, y in loader:
                    hits += (model(x).argmax(1) == y).sum().item()  # expect: LC301
            return hits

        def main(model, train_loader, val_loader, epochs):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(epochs):
                train_one_epoch(model, train_loader, optimizer)
                print(evaluate(model, val_loader))
        """,
        prelude=TRAIN_ONE_EPOCH,
    )


def test_eval_called_by_the_caller_before_evaluate_is_clean():
    check(
        """
        def evaluate(model, loader):
            hits = 0
            with torch.no_grad():
                for x, y in loader:
                    hits += (model(x).argmax(1) == y).sum().item()
            return hits

        def main(model, train_loader, val_loader, epochs):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(epochs):
                train_one_epoch(model, train_loader, optimizer)
                model.eval()
                print(evaluate(model, val_loader))
        """,
        prelude=TRAIN_ONE_EPOCH,
    )


def test_eval_switched_after_the_evaluation_is_too_late():
    check(
        """
        def main(model, train_loader, val_loader, epochs):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(epochs):
                train_one_epoch(model, train_loader, optimizer)
                with torch.no_grad():
                    for x, y in val_loader:
                        loss = F.cross_entropy(model(x), y)  # expect: LC301
                model.eval()
        """,
        prelude=TRAIN_ONE_EPOCH,
    )


def test_training_script_that_never_switches_modes():
    check("""
        def main(model, train_loader, val_loader, epochs):
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            for epoch in range(epochs):
                for x, y in train_loader:
                    optimizer.zero_grad()
                    F.mse_loss(model(x), y).backward()
                    optimizer.step()
                with torch.no_grad():
                    val = 0.0
                    for x, y in val_loader:
                        val += F.mse_loss(model(x), y).item()  # expect: LC301
                print(epoch, val)
    """)


def test_inference_only_scripts_and_recalibration_and_rollouts_are_clean():
    check("""
        def predict(model, test_loader):
            # no training here: the model may well come in eval mode
            with torch.inference_mode():
                return [model(x).argmax(1) for x in test_loader]

        def predict_all(model, test_loader):
            out = []
            with torch.inference_mode():
                for x in test_loader:
                    out.append(model(x).argmax(1))
            return out

        def recalibrate_bn(model, loader):
            model.train()
            with torch.no_grad():
                for x, _ in loader:
                    model(x)

        def rollout(policy, env, steps):
            obs = env.reset()
            with torch.no_grad():
                for t in range(steps):
                    obs, reward, done, info = env.step(policy(obs).argmax().item())
    """)


def test_evaluation_function_not_called_in_this_file_is_judged_on_its_own():
    check(
        """
        def score(model, val_loader):
            # called from another module, which switches modes itself
            total = 0
            with torch.no_grad():
                for x, y in val_loader:
                    total += (model(x).argmax(1) == y).sum().item()
            return total
        """,
        prelude=TRAIN_ONE_EPOCH,
    )


# --------------------------------------------------------------------------- LC302


def test_evaluation_without_no_grad():
    check("""
        def validate(model, val_loader):
            model.eval()
            total = 0.0
            for x, y in val_loader:
                total += F.mse_loss(model(x), y).item()  # expect: LC302
            return total
    """)


def test_a_loop_that_steps_through_an_optimizer_wrapper_is_training_not_evaluation():
    """`optim_wrapper.update_params(loss)` (a wrapper that runs backward, step and reset itself):
    a method the model does not know, called on an optimizer in the loop, may train; the same
    loop reading only the optimizer's state, or a model's own helper, is still evaluation."""
    check("""
        def fit(model, train_loader, optimizer, epochs):
            model.train()
            for epoch in range(epochs):
                for batch in train_loader:
                    loss = model(**batch).loss
                    optimizer.update_params(loss)

        def validate(model, val_loader, optimizer):
            model.eval()
            rates = []
            for x, y in val_loader:
                rates.append(optimizer.get_lr())
                logits = model.classify(model(x))  # expect: LC302
            return rates

        def main(strategy, cfg, model, train_loader, val_loader, tracker):
            # the optimizer comes back in a tuple from a call the model does not follow: its name says it
            model, optimizer, schedulers = strategy.prepare(model, optim_wrapper=cfg)
            model.train()
            for batch in train_loader:
                loss = model(**batch).loss
                optimizer.update_params(loss)
            model.eval()
            for x, y in val_loader:
                tracker.log_batch(x)  # a method the model does not know, of no optimizer
                model(x)  # expect: LC302
    """)


def test_a_loop_over_what_a_network_holds_is_not_evaluation_over_data():
    """A zero loss built from every head of a network, returned for the caller to backpropagate,
    iterates the network's mesh names: not data. A loop over batches a network keeps still is."""
    check("""
        class EmbeddingLosses:
            def zero_value(self, embedder: nn.Module):
                parts = []
                for mesh in embedder.mesh_names:
                    parts.append(embedder(mesh).sum() * 0)
                return torch.stack(parts).mean()

        def validate(model, val_loader):
            model.eval()
            total = 0.0
            for x, y in model.holdout_batches:
                total += F.mse_loss(model(x), y).item()  # expect: LC302
            return total
    """)


def test_a_classmethod_named_like_a_network_is_no_forward_pass():
    """`Param.Input.model(name)` builds a description through a class of the project: no network
    runs. A real forward in the same kind of loop still records a graph nothing uses."""
    check("""
        class Param:
            class Input:
                @classmethod
                def model(cls, name):
                    return {"name": name, "kind": "model"}

        def describe(block):
            fields = []
            for name in block.component_names:
                fields.append(Param.Input.model(name))
            return fields

        def validate(model, val_loader):
            model.eval()
            described = []
            for x, y in val_loader:
                described.append(Param.Input.model("head"))
                described.append(model(x))  # expect: LC302
            return described
    """)


def test_an_attack_whose_helpers_take_input_gradients_needs_the_graph():
    """The loop calls a helper that runs the network through another helper and takes the
    gradient of the loss with respect to the perturbation: the graph is what it is for. The same
    helpers without the gradient are evaluation with recording on."""
    check("""
        class Attack:
            def __init__(self, model):
                self.model = model

            def _logits(self, x, delta):
                return self.model(x + delta)

            def _loss_and_gradient(self, x, y, delta):
                loss = F.cross_entropy(self._logits(x, delta), y)
                return loss, torch.autograd.grad(loss, delta)[0]

            def run(self, x, y, schedule):
                self.model.eval()
                delta = torch.zeros_like(x)
                for step in tqdm(schedule, desc="attack"):
                    loss, grad = self._loss_and_gradient(x, y, delta)
                    delta = delta + 0.01 * grad.sign()
                return delta

        def _scores(model, x):
            return model(x).softmax(-1)

        def _batch_score(model, x, y):
            return _scores(model, x).gather(1, y[:, None]).mean()

        def validate(model, val_loader):
            model.eval()
            total = 0.0
            for x, y in val_loader:
                total += _batch_score(model, x, y).item()  # expect: LC302
            return total
    """)


def test_no_grad_forms_are_clean():
    check("""
        @torch.no_grad()
        def validate(model, val_loader):
            model.eval()
            return sum(F.mse_loss(model(x), y).item() for x, y in val_loader)

        def evaluate(model, val_loader):
            model.eval()
            total = 0.0
            with torch.no_grad(), torch.autocast("cuda"):
                for x, y in val_loader:
                    total += F.mse_loss(model(x), y).item()
            return total

        def test(model, test_loader):
            model.eval()
            total = 0.0
            with torch.inference_mode():
                for x, y in test_loader:
                    total += F.mse_loss(model(x), y).item()
            return total

        def score(model, val_loader):
            model.eval()
            total = 0.0
            for x, y in val_loader:
                total += F.mse_loss(model(x), y).item()
            return total

        def run(model, val_loader):
            with torch.no_grad():
                return score(model, val_loader)
    """)


def test_saliency_loop_needs_the_graph():
    check("""
        def saliency(model, val_loader):
            model.eval()
            maps = []
            for x, y in val_loader:
                x.requires_grad_(True)
                score = model(x).gather(1, y[:, None]).sum()
                maps.append(torch.autograd.grad(score, x)[0].abs())
            return maps
    """)


# --------------------------------------------------------------------------- LC303


def test_validation_switches_to_eval_and_training_is_never_switched_back():
    check("""
        def validate(model, val_loader):
            model.eval()  # expect: LC303
            with torch.no_grad():
                return sum(F.mse_loss(model(x), y).item() for x, y in val_loader)

        def fit(model, train_loader, val_loader, epochs):
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            model.train()
            for epoch in range(epochs):
                for x, y in train_loader:
                    optimizer.zero_grad()
                    F.mse_loss(model(x), y).backward()
                    optimizer.step()
                print(validate(model, val_loader))
    """)


def test_train_in_a_step_called_from_both_branches_of_an_accumulation_test_restores():
    # the step switches back to train mode itself; it is called on both sides of the accumulation
    # test (`no_sync()` on the steps that only accumulate), each backward right after its train()
    check("""
        class Trainer:
            def __init__(self, model, optimizer, accum=4, eval_every=100):
                self.model, self.optimizer, self.accum, self.eval_every = model, optimizer, accum, eval_every

            def training_step(self, model, batch):
                model.train()
                loss = F.cross_entropy(model(batch["x"]), batch["y"]) / self.accum
                loss.backward()
                return loss.detach()

            def evaluate(self, model, loader):
                model.eval()
                with torch.no_grad():
                    return sum(F.cross_entropy(model(b["x"]), b["y"]).item() for b in loader)

            def train(self, loader, val_loader):
                model = self.model
                for step, batch in enumerate(loader):
                    if (step + 1) % self.accum != 0:
                        with model.no_sync():
                            self.training_step(model, batch)
                    else:
                        self.training_step(model, batch)
                    if (step + 1) % self.accum == 0:
                        self.optimizer.step()
                        self.optimizer.zero_grad()
                        if (step + 1) % self.eval_every == 0:
                            print(self.evaluate(model, val_loader))
    """)


def test_switching_back_the_part_that_trains_restores():
    # only the classifier head trains (the encoder is frozen): its own method switches the head
    # back after each epoch's evaluation put the whole network in eval mode
    check("""
        class Probe(nn.Module):
            def __init__(self, encoder, classes):
                super().__init__()
                self.encoder = encoder
                self.head = nn.Sequential(nn.Dropout(0.1), nn.Linear(768, classes))

            def train_head(self):
                for p in self.encoder.parameters():
                    p.requires_grad = False
                self.head.train()

            def forward(self, x):
                return self.head(self.encoder(x).mean(1))

        def train_epoch(loader, probe, optimizer):
            probe.train_head()
            for x, y in loader:
                optimizer.zero_grad()
                F.cross_entropy(probe(x), y).backward()
                optimizer.step()

        def evaluate(loader, probe):
            probe.eval()
            with torch.no_grad():
                return sum((probe(x).argmax(1) == y).sum().item() for x, y in loader)

        def main(encoder, train_loader, test_loader, epochs):
            probe = Probe(encoder, 2).to("cpu")
            optimizer = torch.optim.Adam(probe.head.parameters(), lr=1e-4)
            for epoch in range(epochs):
                train_epoch(train_loader, probe, optimizer)
                print(evaluate(test_loader, probe))
    """)


def test_a_network_from_a_pretrained_checkpoint_starts_in_eval_mode():
    # `from_pretrained` hands the network back in eval mode: an answer script that loads extra
    # weights into it and generates is no evaluation in train mode. Built by its constructor, it is
    check("""
        from transformers import AutoModelForCausalLM

        def answer(path, questions, extra):
            model = AutoModelForCausalLM.from_pretrained(path)
            model.load_state_dict(torch.load(extra, weights_only=True), strict=False)
            for ids in questions:
                with torch.inference_mode():
                    print(model.generate(ids, max_new_tokens=32))
    """)
    check("""
        class Decoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.drop = nn.Dropout(0.1)

        def answer(path, questions):
            model = Decoder()
            model.load_state_dict(torch.load(path, weights_only=True))
            for ids in questions:
                with torch.inference_mode():
                    print(model.generate(ids, max_new_tokens=32))  # expect: LC301
    """)


DETECTOR = """
def nograd(f):
    def run(*args, **kwargs):
        with torch.no_grad():
            return f(*args, **kwargs)
    return run


def timed(f):
    def run(*args, **kwargs):
        return f(*args, **kwargs)
    return run


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())

    def forward(self, x):
        return self.body(x)

    @DECORATOR
    def predict(self, images):
        self.eval()
        boxes = self(images).amax(1)
        self.train()
        return boxes


def evaluate(detector, loader):
    return [detector.predict(images) for images, _ in loader]


def train(loader, test_loader, epochs):
    detector = Detector()
    optimizer = torch.optim.SGD(detector.parameters(), lr=1e-3)
    for epoch in range(epochs):
        for images, target in loader:
            optimizer.zero_grad()
            F.mse_loss(detector(images).amax(1), target).backward()
            optimizer.step()
        print(len(evaluate(detector, test_loader)))
"""


def test_a_project_decorator_that_runs_the_method_under_no_grad():
    # `predict` switches modes itself and its decorator runs it inside `with torch.no_grad():`
    check(DETECTOR.replace("DECORATOR", "nograd"))
    check(DETECTOR.replace("DECORATOR", "timed").replace(
        "    return [detector.predict(images) for images, _ in loader]\n",
        "    return [detector.predict(images) for images, _ in loader]  # expect: LC302\n"))


VOCODER = """
class Vocoder(nn.Module):
    def __init__(self, dims=80):
        super().__init__()
        self.rnn = nn.GRU(dims, 128, batch_first=True)
        self.drop = nn.Dropout(0.1)
        self.out = nn.Linear(128, 256)

    def forward(self, mels):
        h, _ = self.rnn(mels)
        return self.out(self.drop(h))

    def generate(self, mels):
        self.eval()
        with torch.no_grad():
            samples = self.forward(mels).argmax(-1)
        self.train()
        return samples


def write_samples(model: Vocoder, test_set, count):
    for i, (mels, _) in enumerate(test_set, 1):
        if i > count:
            break
        print(model.generate(mels).shape)


def train(loader, test_set, epochs):
    model = Vocoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    for epoch in range(epochs):
        for mels, target in loader:
            loss = F.cross_entropy(model(mels).transpose(1, 2), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        write_samples(model, test_set, 4)
"""


def test_a_networks_own_generate_is_followed():
    # the project's `generate()` switches to eval mode and back itself: the sampling loop is no
    # evaluation in train mode. Without the switch back, training goes on in eval mode
    check(VOCODER)
    leaky = VOCODER.replace("        self.train()\n", "").replace(
        "        self.eval()\n", "        self.eval()  # expect: LC303\n")
    check(leaky)


POLICY_TRAINER = """
class PolicyTrainer:
    def __init__(self, policy, optimizer, value_coef=0.5):
        self.policy = policy
        self.optimizer = optimizer
        self.value_coef = value_coef

    @torch.no_grad()
    def rollout(self, prompts):
        self.policy.eval()  # expect: LC303
        return [self.policy(p) for p in prompts]

    def train(self, prompt_batches, epochs):
        for batch in prompt_batches:
            rollouts = self.rollout(batch)
            for epoch in range(epochs):
                for r in rollouts:
                    loss = self.policy(r).mean()
                    loss.backward()
                    self.optimizer.step()
                    self.optimizer.zero_grad()
"""


def test_a_network_never_put_in_train_mode_is_a_warning():
    # handed in and never switched to train mode: kept in eval mode on purpose (an RL policy
    # trained without dropout) or loaded so; with a `train()` somewhere, training wants train mode
    check(POLICY_TRAINER)
    found = _support.findings(HEAD + POLICY_TRAINER, "LC303")
    assert [f.severity.name for f in found] == ["WARNING"]
    assert "never puts `self.policy` in train mode" in found[0].message
    switched = POLICY_TRAINER.replace(
        "        for batch in prompt_batches:\n", "        self.policy.train()\n        for batch in prompt_batches:\n")
    found = _support.findings(HEAD + switched, "LC303")
    assert [f.severity.name for f in found] == ["ERROR"] and "never puts" not in found[0].message


def test_periodic_validation_inside_the_batch_loop():
    check("""
        def fit(model, train_loader, val_loader, epochs, eval_every=500):
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            for epoch in range(epochs):
                model.train()
                for step, (x, y) in enumerate(train_loader):
                    optimizer.zero_grad()
                    F.mse_loss(model(x), y).backward()
                    optimizer.step()
                    if step % eval_every == 0:
                        model.eval()  # expect: LC303
                        with torch.no_grad():
                            for vx, vy in val_loader:
                                print(F.mse_loss(model(vx), vy).item())
    """)


def test_mode_restored_in_each_of_the_usual_places_is_clean():
    check(
        """
        @torch.no_grad()
        def evaluate(model, val_loader):
            was_training = model.training
            model.eval()
            total = sum(F.mse_loss(model(x), y).item() for x, y in val_loader)
            model.train(was_training)
            return total

        def validate(model, val_loader):
            model.eval()
            with torch.no_grad():
                total = sum(F.mse_loss(model(x), y).item() for x, y in val_loader)
            model.train()
            return total

        def fit_a(model, train_loader, val_loader, epochs):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(epochs):
                train_one_epoch(model, train_loader, optimizer)
                model.eval()
                print(evaluate(model, val_loader))

        def fit_b(model, train_loader, val_loader, epochs):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model.train()
            for epoch in range(epochs):
                for x, y in train_loader:
                    optimizer.zero_grad()
                    F.cross_entropy(model(x), y).backward()
                    optimizer.step()
                print(validate(model, val_loader), evaluate(model, val_loader))
        """,
        prelude=TRAIN_ONE_EPOCH,
    )


def test_frozen_parts_and_other_networks_kept_in_eval_mode_are_clean():
    check("""
        def distill(student, teacher, model, loader, epochs):
            optimizer = torch.optim.SGD(list(student.parameters()) + list(model.head.parameters()), lr=0.1)
            for p in model.backbone.parameters():
                p.requires_grad = False
            for epoch in range(epochs):
                student.train()
                teacher.eval()
                model.train()
                model.backbone.eval()
                for x, y in loader:
                    with torch.no_grad():
                        soft = teacher(x).softmax(1)
                    optimizer.zero_grad()
                    loss = F.kl_div(student(x).log_softmax(1), soft, reduction="batchmean")
                    loss = loss + F.cross_entropy(model(x), y)
                    loss.backward()
                    optimizer.step()
    """)


# --------------------------------------------------------------------------- LC304


def test_training_function_decorated_with_no_grad():
    check("""
        @torch.no_grad()
        def train_epoch(model, loader, optimizer):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()  # expect: LC304
                optimizer.step()
    """)


def test_training_step_called_from_inside_no_grad_block():
    check("""
        def step(model, optimizer, x, y):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()  # expect: LC304
            optimizer.step()

        def train(model, teacher, loader, epochs):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            teacher.eval()
            for epoch in range(epochs):
                model.train()
                for x in loader:
                    with torch.inference_mode():
                        y = teacher(x).argmax(1)
                        step(model, optimizer, x, y)
    """)


def test_enable_grad_rollouts_and_graphs_recorded_outside_are_clean():
    check("""
        @torch.no_grad()
        def adapt(model, loader, optimizer):
            model.train()
            for x, _ in loader:
                with torch.enable_grad():
                    out = model(x)
                    loss = -(out.softmax(1) * out.log_softmax(1)).sum(1).mean()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()

        def reinforce(policy, env, optimizer, iterations):
            for it in range(iterations):
                with torch.no_grad():
                    states = [torch.as_tensor(env.reset())]
                    for t in range(100):
                        states.append(torch.as_tensor(env.step(policy(states[-1]).argmax().item())[0]))
                loss = policy(torch.stack(states)).logsumexp(1).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        def phase(model, loader, optimizer, train):
            model.train(train)
            with torch.set_grad_enabled(train):
                for x, y in loader:
                    loss = F.cross_entropy(model(x), y)
                    if train:
                        optimizer.zero_grad()
                        loss.backward()
                        optimizer.step()

        def backward_only_in_block(model, loader, optimizer):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x), y)
                with torch.no_grad():
                    loss.backward()
                optimizer.step()
    """)


def test_phase_loop_without_eval_for_the_held_out_phase():
    check(
        """
        def fit(model, loaders, optimizer, epochs):
            for epoch in range(epochs):
                for phase in ["train", "test"]:
                    if phase == "train":
                        model.train()
                    for x, y in loaders[phase]:
                        with torch.set_grad_enabled(phase == "train"):
                            loss = F.mse_loss(model(x), y)  # expect: LC301
                        if phase == "train":
                            optimizer.zero_grad()
                            loss.backward()
                            optimizer.step()
        """
    )


def test_phase_loop_whose_eval_is_not_undone_in_the_next_training_phase():
    check(
        """
        def fit(model, loaders, optimizer, epochs):
            for epoch in range(epochs):
                for phase in ["train", "val"]:
                    if phase == "val":
                        model.eval()  # expect: LC303
                    for x, y in loaders[phase]:
                        with torch.set_grad_enabled(phase == "train"):
                            loss = F.mse_loss(model(x), y)
                        if phase == "train":
                            optimizer.zero_grad()
                            loss.backward()
                            optimizer.step()
        """
    )


def test_phase_loop_with_both_switches_is_fine():
    check(
        """
        def fit(model, loaders, optimizer, epochs):
            for epoch in range(epochs):
                for phase in ["train", "val"]:
                    if phase == "train":
                        model.train()
                    else:
                        model.eval()
                    for x, y in loaders[phase]:
                        with torch.set_grad_enabled(phase == "train"):
                            loss = F.mse_loss(model(x), y)
                        if phase == "train":
                            optimizer.zero_grad()
                            loss.backward()
                            optimizer.step()
        """
    )


def test_step_loop_evaluating_on_one_branch_and_training_on_the_other():
    check(
        """
        def fit(model, loader, optimizer, every):
            for step, (x, y) in enumerate(loader):
                if step % every == 0:
                    model.eval()  # expect: LC303
                    with torch.no_grad():
                        print(F.mse_loss(model(x), y).item())
                else:
                    loss = F.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
        """
    )


def test_evaluation_written_as_a_generator_over_the_test_loader():
    check(
        """
        def main(model, loader, test_loader, optimizer):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                F.mse_loss(model(x), y).backward()
                optimizer.step()
            with torch.no_grad():
                err = sum(F.mse_loss(model(x), y).item() for x, y in test_loader)  # expect: LC301
            model.eval()
            err = sum(F.mse_loss(model(x), y).item() for x, y in test_loader)  # expect: LC302
            return err
        """
    )


def test_frozen_network_recording_on_the_batch_beside_the_trained_one():
    check(
        """
        def distill(student, teacher, loader):
            optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
            for x, y in loader:
                soft = teacher(x).softmax(-1)  # expect: LC302
                loss = F.cross_entropy(student(x), soft)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        """
    )


def test_network_of_unknown_optimizer_or_on_computed_input_is_not_frozen():
    check(
        """
        def alias(model, loader, make_optimizer):
            optimizer = make_optimizer(model)
            for x, y in loader:
                loss = F.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

        def perceptual(gen, features, loader):
            optimizer = torch.optim.Adam(gen.parameters())
            for z, target in loader:
                loss = F.mse_loss(features(gen(z)), target)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        """
    )


def test_inference_script_that_restores_weights_and_never_calls_eval():
    check(
        """
        def score_right(weights, loader):
            net = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 1))
            net.load_state_dict(torch.load(weights, weights_only=True))
            net.eval()
            out = []
            with torch.no_grad():
                for x in loader:
                    out.append(net(x))
            return out

        def score(weights, loader):
            net = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 1))
            net.load_state_dict(torch.load(weights, weights_only=True))
            out = []
            with torch.no_grad():
                for x in loader:
                    out.append(net(x))  # expect: LC301
            return out
        """
    )


def test_a_parameter_is_not_the_network_another_function_of_the_file_built_under_its_name():
    # `from_pretrained` builds and restores its own `model`; `embed` is handed one by its caller,
    # which is not this file's business (the same name does not make it the same network)
    check(
        """
        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 2))

            def forward(self, x):
                return self.body(x)

            @classmethod
            def from_pretrained(cls, path):
                model = Encoder()
                model.load_state_dict(torch.load(path, weights_only=True))
                model.eval()
                return model

        @torch.no_grad()
        def embed(model, dataset):
            outs = []
            for batch in torch.utils.data.DataLoader(dataset, batch_size=32):
                outs.append(model(batch))
            return torch.cat(outs)

        def embed_fresh(path, dataset):
            model = Encoder()
            model.load_state_dict(torch.load(path, weights_only=True))
            outs = []
            with torch.no_grad():
                for batch in torch.utils.data.DataLoader(dataset, batch_size=32):
                    outs.append(model(batch))  # expect: LC301
            return torch.cat(outs)
        """
    )


def test_a_plain_function_a_helper_hands_back_as_the_model_is_no_network():
    # a sampler test's stand-in for a denoising network: a nested `def`, no parameters, no graph
    check("""
        class SamplerTest:
            def dummy_model(self):
                def model(sample, t):
                    return sample * t / (t + 1)
                return model

            def dummy_network(self):
                return nn.Linear(3, 3)

            def test_full_loop(self, scheduler):
                model = self.dummy_model()
                sample = torch.ones(2, 3)
                for t in scheduler.timesteps:
                    residual = model(sample, t)
                    sample = scheduler.step(residual, t, sample).prev_sample
                return sample

            def test_with_classes(self, scheduler):
                model = self.dummy_model(8)  # a subclass's override takes the number of classes
                sample = torch.ones(2, 3)
                for t in scheduler.timesteps:
                    sample = scheduler.step(model(sample, t), t, sample).prev_sample
                return sample

            def test_with_a_network(self, scheduler):
                net = self.dummy_network()
                net.eval()
                sample = torch.ones(2, 3)
                for t in scheduler.timesteps:
                    residual = net(sample)  # expect: LC302
                    sample = scheduler.step(residual, t, sample).prev_sample
                return sample
    """)


def test_names_like_a_network_that_are_no_forward_pass():
    # pydantic's `model_dump_json()`, a numpy polynomial fitted as `model_fn`, a method converting
    # a state dict `..._for_model`: no network runs; the projection head in the last loop does
    check("""
        import numpy as np

        def report(records, xs, ys, tuner, head, val_loader):
            lines = []
            for r in records:
                lines.append(r.model_dump_json())
            for degree in (2, 3):
                model_fn = np.poly1d(np.polyfit(xs, ys, degree))
                lines.append(model_fn(xs))
            for state in records:
                lines.append(tuner._convert_state_dict_for_model(state))
            head.eval()
            for x, y in val_loader:
                lines.append(F.mse_loss(head(x), y).item())  # expect: LC302
            return lines
    """)


def test_a_library_pipeline_runs_without_recording_by_itself():
    # diffusers' and transformers' pipelines call the network under `torch.no_grad()`
    check("""
        from diffusers import AutoPipelineForText2Image, StableDiffusionPipeline
        from transformers import pipeline as hf_pipeline

        def log_validation(unet, prompts):
            images = []
            pipeline = AutoPipelineForText2Image.from_pretrained("org/base", unet=unet)
            for prompt in prompts:
                images.append(pipeline(prompt, num_inference_steps=20).images[0])
            model = StableDiffusionPipeline.from_pretrained("org/base")
            for prompt in prompts:
                images.append(model(prompt).images[0])
            classifier = hf_pipeline("image-classification")
            for image in images:
                classifier(image)
            return images
    """)


@pytest.mark.parametrize(("name", "steps"), [
    ("optimizer", True), ("optim_wrapper", True), ("self.optimizer", True), ("scaler", True),
    ("opt", False),  # most often the parsed options
    ("tracker", False), ("model", False),
])
def test_which_unbound_names_may_step_an_optimizer_through_a_method_not_known(name, steps):
    assert _steps_through_name(name) is steps


# ------------------------------------------------- networks that compute the same in both modes

MODE_FREE = HEAD + textwrap.dedent("""
    class TinyNet(nn.Module):
        def __init__(self, width, classes):
            super().__init__()
            self.width = width
            self.body = nn.Sequential(nn.Linear(784, width), nn.ReLU(), nn.Linear(width, classes))

        def forward(self, x):
            return self.body(x.flatten(1))


    def fit(train_loader, test_loader, epochs):
        model = TinyNet(300, 10)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(epochs):
            for x, y in train_loader:
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
            model.eval()
            with torch.no_grad():
                for x, y in test_loader:
                    model(x)
""")


def _lc303(source: str) -> list[tuple[str, str]]:
    return [(f.severity.name, f.message) for f in _support.findings(source, ["LC303"])]


def test_eval_never_undone_on_a_network_without_mode_dependent_layers_is_a_warning():
    ((severity, message),) = _lc303(MODE_FREE)
    assert severity == "WARNING" and "no dropout, no batch norm" in message
    # evaluated without `eval()` at all (LC301): the same
    lc301 = _support.findings(MODE_FREE.replace("        model.eval()\n", ""), ["LC301"])
    assert [(f.severity.name, "no dropout, no batch norm" in f.message) for f in lc301] == [("WARNING", True)]


@pytest.mark.parametrize("layer", [
    "nn.Dropout(0.1)",                        # a mode-dependent layer
    "nn.BatchNorm1d(300)",
    "nn.LSTM(300, 300, 2, dropout=0.2)",      # dropout between recurrent layers
    "nn.TransformerEncoderLayer(300, 4)",     # dropout 0.1 unless told otherwise
    "nn.RReLU()",                             # a random slope in training only
    "timm.layers.Mlp(300)",                   # a library layer: its code is not read
    "Gate()",                                 # a project layer that reads self.training
    "make_head(300)",                         # a project helper that builds batch norm
])
def test_a_network_with_a_mode_dependent_part_keeps_the_error(layer):
    parts = textwrap.dedent("""
        import timm

        class Gate(nn.Module):
            def forward(self, x):
                return x * 0.5 if self.training else x

        def make_head(width):
            return nn.Sequential(nn.Linear(width, width), nn.BatchNorm1d(width))
    """)
    source = MODE_FREE.replace("nn.ReLU(), ", f"nn.ReLU(), {layer}, ").replace("\nclass TinyNet", parts + "\nclass TinyNet")
    ((severity, message),) = _lc303(source)
    assert severity == "ERROR" and "dropout off" in message


def test_a_library_function_called_in_forward_builds_no_layer():
    # the forward integrates with a library solver: nothing in it depends on the network's mode
    source = ("import torchsde\n" + MODE_FREE).replace(
        "return self.body(x.flatten(1))", "return torchsde.sdeint(self.body, x.flatten(1), self.ts)[-1]")
    ((severity, message),) = _lc303(source)
    assert severity == "WARNING" and "no dropout, no batch norm" in message


def test_a_network_built_around_a_module_it_is_given_is_not_proven():
    source = MODE_FREE.replace(
        "    def __init__(self, width, classes):\n        super().__init__()\n",
        "    def __init__(self, width, classes, stem):\n        super().__init__()\n        self.stem = stem\n",
    ).replace("return self.body(x.flatten(1))", "return self.body(self.stem(x).flatten(1))").replace(
        "TinyNet(300, 10)", "TinyNet(300, 10, make_stem())")
    assert [severity for severity, _ in _lc303(source)] == ["ERROR"]


def test_an_evaluation_helper_switching_a_list_of_networks_under_the_logging_test_is_restored():
    # the helper switches each network of a list; the trainer switches back under the same test
    check("""
        def evaluate(models, loader):
            for model in models:
                model.eval()
            with torch.no_grad():
                for x, y in loader:
                    for model in models:
                        model(x)

        def train(model, loader, test_loader, optimizer, log_every):
            model.train()
            for it, (x, y) in enumerate(loader):
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                if it % log_every == 0:
                    evaluate([model], test_loader)
                    model.train()
    """)


def test_a_switch_written_inside_the_network_is_quoted_as_written():
    source = HEAD + textwrap.dedent("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))

            def forward(self, x):
                return self.body(x)

            def sample(self, x):
                self.eval()
                with torch.no_grad():
                    return self(x)

        def fit(loader, epochs):
            model = Net()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model.train()
            for epoch in range(epochs):
                for x, y in loader:
                    optimizer.zero_grad()
                    F.cross_entropy(model(x), y).backward()
                    optimizer.step()
                print(model.sample(x))
    """)
    ((severity, message),) = _lc303(source)
    assert severity == "ERROR" and message.startswith("`self.eval()` (on `model`) in the epoch loop is never undone")


def test_a_network_whose_forward_turns_recording_off_itself_is_not_asked_to():
    # a translation model with one forward for every phase; its inference phase runs under no_grad
    source = HEAD + textwrap.dedent("""
        class Translator(nn.Module):
            def __init__(self):
                super().__init__()
                self.generator = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 3, 3))

            def forward(self, batch, mode):
                if mode == "generator":
                    return F.l1_loss(self.generator(batch["src"]), batch["dst"])
                if mode == "inference":
                    with torch.no_grad():
                        fake = self.generator(batch["src"])
                    return fake
                raise ValueError(mode)

        model = Translator()
        model.eval()
        for i, batch in enumerate(test_loader):
            images = model(batch, mode="inference")
    """)
    assert _support.findings(source, ["LC302"]) == []
    plain = source.replace("            with torch.no_grad():\n                fake", "            fake")
    assert plain != source
    assert [f.code for f in _support.findings(plain, ["LC302"])] == ["LC302"]
    # a tuple of what it computed so
    pair = source.replace("            return fake", "            return fake, batch")
    assert pair != source and _support.findings(pair.replace("images = model", "images, _ = model"), ["LC302"]) == []
    # only a frozen part under no_grad, the rest recorded: still asked to
    part = source.replace("            return fake", "            return self.generator(fake)")
    assert part != source
    assert [f.code for f in _support.findings(part, ["LC302"])] == ["LC302"]


def test_a_train_on_a_network_looked_up_by_name_may_restore_it():
    # a trainer whose steps pick their network by name; the evaluator switches the encoder
    source = HEAD + textwrap.dedent("""
        class Trainer:
            def __init__(self, encoder, decoder, optimizer):
                self.encoder = encoder
                self.decoder = decoder
                self.optimizer = optimizer

            def lm_step(self, name, batch):
                model = getattr(self, name)
                model.train()
                self.optimizer.zero_grad()
                model(batch).mean().backward()
                self.optimizer.step()

            def ae_step(self, batch):
                self.encoder.train()
                self.optimizer.zero_grad()
                F.mse_loss(self.encoder(batch), batch).backward()
                self.optimizer.step()

            def evaluate(self, batches):
                self.encoder.eval()
                with torch.no_grad():
                    for batch in batches:
                        self.encoder(batch)

        def main(encoder, decoder, loader, valid, epochs, name):
            trainer = Trainer(encoder, decoder, torch.optim.Adam(encoder.parameters()))
            for epoch in range(epochs):
                for batch in loader:
                    trainer.lm_step(name, batch)
                    trainer.ae_step(batch)
                trainer.evaluate(valid)
    """)
    assert _lc303(source) == []
    # the network picked by a literal name is the decoder: the encoder trains in eval mode first
    assert len(_lc303(source.replace("getattr(self, name)", "self.decoder"))) == 1


def test_a_grad_context_chosen_at_run_time_is_not_judged():
    # an embedder that records only when it is fine-tuned
    source = HEAD + textwrap.dedent("""
        class Embedder(nn.Module):
            def __init__(self, encoder, fine_tune):
                super().__init__()
                self.encoder = encoder
                self.fine_tune = fine_tune

            def embed(self, batches):
                out = []
                context = torch.enable_grad() if self.fine_tune and self.training else torch.no_grad()
                with context:
                    for batch in batches:
                        out.append(self.encoder(batch))
                return out
    """)
    assert _support.findings(source, ["LC302"]) == []
    plain = source.replace("with context:", "if context:")
    assert [f.code for f in _support.findings(plain, ["LC302"])] == ["LC302"]
