"""Tiny language models (and a wrapper) that tests hand to the function under test.

They are test fixtures, not secrets: the learner's function receives them as its `model`. They
live in the kit rather than in the hidden test file so that the batch grader's sandbox can
import them and rebuild a model there from its class name, the keyword arguments it was made
with (`init_kwargs`) and its weights (see ``grader/kit_types.py``). What a model
remembers between calls (the lengths it has seen, how often it was called) does not travel:
each sandboxed call gets a fresh copy, which is how the tests use them.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

VOCAB = 8


def seeded(*shape: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


class ToyLM(torch.nn.Module):
    """Base of the toy models: keeps the constructor's keyword arguments to rebuild from."""

    def __init__(self, **init_kwargs):
        super().__init__()
        self.init_kwargs = init_kwargs


class PositionalBigramLM(ToyLM):
    """Next-token logits from the current token and its absolute position (no KV cache).

    Because of the position term, feeding only the newest token without a cache gives the
    wrong logits: every call must see the whole sequence so far. The model checks that itself
    and raises with the reason, so the check holds wherever the model runs.
    """

    def __init__(self, seed: int = 0, vocab: int = VOCAB, max_len: int = 64):
        super().__init__(seed=seed, vocab=vocab, max_len=max_len)
        self.bigram = torch.nn.Parameter(seeded(vocab, vocab, seed=seed, scale=1.5))
        self.position = torch.nn.Parameter(seeded(max_len, vocab, seed=seed + 1, scale=1.5))
        self.prompt_length = None  # the first call's length: a call of this length starts a run
        self.length = None  # the last call's length

    def logits(self, input_ids, start=0):
        return self.bigram[input_ids] + self.position[start : start + input_ids.shape[1]]

    def check_attention_mask(self, attention_mask, shape):
        if attention_mask is not None and tuple(attention_mask.shape) != tuple(shape):
            raise RuntimeError(
                f"attention_mask should cover every token the model attends to, shape "
                f"{tuple(shape)}, got {tuple(attention_mask.shape)}"
            )

    def forward(self, input_ids, attention_mask=None):
        length = input_ids.shape[1]
        if self.prompt_length is None or length == self.prompt_length:
            self.prompt_length = length
        elif length != self.length + 1:
            raise RuntimeError(
                "a model without a KV cache must get the whole sequence so far at every step: "
                f"expected {self.length + 1} tokens, got {length}"
            )
        self.length = length
        self.check_attention_mask(attention_mask, input_ids.shape)
        return self.logits(input_ids)


class CachedPositionalBigramLM(PositionalBigramLM):
    """The same model behind a Hugging Face style KV cache (the cache holds the past tokens).

    It raises when it is not used as the convention says: the prompt once, without a cache,
    then only the newest token with the cache the previous call returned.
    """

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=False):
        if past_key_values is None:
            if self.prompt_length is not None and input_ids.shape[1] != self.prompt_length:
                raise RuntimeError(
                    "this model keeps a KV cache: after the prompt, pass the past_key_values of "
                    f"the previous call and only the newest token (got {input_ids.shape[1]} "
                    "tokens and no cache)"
                )
            self.prompt_length = input_ids.shape[1]
            past = input_ids[:, :0]
        else:
            past = past_key_values[0]
            if input_ids.shape[1] != 1:
                raise RuntimeError(
                    "with a KV cache, give the model only the newest token, shape (N, 1), "
                    f"got {tuple(input_ids.shape)}"
                )
        total = past.shape[1] + input_ids.shape[1]
        self.check_attention_mask(attention_mask, (input_ids.shape[0], total))
        logits = self.logits(input_ids, start=past.shape[1])
        cache = (torch.cat([past, input_ids], dim=1),) if use_cache else None
        return SimpleNamespace(logits=logits, past_key_values=cache)


class LogitsOutputLM(PositionalBigramLM):
    """Returns an object with `.logits` (as Hugging Face models do) and takes no cache."""

    def forward(self, input_ids, attention_mask=None):
        return SimpleNamespace(logits=super().forward(input_ids, attention_mask))


class ConstantLM(ToyLM):
    """The same next-token distribution `probs` after every context."""

    def __init__(self, probs: list[float]):
        super().__init__(probs=list(probs))
        self.table = torch.nn.Parameter(torch.log(torch.tensor(probs, dtype=torch.float32)))

    def forward(self, input_ids, attention_mask=None):
        return self.table.expand(*input_ids.shape, -1)


class CounterLM(ToyLM):
    """Almost surely emits (last token + 1) mod vocab: a script whose EOS steps are known.

    With `max_calls`, it raises when called more often than that.
    """

    def __init__(self, vocab: int = 10, margin: float = 40.0, max_calls: int | None = None):
        super().__init__(vocab=vocab, margin=margin, max_calls=max_calls)
        self.table = torch.nn.Parameter(margin * torch.roll(torch.eye(vocab), 1, dims=1))
        self.max_calls = max_calls
        self.calls = 0

    def forward(self, input_ids, attention_mask=None):
        self.calls += 1
        if self.max_calls is not None and self.calls > self.max_calls:
            raise RuntimeError(
                f"the model was called a {self.calls}th time, but every completion had ended "
                f"after {self.max_calls} steps: stop generating once all have ended"
            )
        return self.table[input_ids]


class NoEos(ToyLM):
    """Wraps a causal LM (logits in `.logits`) so that `eos_id` is never sampled.

    The capstone's tests use it to get completions that are all truncated.
    """

    def __init__(self, model: torch.nn.Module, eos_id: int):
        super().__init__(model=model, eos_id=eos_id)
        self.model, self.eos_id = model, eos_id

    def forward(self, input_ids, attention_mask=None):
        logits = self.model(input_ids, attention_mask=attention_mask).logits.clone()
        logits[..., self.eos_id] = float("-inf")
        return logits
