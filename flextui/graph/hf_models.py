"""Hugging Face ``transformers`` models flextui builds by name (``hf:gpt2``, ...) or
from a config file (``hf:CONFIG.json``): what each is, its training task, and its
options (the config's sizes, small by default, and the batch's). Data only, so the
list shows without torch or transformers; ``graph.importer.hf`` builds them."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

HF_PREFIX = "hf:"


class Task(StrEnum):
    """What a Hugging Face model is trained for, which decides its inputs and loss."""

    CAUSAL_LM = "causal-lm"                    # next-token loss over input_ids
    SEQUENCE_CLASSIFICATION = "sequence-classification"   # one label a sequence
    SEQ2SEQ = "seq2seq"                        # decoder inputs and labels, token loss
    IMAGE_CLASSIFICATION = "image-classification"         # pixel_values, one label


@dataclass(frozen=True)
class Family:
    """A model by name: its config and model classes in transformers, its task, the
    config's sizes it is built with by default (each an option), and a line about it."""

    config: str
    model: str
    task: Task
    sizes: dict[str, int]
    description: str
    #: options that are not the config's: the inputs' sizes
    inputs: dict[str, int] = field(default_factory=dict)


TEXT = {"seq_len": 32}
FAMILIES = {
    "gpt2": Family("GPT2Config", "GPT2LMHeadModel", Task.CAUSAL_LM,
                   {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 512,
                    "n_positions": 128},
                   "GPT-2 (transformers, random weights), causal LM", TEXT),
    "llama": Family("LlamaConfig", "LlamaForCausalLM", Task.CAUSAL_LM,
                    {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                     "num_key_value_heads": 4, "intermediate_size": 172, "vocab_size": 512,
                     "max_position_embeddings": 128},
                    "Llama (transformers, random weights: RMSNorm, rotary positions, "
                    "SiLU-gated MLP), causal LM", TEXT),
    "bert": Family("BertConfig", "BertForSequenceClassification",
                   Task.SEQUENCE_CLASSIFICATION,
                   {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                    "intermediate_size": 256, "vocab_size": 512,
                    "max_position_embeddings": 128, "num_labels": 2},
                   "BERT (transformers, random weights), sequence classification", TEXT),
    "t5": Family("T5Config", "T5ForConditionalGeneration", Task.SEQ2SEQ,
                 {"num_layers": 2, "num_decoder_layers": 2, "d_model": 64, "num_heads": 4,
                  "d_kv": 16, "d_ff": 256, "vocab_size": 512},
                 "T5 (transformers, random weights), sequence to sequence",
                 {"seq_len": 32, "target_len": 16}),
    "vit": Family("ViTConfig", "ViTForImageClassification", Task.IMAGE_CLASSIFICATION,
                  {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                   "intermediate_size": 256, "image_size": 32, "patch_size": 8,
                   "num_labels": 10},
                  "ViT (transformers, random weights), image classification"),
}
BATCH_SIZE = 8
#: options of a model from a config file (its sizes are the file's)
CONFIG_FILE_OPTIONS: dict[str, Any] = {"batch_size": BATCH_SIZE, "seq_len": 32,
                                       "target_len": 16, "opaque": False}


def family_options(name: str) -> dict[str, Any]:
    """The options of ``hf:NAME`` and their defaults: the batch and inputs' sizes, the
    config's sizes, ``dropout`` (every dropout probability of the config: 0 unless
    given, so a run is deterministic) and ``opaque``."""
    family = FAMILIES[name]
    return {"batch_size": BATCH_SIZE, **family.inputs, **family.sizes, "dropout": 0.0,
            "opaque": False}
