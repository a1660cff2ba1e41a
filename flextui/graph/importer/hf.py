"""Hugging Face ``transformers`` models as PyTorch models flextui imports
(``graph.hf_models`` names them): the config built with the options' sizes (or read
from the user's config file), the model made from it with random weights (never a
download), ``use_cache`` off, and a forward that takes the task's inputs in order and
returns the model's own training loss (``Task``)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import torch

from flextui.errors import ModelError
from flextui.graph.hf_models import FAMILIES, Task
from flextui.graph.importer.float64 import KeepFloat64
from flextui.graph.importer.source import TorchModel
from flextui.graph.model_source import ModelSource
from flextui.graph.usercode import user_code

#: the class-name endings of the models each task takes from a config file
TASK_CLASSES = {"ForCausalLM": Task.CAUSAL_LM, "LMHeadModel": Task.CAUSAL_LM,
                "ForSequenceClassification": Task.SEQUENCE_CLASSIFICATION,
                "ForConditionalGeneration": Task.SEQ2SEQ,
                "ForImageClassification": Task.IMAGE_CLASSIFICATION}
#: the model a config file's model_type gets when it names no architecture
DEFAULT_CLASSES = {f.config.removesuffix("Config").lower(): f.model for f in FAMILIES.values()}


def transformers_module() -> Any:
    """``transformers``, or ModelError saying how to install it."""
    try:
        import transformers
    except Exception as exc:  # noqa: BLE001 (missing, or a release that does not fit torch)
        raise ModelError(f"Hugging Face models (hf:...) need transformers, which cannot be "
                         f"imported here ({type(exc).__name__}: {str(exc)[:160]}); "
                         "pip install transformers") from None
    return transformers


def hf_model(source: ModelSource, options: dict[str, Any]) -> TorchModel:
    """The model ``source`` names (``hf:NAME`` or ``hf:CONFIG.json``) with ``options``
    (complete: the defaults merged, as the library passes them)."""
    transformers = transformers_module()
    with user_code(f"model {source.text}: its config"):
        config, model_class = _config(transformers, source, options)
    task = next((t for end, t in TASK_CLASSES.items() if model_class.__name__.endswith(end)),
                None)
    if task is None:
        raise ModelError(f"model {source.text}: {model_class.__name__} is not a model flextui "
                         f"trains (it takes classes ending in {', '.join(TASK_CLASSES)})")
    config.use_cache = False
    wrapper = _positional(model_class, task)
    inputs = _inputs(task, config, options)
    family = FAMILIES.get(source.name)
    description = family.description if family else f"{model_class.__name__} from {source.name}"
    return TorchModel(source.label, lambda: wrapper(config), inputs, description,
                      int(options["batch_size"]))


def _config(transformers: Any, source: ModelSource, options: dict[str, Any]) -> tuple[Any, Any]:
    """The config and the model class."""
    family = FAMILIES.get(source.name)
    if family is not None:
        sizes = {k: options[k] for k in family.sizes}
        kind = getattr(transformers, family.config)
        vocab = sizes.get("vocab_size", 1 << 62)
        tokens = {k: 0 for k, v in vars(kind()).items()
                  if k.endswith("token_id") and isinstance(v, int) and v >= vocab}
        config = kind(**sizes, **tokens)   # special tokens within a small vocabulary
        if family.task == Task.SEQ2SEQ:
            config.decoder_start_token_id = config.pad_token_id or 0
        for key, value in vars(config).items():
            if ("dropout" in key or "pdrop" in key) and isinstance(value, float):
                setattr(config, key, float(options["dropout"]))
        return config, getattr(transformers, family.model)
    data = json.loads(source.code)
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise ModelError(f"model {source.text}: a config file is a JSON object with a "
                         "model_type (a Hugging Face config.json)")
    config = transformers.AutoConfig.for_model(**data)
    names = [*(data.get("architectures") or []), DEFAULT_CLASSES.get(data["model_type"], "")]
    found = next((getattr(transformers, n) for n in names if n and hasattr(transformers, n)),
                 None)
    if found is None:
        raise ModelError(f"model {source.text}: its config names no model class of "
                         "transformers (give \"architectures\": [\"...ForCausalLM\"])")
    return config, found


def _inputs(task: Task, config: Any, options: dict[str, Any]) -> Callable[[int], Any]:
    """Example inputs at a batch size, in the order the wrapper's forward takes them."""
    seq, target = int(options.get("seq_len", 32)), int(options.get("target_len", 16))
    vocab = int(getattr(config, "vocab_size", 2))
    limit = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings",
                                                           None)
    if task != Task.IMAGE_CLASSIFICATION and limit is not None and seq > limit:
        raise ModelError(f"seq_len={seq} is longer than the model's {limit} positions; give "
                         "a shorter seq_len or more positions")

    def ids(batch: int, length: int) -> torch.Tensor:
        return torch.randint(0, vocab, (batch, length))

    def make(batch: int) -> tuple[torch.Tensor, ...]:
        if task == Task.CAUSAL_LM:
            return ids(batch, seq), ids(batch, seq)
        if task == Task.SEQUENCE_CLASSIFICATION:
            return ids(batch, seq), torch.randint(0, config.num_labels, (batch,))
        if task == Task.SEQ2SEQ:
            return ids(batch, seq), ids(batch, target), ids(batch, target)
        size = config.image_size
        return (torch.randn(batch, config.num_channels, size, size),
                torch.randint(0, config.num_labels, (batch,)))
    return make


def _positional(model_class: Any, task: Task) -> Any:
    """``model_class`` with a forward that takes the task's inputs by position and
    returns the model's loss alone (what flextui trains); in float64 it stays in
    float64 (``KeepFloat64``)."""

    def loss(self: Any, **inputs: torch.Tensor) -> torch.Tensor:
        with KeepFloat64() if self.dtype == torch.float64 else contextlib.nullcontext():
            found: torch.Tensor = model_class.forward(self, **inputs).loss
        return found

    def text(self: Any, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return loss(self, input_ids=input_ids, labels=labels)

    def seq2seq(self: Any, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor,
                labels: torch.Tensor) -> torch.Tensor:
        return loss(self, input_ids=input_ids, decoder_input_ids=decoder_input_ids,
                    labels=labels)

    def image(self: Any, pixel_values: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return loss(self, pixel_values=pixel_values, labels=labels)

    forward = {Task.SEQ2SEQ: seq2seq, Task.IMAGE_CLASSIFICATION: image}.get(task, text)
    return type(model_class.__name__, (model_class,), {"forward": forward,
                                                       "__module__": __name__})
