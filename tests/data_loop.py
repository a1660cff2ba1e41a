"""The plain PyTorch loop a launch on a model file's dataset() must equal: the model
file run as a module, its module built under torch.manual_seed(seed) and trained in
float64 with torch.optim.SGD (or the optimizer and schedule given) on the items of each step in the documented order (per
epoch in order, or torch.randperm seeded seed + epoch), the cross-entropy of its
logits and the items' labels; with ``eval_every`` N, after every N-th step the mean
loss over the whole batches of dataset("val"), in order, without gradients. Nothing of
flextui's runs here."""

import runpy

import torch
import torch.nn.functional as F


def batch_of(items):
    """Items stacked: the images in float64, the labels."""
    x = torch.stack([torch.as_tensor(item[0]) for item in items]).double()
    return x, torch.tensor([int(item[1]) for item in items])


def plain_losses(path, steps, batch, *, seed=0, shuffle=False, lr=0.01, momentum=0.9,
                 eval_every=0, optimizer=None, schedule=None):
    """Each step's loss, and with ``eval_every`` the validation losses by step (from 1);
    ``optimizer`` makes the torch optimizer of the parameters (default SGD with ``lr``
    and ``momentum``), ``schedule`` is a LambdaLR's lambda (default none)."""
    namespace = runpy.run_path(str(path))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = namespace["model"]()
    net = net.double()
    sgd = optimizer(net.parameters()) if optimizer is not None else \
        torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    rates = torch.optim.lr_scheduler.LambdaLR(sgd, schedule) if schedule is not None else None
    data, val = namespace["dataset"]("train"), namespace["dataset"]("val")
    per_epoch = len(data) // batch
    losses, evaluations = [], {}
    for step in range(steps):
        epoch, k = divmod(step, per_epoch)
        order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed + epoch)) \
            if shuffle else torch.arange(len(data))
        x, y = batch_of([data[int(i)] for i in order[k * batch:(k + 1) * batch]])
        loss = F.cross_entropy(net(x), y)
        sgd.zero_grad()
        loss.backward()
        sgd.step()
        if rates is not None:
            rates.step()
        losses.append(float(loss.detach()))
        if eval_every and (step + 1) % eval_every == 0:
            with torch.no_grad():
                val_losses = [float(F.cross_entropy(net(x), y)) for x, y in (
                    batch_of([val[i] for i in range(j * batch, (j + 1) * batch)])
                    for j in range(len(val) // batch))]
            evaluations[step + 1] = sum(val_losses) / len(val_losses)
    return (losses, evaluations) if eval_every else losses
