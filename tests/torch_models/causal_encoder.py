"""A causal nn.TransformerEncoder over token embeddings (its mask a buffer, with
``is_causal=True``, as torch's docs show), a token-level loss."""

import torch
import torch.nn.functional as F
from torch import nn

BATCH_SIZE = 4
VOCAB, SEQ, WIDTH, HEADS = 50, 8, 16, 4


class CausalEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 2 * WIDTH, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ))
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens, targets):
        x = self.encoder(self.embed(tokens), mask=self.mask, is_causal=True)
        logits = self.head(x)
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def model():
    return CausalEncoder()


def example_inputs(batch_size):
    return (torch.randint(0, VOCAB, (batch_size, SEQ)),
            torch.randint(0, VOCAB, (batch_size, SEQ)))
