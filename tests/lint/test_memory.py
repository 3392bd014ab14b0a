"""LC601-LC603: loss tensors kept across iterations, softmax before cross-entropy, sigmoid before
BCE-with-logits.

Each case is a small script whose offending lines carry `# expect: LC6xx`; the test asserts that
the LC6 findings are exactly those (line, code) pairs. Multi-file cases write a small project to a
temporary folder and lint its training script.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from loopcheck.lint.api import lint_paths

from . import _support
from ._support import expected

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")  # a rule crash fails the test

HEAD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
"""


def found(source: str, path: str = "<string>") -> set[tuple[int, str]]:
    return _support.found(source, "LC6", path)


def found_in_project(path: Path) -> set[tuple[str, int, str]]:
    return _support.found_in_project(path, "LC6")


def check(body: str) -> None:
    _support.check(HEAD + textwrap.dedent(body), "LC6")


def messages(body: str, code: str, path: str = "<string>") -> list[str]:
    return _support.messages(HEAD + textwrap.dedent(body), code, path)


# --------------------------------------------------------------------------- LC601


def test_appended_loss_is_kept_across_iterations():
    check("""
        def train(model, loader, opt, criterion):
            losses = []
            for x, y in loader:
                opt.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                opt.step()
                losses.append(loss)  # expect: LC601
            return losses
    """)


def test_the_other_items_of_a_tuple_the_loss_came_in_are_not_the_loss():
    # a sequence tagger's loss comes back with the number of tokens it averages over
    tagger = """
        def train(model, loader, opt):
            tokens = 0
            for batch in loader:
                opt.zero_grad()
                loss = model.forward_loss(batch)
                if isinstance(loss, tuple):
                    tokens += loss[1]
                    loss = loss[0]
                loss.backward()
                opt.step()
    """
    check(tagger)
    # the item that is the loss is
    check(tagger.replace("tokens += loss[1]", "tokens += loss[0]  # expect: LC601"))


def test_outputs_kept_in_the_first_iteration_only_do_not_grow():
    # a test keeps the first step's outputs to compare them with a second implementation's
    once = """
        def run(model, batches, opt, steps):
            first = []
            for step in range(steps):
                opt.zero_grad()
                for x, dy in batches:
                    y = model(x)
                    y.backward(dy)
                    if step == 0:
                        first.append(y)
                opt.step()
    """
    check(once)
    # kept at every step, it grows
    check(once.replace("if step == 0:", "if step > 0:").replace("first.append(y)", "first.append(y)  # expect: LC601"))


def test_running_total_and_weighted_total_keep_the_graph():
    check("""
        def train(model, loader, opt):
            criterion = nn.CrossEntropyLoss()
            total = 0.0
            seen = 0.0
            smooth = 0.0
            for x, y in loader:
                opt.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                opt.step()
                total += loss  # expect: LC601
                seen += loss * x.size(0)  # expect: LC601
                smooth = 0.9 * smooth + 0.1 * loss  # expect: LC601
            return total, seen, smooth
    """)


def test_number_and_detached_values_are_fine():
    check("""
        def train(model, loader, opt, criterion):
            history, on_device = [], []
            total = 0.0
            running = torch.zeros(())
            for x, y in loader:
                opt.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                opt.step()
                history.append(loss.item())
                on_device.append(loss.detach())
                total += float(loss)
                total += loss.data
                running += loss.detach() * x.size(0)
                history.append(loss.cpu().item())
            return history, on_device, total, running
    """)


def test_loss_rebound_to_a_number_before_it_is_kept():
    check("""
        def train(model, loader, opt, criterion):
            history = []
            for x, y in loader:
                opt.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                opt.step()
                loss = loss.item()
                history.append(loss)
    """)


def test_criterion_output_that_is_not_back_propagated_is_kept():
    check("""
        def train(model, loader, opt):
            ce = nn.CrossEntropyLoss()
            aux_history = []
            for x, y in loader:
                opt.zero_grad()
                out = model(x)
                main = ce(out, y)
                aux = F.mse_loss(out.softmax(1), F.one_hot(y, 10).float())
                main.backward()
                opt.step()
                aux_history.append(aux)  # expect: LC601
    """)


def test_criterion_output_computed_under_no_grad_is_fine():
    check("""
        def train(model, loader, opt, criterion, probe):
            probe_losses = []
            for x, y in loader:
                opt.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                opt.step()
                with torch.no_grad():
                    probe_loss = criterion(probe(x), y)
                probe_losses.append(probe_loss)
    """)


