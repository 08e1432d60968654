# What the Python blocks of README.md and docs/pytorch.md take as given, for
# tests/test_docs.sh: a small model, its data, a loss, an evaluation and a saved
# model.pt. The runner puts this before each block, and `worker = dt.Worker(model)`
# too unless the block makes its own; after the block it finishes the worker if
# the block did not.
import contextlib  # noqa: F401  (the gradient accumulation block)
import math  # noqa: F401  (the schedule block)

import torch
from torch.utils.data import DataLoader, TensorDataset

import dcps.torch as dt  # noqa: F401

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
train_dataset = train = TensorDataset(torch.randn(128, 8), torch.randint(0, 4, (128,)))
loader = DataLoader(train, batch_size=32)
loss_fn = torch.nn.functional.cross_entropy


def my_eval(m):
    """Accuracy on the training data: enough for a final: line."""
    x, y = train.tensors
    with torch.no_grad():
        return (m(x).argmax(1) == y).float().mean().item()


torch.save(model.state_dict(), "model.pt")
