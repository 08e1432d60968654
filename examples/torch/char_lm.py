#!/usr/bin/env python3
"""A character-level transformer language model on Debian's fortunes, trained
through dcps shards with dcps.torch.

Run it as every worker of a job, for example 2 shards and 2 workers on this host:

    deploy/launch-local.sh examples/torch/char_lm.ini -- python3 examples/torch/char_lm.py

(deploy/quickstart.sh torch-lm does exactly that), or as one process with
torch.optim and no dcps at all, for the reference the job is measured against:

    python3 examples/torch/char_lm.py --reference examples/torch/char_lm.ini

The job file says how to train: workers, consistency model, update rule and its
settings, schedule, compression, batch size and epochs. --reference reads the same
file and trains in one process with the torch.optim rule of [optimizer] kind
(AdamW for adamw) and its settings, the same warm-up and decay
(torch.optim.lr_scheduler.LambdaLR, stepped once per update as a shard steps its
schedule once per update applied), the same parameter groups (no weight decay on
biases and norm layers), the same initial model, batch size and number of samples.

The corpus is the English fortune cookies of Debian's `fortunes` and
`fortunes-min` packages (/usr/share/games/fortunes, 43 files, 2.58 MB, almost all
ASCII): the files in the order of FILES, cut into fortunes at their "%" lines.
Every 20th fortune (the 20th, 40th, ...) is held out, about 5% of the text; the
others are the training text. Both are read as bytes (a vocabulary of 256), cut
into windows of --context + 1 bytes at a stride of --context: a sample is one
window, the model predicts each of its bytes but the first from those before it.
The held-out loss is reported in bits per character (per byte; the corpus has 94
bytes above 127 in 2.58 MB).
"""
import argparse
import configparser
import hashlib
import math
import os
import re
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

CORPUS = "/usr/share/games/fortunes"
# The fortune files of Debian 12's fortunes and fortunes-min (1:1.99.1-7.3), in
# this order. Other fortune packages install beside them; they are not read.
FILES = ("art", "ascii-art", "computers", "cookie", "debian", "definitions", "disclaimer",
         "drugs", "education", "ethnic", "food", "fortunes", "goedel", "humorists", "kids",
         "knghtbrd", "law", "linux", "linuxcookie", "literature", "love", "magic", "medicine",
         "men-women", "miscellaneous", "news", "paradoxum", "people", "perl", "pets",
         "platitudes", "politics", "pratchett", "riddles", "science", "songs-poems", "sports",
         "startrek", "tao", "translate-me", "wisdom", "work", "zippy")
HELD_OUT_EVERY = 20  # fortune i (from 0) is held out when i % 20 == 19
LN2 = math.log(2.0)


def load_corpus(directory):
    """(training text, held-out text, sha256 of the files read) as bytes: each
    fortune followed by a "%" line, as in the files."""
    missing = [f for f in FILES if not os.path.isfile(os.path.join(directory, f))]
    if missing:
        raise SystemExit(f"char_lm.py: {directory} lacks {', '.join(missing[:3])}"
                         f"{' ...' if len(missing) > 3 else ''}: install Debian's fortunes "
                         "package (apt-get install fortunes)")
    digest = hashlib.sha256()
    train, held = [], []
    i = 0
    for name in FILES:
        with open(os.path.join(directory, name), "rb") as f:
            raw = f.read()
        digest.update(raw)
        for fortune in re.split(rb"^%\n", raw, flags=re.M):
            if not fortune.strip():
                continue
            if not fortune.endswith(b"\n"):
                fortune += b"\n"
            (held if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else train).append(fortune + b"%\n")
            i += 1
    return b"".join(train), b"".join(held), digest.hexdigest()