def test_hf_style_output_loss_is_followed():
    check("""
        def train(model, loader, opt):
            curve = {"loss": []}
            for batch in loader:
                outputs = model(**batch)
                loss = outputs.loss
                loss.backward()
                opt.step()
                opt.zero_grad()
                curve["loss"].append(outputs.loss)  # expect: LC601
    """)


def test_name_rebound_to_a_number_after_backward_is_no_loss():
    # the back-propagated name later takes the validation number for early stopping: that number
    # is no loss tensor; an alias made before backward still is one
    check("""
        def train(model, feats, targets, opt, epochs, n_train):
            history = {"train": [], "val": [], "out": []}
            for epoch in range(epochs):
                for start in range(0, n_train, 100):
                    out = model(feats[start:start + 100])
                    result = {"loss": F.mse_loss(out, targets[start:start + 100])}
                    loss = result["loss"]
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    history["out"].append(result["loss"])  # expect: LC601
                with torch.no_grad():
                    out = model(feats)
                train_loss = F.mse_loss(out[:n_train], targets[:n_train]).item()
                if n_train < len(feats):
                    val_loss = F.mse_loss(out[n_train:], targets[n_train:]).item()
                    loss = val_loss
                else:
                    val_loss = 0
                    loss = train_loss
                history["train"].append(train_loss)
                history["val"].append(val_loss)
    """)


def test_list_reset_inside_the_iteration_is_fine():
    check("""
        def train(model, loader, opt, criterion, log_every=50):
            window = []
            for step, (x, y) in enumerate(loader):
                window = []
                opt.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                opt.step()
                window.append(loss)
            done = []
            for x, y in loader:
                opt.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                opt.step()
                done.append(loss)
                done.clear()
    """)


def test_reinforce_log_probs_summed_and_back_propagated():
    check("""
        from torch.distributions import Categorical

        def train(policy, env, opt, episodes):
            for episode in range(episodes):
                log_probs, rewards = [], []
                obs, done = env.reset(), False
                while not done:
                    dist = Categorical(logits=policy(obs))
                    action = dist.sample()
                    log_probs.append(dist.log_prob(action))
                    obs, reward, done = env.step(action.item())
                    rewards.append(reward)
                loss = -(torch.stack(log_probs) * torch.tensor(rewards)).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
    """)


def test_accumulated_total_back_propagated_under_the_guard_is_fine():
    check("""
        def train(model, loader, opt, criterion, accum=4):
            total = 0
            for i, (x, y) in enumerate(loader):
                total = total + criterion(model(x), y) / accum
                if (i + 1) % accum == 0:
                    total.backward()
                    opt.step()
                    opt.zero_grad()
                    total = 0
    """)


def test_buffer_back_propagated_in_another_method_is_fine():
    check("""
        class Learner:
            def __init__(self, model, opt, k=4):
                self.model, self.opt, self.k = model, opt, k
                self.pending = []

            def update(self):
                torch.stack(self.pending).mean().backward()
                self.opt.step()
                self.opt.zero_grad()
                self.pending = []

            def fit(self, loader, criterion):
                for x, y in loader:
                    loss = criterion(self.model(x), y)
                    self.pending.append(loss)
                    if len(self.pending) == self.k:
                        self.update()
    """)


def test_buffer_reset_in_another_method_is_fine_and_a_log_kept_forever_is_not():
    check("""
        class Learner:
            def __init__(self, model, opt, criterion):
                self.model, self.opt, self.criterion = model, opt, criterion
                self.window = []
                self.log = []

            def flush(self):
                print(torch.stack(self.window).mean().item())
                self.window = []

            def fit(self, loader):
                for step, (x, y) in enumerate(loader):
                    self.opt.zero_grad()
                    loss = self.criterion(self.model(x), y)
                    loss.backward()
                    self.opt.step()
                    self.window.append(loss)
                    self.log.append(loss)  # expect: LC601
                    if step % 100 == 0:
                        self.flush()
    """)


def test_micro_batch_losses_summed_within_the_iteration_are_fine():
    check("""
        def train(model, loader, opt, criterion):
            for x, y in loader:
                parts = []
                for xs, ys in zip(x.chunk(4), y.chunk(4)):
                    parts.append(criterion(model(xs), ys))
                loss = torch.stack(parts).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    """)


