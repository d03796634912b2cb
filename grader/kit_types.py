"""The kit's objects that may cross the sandbox by class name: models and records.

Both sides of the sandbox use this registry. A model the tests hand to a student's function
travels as its class name, the plain arguments it is rebuilt from and its weights; the child
rebuilds it with the class named here and nothing else. A record (a registered dataclass)
travels as its fields and is rebuilt as its real class on both sides, so a test can call its
methods (``rollout.split(...)``) on what the student returned; an unregistered dataclass comes
back as a SimpleNamespace of its fields.

Classes are named by module, and modules are imported only when a value needs them: numpy
problems never import torch. A child sees only the modules of its own problem (see
``SANDBOX_REFERENCE``), so a class the child cannot import cannot be named there.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import asdict, fields

# class name -> module defining it
MODELS = {
    "PositionalBigramLM": "grader.toy_models",
    "CachedPositionalBigramLM": "grader.toy_models",
    "LogitsOutputLM": "grader.toy_models",
    "ConstantLM": "grader.toy_models",
    "CounterLM": "grader.toy_models",
    "NoEos": "grader.toy_models",
    "GPT": "reference.gpt",
}
RECORDS = {
    "GRPOConfig": "reference.grpo_config",
    "Rollout": "reference.grpo_config",
}
# The reference modules a problem's child sees (read-only): what its starter imports, and what
# those import in turn, plus reference.gpt to rebuild the models its tests hand over. Every
# other child sees no file of reference/.
SANDBOX_REFERENCE = {
    "grpo_trainer": (
        "__init__",
        "gpt",
        "grpo_config",
        "sample_group",
        "completion_mask",
        "group_advantages",
        "token_logprobs",
        "grpo_loss_torch",
        "masked_token_loss",
        "kl_estimators",
    ),
}


def _loaded(name: str, registry: dict[str, str]) -> type | None:
    """The registered class `name` if its module is already imported (never imports it)."""
    module = sys.modules.get(registry.get(name, ""))
    found = getattr(module, name, None)
    return found if isinstance(found, type) else None


def _imported(name: str, registry: dict[str, str]) -> type:
    if name not in registry:
        raise LookupError(f"{name!r} is not a class the sandbox rebuilds")
    found = getattr(importlib.import_module(registry[name]), name, None)
    if not isinstance(found, type):
        raise LookupError(f"{registry[name]} defines no class {name}")
    return found


def model_name(value: object) -> str | None:
    """The registered name of `value`'s exact class, or None."""
    name = type(value).__name__
    return name if _loaded(name, MODELS) is type(value) else None


def record_name(value: object) -> str | None:
    name = type(value).__name__
    return name if _loaded(name, RECORDS) is type(value) else None


def record_class(name: str) -> type:
    return _imported(name, RECORDS)


def record_fields(value: object) -> list[str]:
    """A registered record's field names, in definition order (both sides walk them so)."""
    return [f.name for f in fields(value)]


def describe_model(model) -> dict:
    """The plain arguments a registered model is rebuilt from (may hold other models)."""
    if type(model).__name__ == "GPT":
        return {"config": asdict(model.config)}
    return dict(model.init_kwargs)


def build_model(name: str, kwargs: dict):
    """A new registered model from `describe_model`'s arguments (weights are loaded after)."""
    model_class = _imported(name, MODELS)
    if name == "GPT":
        config_class = importlib.import_module("reference.gpt").GPTConfig
        return model_class(config_class(**kwargs["config"]))
    return model_class(**kwargs)
