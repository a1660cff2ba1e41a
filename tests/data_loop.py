"""The plain PyTorch loop a launch on a model file's dataset() must equal: the model
file run as a module, its module built under torch.manual_seed(seed) and trained in
float64 with torch.optim.SGD on the items of each step in the documented order (per
epoch in order, or torch.randperm seeded seed + epoch), the cross-entropy of its
logits and the items' labels. Nothing of flextui's runs here."""

import runpy

import torch
import torch.nn.functional as F


def plain_losses(path, steps, batch, *, seed=0, shuffle=False, lr=0.01, momentum=0.9):
    namespace = runpy.run_path(str(path))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = namespace["model"]()
    net = net.double()
    sgd = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    data = namespace["dataset"]("train")
    per_epoch = len(data) // batch
    losses = []
    for step in range(steps):
        epoch, k = divmod(step, per_epoch)
        order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed + epoch)) \
            if shuffle else torch.arange(len(data))
        items = [data[int(i)] for i in order[k * batch:(k + 1) * batch]]
        x = torch.stack([torch.as_tensor(item[0]) for item in items]).double()
        y = torch.tensor([int(item[1]) for item in items])
        loss = F.cross_entropy(net(x), y)
        sgd.zero_grad()
        loss.backward()
        sgd.step()
        losses.append(float(loss.detach()))
    return losses