def test_epoch_level_list_of_last_losses():
    check("""
        def train(model, loader, opt, criterion, epochs):
            last = []
            for epoch in range(epochs):
                for x, y in loader:
                    opt.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    opt.step()
                last.append(loss)  # expect: LC601
    """)


def test_a_few_losses_kept_by_a_short_fixed_loop_are_bounded():
    # a test's five-step mini run keeps five graphs to compare the first loss with the last: the
    # memory is bounded and freed when the function returns; the same list under an epoch loop grows
    check("""
        def test_training_moves_the_loss(model, inputs, labels):
            optim = torch.optim.SGD(model.parameters(), lr=1.0)
            losses = []
            for _ in range(5):
                optim.zero_grad()
                loss = F.cross_entropy(model(inputs), labels)
                loss.backward()
                optim.step()
                losses.append(loss)
            assert not torch.isclose(losses[0], losses[-1])

        def fit(model, inputs, labels, epochs):
            optim = torch.optim.SGD(model.parameters(), lr=1.0)
            losses = []
            for epoch in range(epochs):
                for _ in range(5):
                    optim.zero_grad()
                    loss = F.cross_entropy(model(inputs), labels)
                    loss.backward()
                    optim.step()
                    losses.append(loss)  # expect: LC601
            for step in range(100000):
                optim.zero_grad()
                loss = F.cross_entropy(model(inputs), labels)
                loss.backward()
                optim.step()
                losses.append(loss)  # expect: LC601
    """)


def test_loss_returned_by_a_helper_that_back_propagates_it():
    check("""
        class Trainer:
            def __init__(self, model, opt):
                self.model, self.opt = model, opt
                self.criterion = nn.CrossEntropyLoss()
                self.losses = []
                self.numbers = []

            def step(self, x, y):
                self.opt.zero_grad()
                loss = self.criterion(self.model(x), y)
                loss.backward()
                self.opt.step()
                return loss

            def step_item(self, x, y):
                self.opt.zero_grad()
                loss = self.criterion(self.model(x), y)
                loss.backward()
                self.opt.step()
                return loss.item()

            def fit(self, loader):
                for x, y in loader:
                    self.losses.append(self.step(x, y))  # expect: LC601
                for x, y in loader:
                    self.numbers.append(self.step_item(x, y))
    """)


def test_a_helper_named_like_a_loss_that_returns_a_number_is_not_a_loss():
    # `eval_loss` sums `.item()` values and `loss_value` returns one: the list holds floats
    check("""
        def train(model, optimizer, loader):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                loss = F.nll_loss(model(x), y)
                loss.backward()
                optimizer.step()

        def eval_loss(model, loader):
            model.eval()
            total = 0
            for x, y in loader:
                with torch.no_grad():
                    out = model(x)
                total += F.nll_loss(out, y, reduction="sum").item()
            return total / len(loader.dataset)

        def loss_value(pred, y):
            return F.nll_loss(pred, y).item()

        def run(model, optimizer, train_loader, val_loader, epochs):
            val_losses, kept = [], []
            for epoch in range(epochs):
                train(model, optimizer, train_loader)
                val_losses.append(eval_loss(model, val_loader))
                x, y = next(iter(train_loader))
                val_losses.append(loss_value(model(x), y))
                kept.append(F.nll_loss(model(x), y))  # expect: LC601
            return torch.tensor(val_losses)
    """)


def test_scaled_backward_target_is_a_loss():
    check("""
        def train(model, loader, opt, criterion, scaler):
            seen = []
            for x, y in loader:
                opt.zero_grad()
                with torch.autocast("cuda"):
                    loss = criterion(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                seen.append((len(seen), loss))  # expect: LC601
    """)


def test_evaluation_loop_totals_are_left_to_lc302():
    check("""
        @torch.no_grad()
        def evaluate(model, loader, criterion):
            model.eval()
            total = torch.zeros(())
            for x, y in loader:
                total += criterion(model(x), y)
            return total / len(loader)
    """)


# --------------------------------------------------------------------------- LC602


def test_softmax_in_forward_reaches_cross_entropy():
    check("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(10, 3)

            def forward(self, x):
                return F.softmax(self.fc(x), dim=1)

        def train(loader):
            model = Net()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            criterion = nn.CrossEntropyLoss()
            for x, y in loader:
                opt.zero_grad()
                loss = criterion(model(x), y)  # expect: LC602
                loss.backward()
                opt.step()
    """)


def test_softmax_module_attribute_and_tensor_method():
    check("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(10, 3)
                self.softmax = nn.Softmax(dim=-1)

            def forward(self, x):
                h = self.fc(x)
                return self.softmax(h)

        class Head(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(10, 3)

            def forward(self, x):
                out = self.fc(x)
                out = out.softmax(-1)
                return out

        def train(loader):
            model, head = Net(), Head()
            opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)
            for x, y in loader:
                opt.zero_grad()
                a = F.cross_entropy(model(x), y)  # expect: LC602
                b = F.cross_entropy(head(x).view(-1, 3), y.view(-1))  # expect: LC602
                (a + b).backward()
                opt.step()
    """)


