"""The model shapes of the probe benchmarks, and the faults the detection benchmark plants in them.

Six shapes, each written the way such scripts usually are, at a size that steps in a few
milliseconds on one CPU thread: a dense MLP, a VAE, a CNN with batch norm, an LSTM language
model, a small GPT and a GAN with two optimizers (`SHAPES`). Two more train differently and only
serve as clean runs of the detection benchmark (`EXTRA`): REINFORCE, whose loss grows with the
returns as the policy learns, and LBFGS, which steps through a closure.

`build(name, fault)` returns the models, the optimizers, a scheduler (or None), a `step(k)`
function that runs training step k, the model an evaluation would use and a forward pass of it
on a held batch (`validate`). A `Fault` plants what the step function itself must do wrong; the
detection benchmark adds the faults that live outside the step (eval() left on, validation in
train mode) around it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class Fault:
    """What the step function gets wrong; the defaults are a correct run."""

    lr_scale: float = 1.0  # the learning rate times this, from the start
    zero_grad: bool = True  # False: the gradient reset is missing
    nan_at: int | None = None  # the step whose input batch is all NaN (float inputs only)
    keep_outputs: bool = False  # every step's model output appended to a list, graph and all


CLEAN = Fault()


class Shape(NamedTuple):
    models: list[nn.Module]
    optimizers: list[torch.optim.Optimizer]
    scheduler: Any
    step: Callable[[int], None]
    evaluated: nn.Module  # the model an evaluation runs (a GAN's generator)
    validate: Callable[[], Any]  # one forward pass of it on a held batch
    float_inputs: bool = True  # whether a NaN input batch can be planted


def _batches(n: int, make: Callable[[torch.Generator], Any]) -> list[Any]:
    g = torch.Generator().manual_seed(0)
    return [make(g) for _ in range(n)]


def _poisoned(x: torch.Tensor, k: int, fault: Fault) -> torch.Tensor:
    return torch.full_like(x, math.nan) if k == fault.nan_at else x


def _classifier_step(model: nn.Module, opt: torch.optim.Optimizer, data: list[Any], fault: Fault,
                     sched: Any = None) -> Callable[[int], None]:
    """The classic supervised step: reset, forward, cross-entropy, backward, step (and schedule)."""
    kept = []

    def step(k: int) -> None:
        x, y = data[k % len(data)]
        x = _poisoned(x, k, fault)
        if fault.zero_grad:
            opt.zero_grad(set_to_none=True)
        output = model(x)
        if fault.keep_outputs:
            kept.append(output)
        loss = F.cross_entropy(output, y)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
    return step


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Dropout(0.2),
                                 nn.Linear(512, 512), nn.ReLU(), nn.Dropout(0.2), nn.Linear(512, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def mlp(fault: Fault) -> Shape:
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3 * fault.lr_scale)
    data = _batches(8, lambda g: (torch.rand(64, 1, 28, 28, generator=g), torch.randint(0, 10, (64,), generator=g)))
    step = _classifier_step(model, opt, data, fault)
    return Shape([model], [opt], None, step, model, lambda: model(data[0][0]))


class VAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.relu(self.fc1(x))
        return self.fc21(h), self.fc22(h)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mu, logvar = self.encode(x.view(-1, 784))
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


def vae(fault: Fault) -> Shape:
    model = VAE()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3 * fault.lr_scale)
    data = _batches(8, lambda g: torch.rand(128, 1, 28, 28, generator=g))
    kept = []

    def step(k: int) -> None:
        x = _poisoned(data[k % len(data)], k, fault)
        if fault.zero_grad:
            opt.zero_grad()
        recon, mu, logvar = model(x)
        if fault.keep_outputs:
            kept.append(recon)
        bce = F.binary_cross_entropy(recon, x.view(-1, 784), reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        loss = bce + kld
        loss.backward()
        opt.step()
    return Shape([model], [opt], None, step, model, lambda: model(data[0]))


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(32 * 16, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def cnn(fault: Fault) -> Shape:
    model = SmallCNN()
    lr = 0.05 * fault.lr_scale
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=100_000)
    data = _batches(8, lambda g: (torch.randn(32, 3, 32, 32, generator=g), torch.randint(0, 10, (32,), generator=g)))
    step = _classifier_step(model, opt, data, fault, sched)
    return Shape([model], [opt], sched, step, model, lambda: model(data[0][0]))


class LSTMLM(nn.Module):
    def __init__(self, vocab: int = 2000, width: int = 128) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.encoder = nn.Embedding(vocab, width)
        self.rnn = nn.LSTM(width, width, 2, dropout=0.2)
        self.decoder = nn.Linear(width, vocab)

    def forward(self, x: torch.Tensor, hidden: Any = None) -> tuple[torch.Tensor, Any]:
        out, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
        return self.decoder(self.drop(out)), hidden


def lstm(fault: Fault) -> Shape:
    model = LSTMLM()
    opt = torch.optim.SGD(model.parameters(), lr=1.0 * fault.lr_scale)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1000, gamma=0.5)
    data = _batches(8, lambda g: torch.randint(0, 2000, (21, 16), generator=g))
    state: dict[str, Any] = {"hidden": None}
    kept = []

    def step(k: int) -> None:
        tokens = data[k % len(data)]
        hidden = state["hidden"]
        if hidden is not None:
            hidden = tuple(h.detach() for h in hidden)
        if fault.zero_grad:
            model.zero_grad()
        out, state["hidden"] = model(tokens[:-1], hidden)
        if fault.keep_outputs:
            kept.append(out)
        loss = F.cross_entropy(out.view(-1, out.size(-1)), tokens[1:].reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        if (k + 1) % 1000 == 0:
            sched.step()
    return Shape([model], [opt], sched, step, model, lambda: model(data[0][:-1]), float_inputs=False)


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Dropout(0.1))
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 512, width: int = 128, layers: int = 2, heads: int = 4, block: int = 64) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(block, width)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(idx.size(1))
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def gpt(fault: Fault) -> Shape:
    model = GPT()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=6e-4 * fault.lr_scale, betas=(0.9, 0.95))
    warmup, total = 100, 100_000

    def lr_lambda(it: int) -> float:
        if it < warmup:
            return (it + 1) / warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, (it - warmup) / (total - warmup))))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    data = _batches(8, lambda g: torch.randint(0, 512, (8, 65), generator=g))
    kept = []

    def step(k: int) -> None:
        tokens = data[k % len(data)]
        logits, loss = model(tokens[:, :-1], tokens[:, 1:])
        if fault.keep_outputs:
            kept.append(logits)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if fault.zero_grad:
            opt.zero_grad(set_to_none=True)
    return Shape([model], [opt], sched, step, model, lambda: model(data[0][:, :-1], data[0][:, 1:]),
                 float_inputs=False)


def gan(fault: Fault) -> Shape:
    nz = 32
    net_g = nn.Sequential(nn.Linear(nz, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 256),
                          nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, 784), nn.Tanh())
    net_d = nn.Sequential(nn.Linear(784, 256), nn.LeakyReLU(0.2), nn.Linear(256, 128), nn.LeakyReLU(0.2),
                          nn.Linear(128, 1))
    lr = 2e-4 * fault.lr_scale
    opt_d = torch.optim.Adam(net_d.parameters(), lr=lr, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(net_g.parameters(), lr=lr, betas=(0.5, 0.999))
    data = _batches(8, lambda g: torch.rand(64, 784, generator=g) * 2 - 1)
    ones, zeros = torch.ones(64, 1), torch.zeros(64, 1)
    fixed_noise = torch.randn(64, nz, generator=torch.Generator().manual_seed(1))
    kept = []

    def step(k: int) -> None:
        real = _poisoned(data[k % len(data)], k, fault)
        if fault.zero_grad:
            net_d.zero_grad()
        err_real = F.binary_cross_entropy_with_logits(net_d(real), ones)
        err_real.backward()
        fake = net_g(torch.randn(64, nz))
        if fault.keep_outputs:
            kept.append(fake)
        err_fake = F.binary_cross_entropy_with_logits(net_d(fake.detach()), zeros)
        err_fake.backward()
        opt_d.step()
        if fault.zero_grad:
            net_g.zero_grad()
        err_g = F.binary_cross_entropy_with_logits(net_d(fake), ones)
        err_g.backward()
        opt_g.step()
    return Shape([net_d, net_g], [opt_d, opt_g], None, step, net_g, lambda: net_g(fixed_noise))


SHAPES: dict[str, Callable[[Fault], Shape]] = {"mlp": mlp, "vae": vae, "cnn": cnn, "lstm": lstm, "gpt": gpt, "gan": gan}


# Clean runs only -------------------------------------------------------------------------------

class Policy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softmax(self.affine2(F.relu(self.dropout(self.affine1(x)))), dim=1)


def reinforce(fault: Fault) -> Shape:
    """Policy gradient on a corridor that lasts while the agent picks the side the first feature
    points to: episodes, and with them the returns and the loss, grow as the policy learns."""
    policy = Policy()
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3 * fault.lr_scale)
    g = torch.Generator().manual_seed(0)
    gamma, longest = 0.99, 200

    def step(k: int) -> None:
        log_probs = []
        for _ in range(longest):
            state = torch.randn(1, 4, generator=g)
            probs = policy(state)
            action = torch.multinomial(probs, 1, generator=g).item()
            log_probs.append(torch.log(probs[0, action]))
            if action != 1:  # the corridor goes on while the agent keeps right
                break
        returns, future = [], 0.0
        for _ in log_probs:  # a reward of 1 per step survived
            future = 1.0 + gamma * future
            returns.insert(0, future)
        loss = torch.stack([-lp * r for lp, r in zip(log_probs, returns)]).sum()
        if fault.zero_grad:
            opt.zero_grad()
        loss.backward()
        opt.step()
    probe_state = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    return Shape([policy], [opt], None, step, policy, lambda: policy(probe_state), float_inputs=False)


def lbfgs(fault: Fault) -> Shape:
    """A two-layer LSTM fitted to sine waves with LBFGS, which steps through a closure."""

    class Sequence(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm1 = nn.LSTMCell(1, 32)
            self.lstm2 = nn.LSTMCell(32, 32)
            self.linear = nn.Linear(32, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h1 = c1 = torch.zeros(x.size(0), 32)
            h2 = c2 = torch.zeros(x.size(0), 32)
            outputs = []
            for t in range(x.size(1)):
                h1, c1 = self.lstm1(x[:, t:t + 1], (h1, c1))
                h2, c2 = self.lstm2(h1, (h2, c2))
                outputs.append(self.linear(h2))
            return torch.cat(outputs, dim=1)

    model = Sequence()
    opt = torch.optim.LBFGS(model.parameters(), lr=1.0 * fault.lr_scale, max_iter=4, line_search_fn="strong_wolfe")
    t = torch.arange(21, dtype=torch.float32)
    shift = torch.randint(-20, 20, (16, 1), generator=torch.Generator().manual_seed(0))
    wave = torch.sin((t + shift) / 4.0)
    x, y = wave[:, :-1], wave[:, 1:]

    def step(k: int) -> None:
        def closure() -> torch.Tensor:
            if fault.zero_grad:
                opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            return loss
        opt.step(closure)
    return Shape([model], [opt], None, step, model, lambda: model(x), float_inputs=False)


EXTRA: dict[str, Callable[[Fault], Shape]] = {"reinforce": reinforce, "lbfgs": lbfgs}


def build(name: str, fault: Fault = CLEAN) -> Shape:
    torch.manual_seed(0)
    return {**SHAPES, **EXTRA}[name](fault)