def windows(text, context):
    """The text as a (n, context + 1) uint8 tensor of windows at a stride of context."""
    t = torch.frombuffer(bytearray(text), dtype=torch.uint8)
    n = (len(t) - 1) // context
    return t[:n * context + 1].unfold(0, context + 1, context).contiguous()


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position t sees positions 0 to t only."""

    def __init__(self, d_model, heads, context):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.register_buffer("future", torch.ones(context, context, dtype=torch.bool).triu(1),
                             persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.qkv(x).split(c, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        att = att.masked_fill(self.future[:t, :t], float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """A pre-norm transformer block: x + attention(norm(x)), then x + MLP(norm(x))."""

    def __init__(self, d_model, heads, context):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads, context)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class CharTransformer(nn.Module):
    """A decoder-only transformer over bytes: token and learned position
    embeddings, `layers` blocks, a final LayerNorm and a linear head to 256
    logits. With the defaults (4 layers, d_model 128, 4 heads, context 64)
    about 867,000 parameters."""

    def __init__(self, layers=4, d_model=128, heads=4, context=64):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")
        self.context = context
        self.tokens = nn.Embedding(256, d_model)
        self.positions = nn.Embedding(context, d_model)
        self.blocks = nn.Sequential(*(Block(d_model, heads, context) for _ in range(layers)))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 256, bias=False)
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, x):
        t = x.size(1)
        h = self.tokens(x) + self.positions.weight[:t]
        return self.head(self.norm(self.blocks(h)))


def decay_groups(model):
    """The usual parameter groups of a transformer: weight decay on the weight
    matrices and embeddings (the rule's weight_decay), none on biases and on the
    norm layers' weights and biases. The structure torch.optim takes."""
    norms = (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._BatchNorm)
    decay, no_decay = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            (no_decay if name == "bias" or isinstance(module, norms) else decay).append(p)
    return [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]


def loss_of(model, batch):
    """Mean cross-entropy (nats) of predicting each byte of the windows but the first."""
    x = batch.long()
    logits = model(x[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1))


def evaluate(model, held):
    """(mean cross-entropy in nats per character, next-character accuracy) on
    every held-out window."""
    model.eval()
    loss, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for at in range(0, len(held), 256):
            x = held[at:at + 256].long()
            logits = model(x[:, :-1])
            y = x[:, 1:]
            loss += F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1), reduction="sum").item()
            correct += (logits.argmax(-1) == y).sum().item()
            count += y.numel()
    model.train()
    return loss / count, correct / count


def sample(model, prompt, length, seed, temperature=0.8):
    """length bytes the model writes after prompt (seeded), as text."""
    g = torch.Generator().manual_seed(seed)
    x = torch.tensor([list(prompt)], dtype=torch.long)
    model.eval()
    with torch.no_grad():
        for _ in range(length):
            logits = model(x[:, -model.context:])[0, -1] / temperature
            x = torch.cat([x, torch.multinomial(logits.softmax(-1), 1, generator=g)[None]], 1)
    model.train()
    return bytes(x[0, len(prompt):].tolist()).decode("utf-8", "replace")


def report(label, updates, samples, result, t0):
    """The held-out line: label, job updates and samples so far, bits per character."""
    nats, acc = result
    print(f"heldout: {label} updates={updates} samples={samples} bpc={nats / LN2:.4f} "
          f"acc={acc:.4f} elapsed_s={time.monotonic() - t0:.1f}", flush=True)


def eval_steps(total, evals):
    """The steps (of total) after which to evaluate: evals of them, evenly spread,
    the last one excepted (the end is evaluated anyway)."""
    return {round(total * k / evals) for k in range(1, evals)} if evals > 1 else set()


# --- one process, torch.optim: the reference -----------------------------------

