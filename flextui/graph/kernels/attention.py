"""Kernels of the attention ops: additive (Bahdanau) and multi-head."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from flextui.graph.kernels.base import Kernel, register


@register
class AdditiveAttentionKernel(Kernel):
    """score_t = v . tanh(W_query q + W_keys k_t), softmax over t, context = sum_t a_t
    k_t, output tanh(W_out [context; q]). Every block computes the scores of its
    samples in full (the score weights are replicated) and its rows of W_out."""

    name = "attention"

    def forward(self, op, region, inputs, params, seed):
        query, keys = inputs
        w_query, w_keys, v, w_out = params
        scores = torch.tanh(F.linear(query, w_query).unsqueeze(1) + F.linear(keys, w_keys)) @ v
        context = (torch.softmax(scores, dim=1).unsqueeze(1) @ keys).squeeze(1)
        return [torch.tanh(F.linear(torch.cat([context, query], dim=1), w_out))]


@register
class MultiHeadAttentionKernel(Kernel):
    """Scaled dot-product attention per head (scale 1/sqrt(head dim) unless the op
    gives one); causal by default (``attrs["causal"]``, as the builder sets it); with
    ``buckets`` the relative position bias of each query's and key's distance added. A
    block holds its query positions and whole heads of q, and every key position of k
    and v for those heads; the causal mask and the bias use global positions, so query
    i sees keys 0..i in any block."""

    name = "multihead_attention"

    def forward(self, op, region, inputs, params, seed):
        q, k, v = inputs
        head_dim = op.inputs[0].shape[2] // op.attrs["heads"]

        def heads(t: torch.Tensor) -> torch.Tensor:  # [B, S, h*d] -> [B, h, S, d]
            return t.unflatten(2, (-1, head_dim)).transpose(1, 2)

        (first, stop), keys = region[1], k.shape[1]
        rows = torch.arange(first, stop, device=q.device)
        mask = None
        if "buckets" in op.attrs:
            distance = torch.arange(keys, device=q.device) - rows[:, None] \
                + op.inputs[0].shape[1] - 1
            ids = torch.tensor(op.attrs["buckets"], device=q.device)[distance]
            mask = F.embedding(ids, params[0]).permute(2, 0, 1)     # [h, rows, keys]
        if op.attrs.get("causal", True):
            seen = torch.arange(keys, device=q.device) <= rows[:, None]
            mask = seen if mask is None else mask.masked_fill(~seen, -math.inf)
        out = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), attn_mask=mask,
                                             scale=op.attrs.get("scale"))
        return [out.transpose(1, 2).flatten(2)]


@register
class RotaryKernel(Kernel):
    """The block's positions (global: its range of the sequence) and whole heads,
    rotated as Llama's ``apply_rotary_pos_emb`` does with the tables its rotary
    embedding makes (angles ``position * inv_freq`` in the block's dtype)."""

    name = "rotary"

    def forward(self, op, region, inputs, params, seed):
        (x,) = inputs
        first, stop = region[1]
        inv_freq = torch.tensor(op.attrs["inv_freq"], dtype=x.dtype, device=x.device)
        angles = torch.arange(first, stop, device=x.device).to(x.dtype)[:, None] * inv_freq
        angles = torch.cat([angles, angles], dim=-1)[:, None, :]      # [S, 1, head dim]
        scaling = float(op.attrs.get("scaling", 1.0))
        cos, sin = angles.cos() * scaling, angles.sin() * scaling
        heads = x.unflatten(2, (-1, 2 * len(op.attrs["inv_freq"])))   # [B, S, h, d]
        low, high = heads.chunk(2, dim=-1)
        turned = torch.cat([-high, low], dim=-1)
        return [(heads * cos + turned * sin).flatten(2)]
