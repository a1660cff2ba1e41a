"""An encoder-decoder: nn.TransformerEncoder over the source, nn.TransformerDecoder
over the target (causal self-attention, ``tgt_mask`` built with ``torch.triu``, and
cross-attention over the encoder's output: another length), a token-level loss."""

import torch
import torch.nn.functional as F
from torch import nn

BATCH_SIZE = 4
VOCAB, SOURCE, TARGET, WIDTH, HEADS = 40, 10, 6, 16, 4


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(WIDTH, HEADS, 2 * WIDTH, dropout=0.0,
                                       batch_first=True), 1, enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(WIDTH, HEADS, 2 * WIDTH, dropout=0.0,
                                       batch_first=True), 2)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, source, target, labels):
        mask = torch.triu(torch.full((TARGET, TARGET), float("-inf")), diagonal=1)
        memory = self.encoder(self.embed(source))
        x = self.decoder(self.embed(target), memory, tgt_mask=mask, tgt_is_causal=True)
        return F.cross_entropy(self.head(x).view(-1, VOCAB), labels.view(-1))


def model():
    return Seq2Seq()


def example_inputs(batch_size):
    return (torch.randint(0, VOCAB, (batch_size, SOURCE)),
            torch.randint(0, VOCAB, (batch_size, TARGET)),
            torch.randint(0, VOCAB, (batch_size, TARGET)))