def job_settings(path):
    """The keys of the job file the reference needs, with dcps's defaults (those
    of torch.optim for the rules' own keys)."""
    ini = configparser.ConfigParser(inline_comment_prefixes=(";", "#"), interpolation=None)
    if not ini.read(path):
        raise SystemExit(f"char_lm.py: cannot read {path}")

    def get(section, key, default, kind=float):
        return kind(ini.get(section, key, fallback=default))

    kind = get("optimizer", "kind", "sgd", str)
    return {
        "kind": kind, "lr": get("optimizer", "lr", "0.05"),
        "momentum": get("optimizer", "momentum", "0.9"),
        "nesterov": get("optimizer", "nesterov", "false", str).lower() in ("true", "yes", "1", "on"),
        "beta1": get("optimizer", "beta1", "0.9"), "beta2": get("optimizer", "beta2", "0.999"),
        "eps": get("optimizer", "eps", "1e-10" if kind == "adagrad" else "1e-8"),
        "weight_decay": get("optimizer", "weight_decay", "0.01" if kind == "adamw" else "0"),
        "schedule": get("optimizer", "schedule", "constant", str),
        "warmup_steps": get("optimizer", "warmup_steps", "0", int),
        "total_steps": get("optimizer", "total_steps", "0", int),
        "min_lr": get("optimizer", "min_lr", "0"),
        "batch_size": get("data", "batch_size", "64", int),
        "epochs": get("data", "epochs", "1", int),
        "seed": get("job", "seed", "1", int),
        "log_every": get("worker", "log_every", "100", int),
    }


def lr_factor(cfg):
    """f(t) of the shards' schedule (docs/algorithms.md): the lr of update t (from 0)
    is lr * f(t)."""
    lr, warm, total, low = cfg["lr"], cfg["warmup_steps"], cfg["total_steps"], cfg["min_lr"]
    schedule = cfg["schedule"]
    if schedule not in ("constant", "cosine", "linear"):
        raise SystemExit(f"char_lm.py --reference: schedule {schedule} is not done here")

    def f(t):
        if t < warm:
            return (t + 1) / warm
        if schedule == "constant" or total <= warm:
            return 1.0
        c = min(t - warm, total - warm) / (total - warm)
        if schedule == "cosine":
            return (low + (lr - low) * (1 + math.cos(math.pi * c)) / 2) / lr
        return (lr + (low - lr) * c) / lr
    return f


def torch_optimizer(cfg, groups):
    kind = cfg["kind"]
    if kind in ("adam", "adamw"):
        rule = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
        return rule(groups, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"],
                    weight_decay=cfg["weight_decay"])
    if kind == "adagrad":
        return torch.optim.Adagrad(groups, lr=cfg["lr"], eps=cfg["eps"],
                                   weight_decay=cfg["weight_decay"])
    if kind in ("sgd", "momentum"):
        momentum = cfg["momentum"] if kind == "momentum" else 0.0
        return torch.optim.SGD(groups, lr=cfg["lr"], momentum=momentum,
                               nesterov=cfg["nesterov"] and momentum > 0,
                               weight_decay=cfg["weight_decay"])
    raise SystemExit(f"char_lm.py --reference: [optimizer] kind = {kind} has no torch.optim "
                     "counterpart here")