def test_softmax_in_the_loop_and_nll_on_probabilities():
    check("""
        def train(model, loader, opt):
            for x, y in loader:
                opt.zero_grad()
                probs = torch.softmax(model(x), dim=1)
                loss = F.cross_entropy(probs, y)  # expect: LC602
                nll = F.nll_loss(probs, y)  # expect: LC602
                (loss + nll).backward()
                opt.step()
    """)


def test_sequential_ending_in_softmax_built_by_a_helper():
    check("""
        def make_model():
            return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3), nn.Softmax(dim=1))

        def train(loader):
            model = make_model()
            opt = torch.optim.Adam(model.parameters())
            loss_fn = nn.CrossEntropyLoss()
            for x, y in loader:
                opt.zero_grad()
                loss = loss_fn(model(x), y)  # expect: LC602
                loss.backward()
                opt.step()
    """)


def test_softmax_look_alikes_stay_clean():
    check("""
        class TwoHeads(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(10, 3)

            def forward(self, x):
                logits = self.fc(x)
                return logits, F.softmax(logits, dim=1)

        class EvalProbs(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(10, 3)

            def forward(self, x):
                logits = self.fc(x)
                if not self.training:
                    return logits.softmax(dim=1)
                return logits

        class LogProbs(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(10, 3)

            def forward(self, x):
                return F.log_softmax(self.fc(x), dim=1)

        def train(loader, teacher):
            a, b, c = TwoHeads(), EvalProbs(), LogProbs()
            opt = torch.optim.SGD([*a.parameters(), *b.parameters(), *c.parameters()], lr=0.1)
            for x, y in loader:
                opt.zero_grad()
                logits, probs = a(x)
                loss = F.cross_entropy(logits, y)
                loss = loss + F.cross_entropy(b(x), y)
                loss = loss + F.nll_loss(c(x), y)
                loss = loss + F.cross_entropy(c(x), y)
                soft = F.softmax(teacher(x), dim=1)
                loss = loss + F.cross_entropy(logits, soft)
                out = a(x)
                loss = loss + F.cross_entropy(out[0], y)
                loss.backward()
                opt.step()
                acc = (probs.argmax(1) == y).float().mean().item()
    """)


def test_tuple_element_holding_probabilities_is_found():
    check("""
        class TwoHeads(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(10, 3)

            def forward(self, x):
                logits = self.fc(x)
                return logits, F.softmax(logits, dim=1)

        def train(loader):
            model = TwoHeads()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            criterion = nn.CrossEntropyLoss()
            for x, y in loader:
                opt.zero_grad()
                logits, probs = model(x)
                loss = criterion(probs, y)  # expect: LC602
                loss.backward()
                opt.step()
    """)


def test_model_passed_as_parameter_resolves_through_every_call_site():
    check("""
        class ProbNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(10, 3)

            def forward(self, x):
                return F.softmax(self.fc(x), dim=1)

        class LogitNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(10, 3)

            def forward(self, x):
                return self.fc(x)

        def fit_probs(model, loader, opt):
            for x, y in loader:
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)  # expect: LC602
                loss.backward()
                opt.step()

        def fit_either(model, loader, opt):
            for x, y in loader:
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()

        def main(loader, opt):
            fit_probs(ProbNet(), loader, opt)
            fit_either(ProbNet(), loader, opt)
            fit_either(LogitNet(), loader, opt)
    """)


def test_message_names_both_places():
    (message,) = messages("""
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(10, 3)

            def forward(self, x):
                return F.softmax(self.fc(x), dim=1)

        def train(loader):
            model = Net()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            criterion = nn.CrossEntropyLoss()
            for x, y in loader:
                opt.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                opt.step()
    """, "LC602", path="train.py")
    assert "softmax at train.py:11" in message
    assert "built at train.py:16" in message


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