def train_reference(args, model, train, held):
    """One process: the job's rule from torch.optim, its schedule by LambdaLR,
    batches of [data] batch_size drawn without replacement for [data] epochs."""
    cfg = job_settings(args.reference)
    opt = torch_optimizer(cfg, decay_groups(model))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(cfg))
    b, steps_per_epoch = cfg["batch_size"], -(-len(train) // cfg["batch_size"])
    total = steps_per_epoch * cfg["epochs"]
    if cfg["total_steps"] and cfg["total_steps"] != total:
        print(f"char_lm.py: note: [optimizer] total_steps = {cfg['total_steps']}, this run "
              f"has {total} updates", file=sys.stderr)
    label = f"reference kind={cfg['kind']}"
    at_eval = eval_steps(total, args.evals)
    gen = torch.Generator().manual_seed(cfg["seed"])
    t0 = time.monotonic()
    step, samples, loss_sum, t_win, s_win = 0, 0, 0.0, t0, 0
    for epoch in range(1, cfg["epochs"] + 1):
        order = torch.randperm(len(train), generator=gen)
        for at in range(0, len(order), b):
            batch = train[order[at:at + b]]
            loss = loss_of(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            samples += len(batch)
            s_win += len(batch)
            loss_sum += loss.item()
            if cfg["log_every"] > 0 and step % cfg["log_every"] == 0:
                now = time.monotonic()
                print(f"reference step={step} epoch={epoch} loss={loss_sum / cfg['log_every']:.4f}"
                      f" lr={opt.param_groups[0]['lr']:.3g} samples_per_s="
                      f"{s_win / (now - t_win):.0f}", flush=True)
                loss_sum, t_win, s_win = 0.0, now, 0
            if step in at_eval:
                report(label, step, samples, evaluate(model, held), t0)
    report(label, step, samples, evaluate(model, held), t0)
    if args.sample:
        print("sample:", repr(sample(model, b"%\n", args.sample, cfg["seed"])), flush=True)
    print(f"final: reference kind={cfg['kind']} steps={step} samples={samples} "
          f"elapsed_s={time.monotonic() - t0:.1f}", flush=True)


# --- a worker of a dcps job ----------------------------------------------------

def train_dcps(args, model, train, held):
    """One worker rank: the shards apply the job's rule; this process computes
    gradients on its share of the samples (dcps.torch.shard)."""
    import dcps.torch as dt

    # job from DCPS_JOB, rank from DCPS_RANK; no weight decay on biases and norms
    worker = dt.Worker(model, param_groups=decay_groups(model))
    p = worker.workers
    steps = sum(-(-(len(train) // p + (r < len(train) % p)) // worker.batch_size)
                for r in range(p)) * worker.epochs  # the job's updates, all ranks
    own = -(-(len(train) // p + (worker.rank < len(train) % p)) // worker.batch_size) * worker.epochs
    at_eval = eval_steps(own, args.evals) if worker.rank == 0 else set()
    label = f"dcps rank={worker.rank}"
    dataset = torch.utils.data.TensorDataset(train)
    t0 = time.monotonic()
    done = 0
    for (batch,) in dt.shard(dataset):
        loss = loss_of(model, batch)
        loss.backward()
        worker.step(loss)
        done += 1
        if done in at_eval:
            worker.wait()
            # The job's updates and samples so far, as rank 0 sees them: its own times P.
            report(label, round(steps * done / own), worker.samples * p, evaluate(model, held), t0)

    def final(m):
        result = evaluate(m, held)
        report(label, steps, len(train) * worker.epochs, result, t0)
        if args.sample and worker.rank == 0:
            print("sample:", repr(sample(m, b"%\n", args.sample, worker.seed)), flush=True)
        return result
    worker.finish(evaluate=final)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", metavar="JOB",
                    help="train in one process with torch.optim, as JOB says; no dcps")
    ap.add_argument("--corpus", default=CORPUS, help="folder of the fortune files "
                    "(default: %(default)s)")
    ap.add_argument("--layers", type=int, default=4, help="transformer blocks (default: 4)")
    ap.add_argument("--d-model", type=int, default=128, help="width (default: 128)")
    ap.add_argument("--heads", type=int, default=4, help="attention heads (default: 4)")
    ap.add_argument("--context", type=int, default=64, help="bytes of context (default: 64)")
    ap.add_argument("--train-limit", type=int, default=0,
                    help="train on the first N windows only (0: all; for tests)")
    ap.add_argument("--evals", type=int, default=8,
                    help="held-out evaluations over the run, the last at the end (rank 0; "
                    "default: 8)")
    ap.add_argument("--sample", type=int, default=200,
                    help="bytes of text to write with the trained model (0: none)")
    ap.add_argument("--seed", type=int, default=1, help="torch seed of the initial model")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    text, held_text, digest = load_corpus(args.corpus)
    train, held = windows(text, args.context), windows(held_text, args.context)
    if args.train_limit:
        train = train[:args.train_limit]
    model = CharTransformer(args.layers, args.d_model, args.heads, args.context)
    n = sum(p.numel() for p in model.parameters())
    print(f"corpus: {len(text)} training and {len(held_text)} held-out bytes (sha256 "
          f"{digest[:12]}), {len(train)} training windows of {args.context + 1}; model: "
          f"{args.layers} layers, d_model {args.d_model}, {args.heads} heads, {n} parameters",
          flush=True)
    if args.reference:
        train_reference(args, model, train, held)
    else:
        train_dcps(args, model, train, held)
    return 0


if __name__ == "__main__":
    sys.exit(main())