def test_softmax_model_and_loss_wrapper_in_other_modules(tmp_path):
    root = _project(tmp_path, {
        "model.py": """
            import torch.nn as nn
            import torch.nn.functional as F

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(10, 3)

                def forward(self, x):
                    x = self.fc(x)
                    return F.softmax(x, dim=1)
        """,
        "losses.py": """
            import torch.nn as nn

            class SmoothCE(nn.Module):
                def __init__(self, eps=0.1):
                    super().__init__()
                    self.ce = nn.CrossEntropyLoss(label_smoothing=eps)

                def forward(self, logits, target):
                    return self.ce(logits.float(), target)

            def focal(logits, target, gamma=2.0):
                import torch.nn.functional as F
                ce = F.cross_entropy(logits, target, reduction="none")
                return ce.mean()
        """,
        "train.py": """
            import torch
            from model import Net
            from losses import SmoothCE
            import losses

            def main(loader):
                model = Net()
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                criterion = SmoothCE()
                for x, y in loader:
                    opt.zero_grad()
                    out = model(x)
                    loss = criterion(out, y)  # expect: LC602
                    loss = loss + losses.focal(out, y)  # expect: LC602
                    loss.backward()
                    opt.step()
        """,
    })
    source = (root / "train.py").read_text()
    assert found_in_project(root / "train.py") == {("train.py", line, code) for line, code in expected(source)}
    first = next(f for f in lint_paths([root / "train.py"]).findings if f.code == "LC602")
    assert "softmax at model.py:12" in first.message and "built at losses.py:7" in first.message
    # linted on its own, the file's imports are not followed
    assert found(source, path=str(root / "train.py")) == set()


def test_softmax_two_imports_away_is_found(tmp_path):
    # neither the script nor the module it imports names the activation: the module behind that one does
    root = _project(tmp_path, {
        "layers.py": """
            import torch.nn as nn

            class Head(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(10, 3)
                    self.act = nn.Softmax(dim=1)

                def forward(self, x):
                    return self.act(self.fc(x))
        """,
        "model.py": """
            from layers import Head as Net
        """,
        "train.py": """
            import torch
            import torch.nn as nn
            from model import Net

            def main(loader):
                model = Net()
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                criterion = nn.CrossEntropyLoss()
                for x, y in loader:
                    opt.zero_grad()
                    loss = criterion(model(x), y)  # expect: LC602
                    loss.backward()
                    opt.step()
        """,
    })
    source = (root / "train.py").read_text()
    assert found_in_project(root / "train.py") == {("train.py", line, code) for line, code in expected(source)}


def test_unresolvable_imported_model_says_nothing(tmp_path):
    source = textwrap.dedent("""
        import torch
        import torch.nn.functional as F
        from torchvision.models import resnet18
        from missing_module import Net

        def main(loader):
            model, other = resnet18(), Net()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y) + F.cross_entropy(other(x), y)
                loss.backward()
                opt.step()
    """)
    (tmp_path / "train.py").write_text(source)
    assert found_in_project(tmp_path / "train.py") == set()


# --------------------------------------------------------------------------- LC603


def test_sigmoid_into_bce_with_logits():
    check("""
        class Scorer(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = nn.Sequential(nn.Linear(10, 1), nn.Sigmoid())

            def forward(self, x):
                return self.net(x).squeeze(-1)

        def train(loader):
            model = Scorer()
            opt = torch.optim.Adam(model.parameters())
            crit = nn.BCEWithLogitsLoss()
            for x, y in loader:
                opt.zero_grad()
                loss = crit(model(x), y)  # expect: LC603
                p = torch.sigmoid(model(x))
                loss = loss + F.binary_cross_entropy_with_logits(p, y)  # expect: LC603
                loss = loss + F.binary_cross_entropy_with_logits(model(x).sigmoid(), y)  # expect: LC603
                loss.backward()
                opt.step()
    """)


def test_bce_on_sigmoid_and_logits_into_bce_with_logits_are_fine():
    check("""
        class Logits(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(10, 1)

            def forward(self, x):
                return self.fc(x).squeeze(-1)

        def train(loader):
            model = Logits()
            opt = torch.optim.Adam(model.parameters())
            bce = nn.BCELoss()
            for x, y in loader:
                opt.zero_grad()
                logits = model(x)
                probs = torch.sigmoid(logits)
                loss = bce(probs, y) + F.binary_cross_entropy_with_logits(logits, y)
                loss = loss + F.binary_cross_entropy(probs, y)
                loss.backward()
                opt.step()
                hits = ((probs > 0.5) == y.bool()).sum().item()
    """)
