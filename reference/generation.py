"""Fast sampling for the trainer: sample_group's draws on a static KV cache, the decoding step
compiled and replayed as a CUDA graph on a GPU.

reference/sample_group.py samples a group the plain way: every token calls the model eagerly,
the KV cache grows by concatenation and the loop asks the GPU after every token whether all
completions have ended. On a GPU that is launch-bound: a 0.5B model launches about a thousand
kernels per token, each waiting on the host. `StaticCacheSampler` samples from the same
distributions with the same random draws (from the same generator it returns the same
completions, which tests/test_generation.py checks), with:

  * a KV cache allocated once for prompt + completion and written in place, so every decoding
    step has the same shapes;
  * the decoding step (the model on the newest tokens, the sampling filters, the draw) compiled
    by torch.compile(mode="reduce-overhead"), which replays it as one CUDA graph;
  * the stop condition read every `check_every` tokens instead of after every token;
  * optionally a bf16 copy of the policy (on CUDA), refreshed before each call, so decoding reads
    bf16 weights instead of casting the float32 ones at every token.

The same code runs eagerly on the CPU. It also gives the entropy of each sampled position's
tempered distribution (before top-k / top-p), the `entropy` metric TRL logs.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence

import torch

from reference.completion_mask import completion_mask, eos_id_list
from reference.gpt import GPT, StaticKVCache
from reference.sample_group import (
    SampledGroup,
    _check_arguments,
    _check_prompt_mask,
    position_ids,
    sample_group,
    sampling_logits,
    unwrap_model,
)


def bare_model(model: torch.nn.Module) -> torch.nn.Module:
    """The model behind DistributedDataParallel and torch.compile wrappers (PEFT stays)."""
    model = getattr(model, "module", model)
    return getattr(model, "_orig_mod", model)


def supports_static_cache(model: torch.nn.Module) -> bool:
    """The kit's GPT, and transformers models that can run on a StaticCache."""
    model = unwrap_model(model)
    return isinstance(model, GPT) or bool(getattr(model, "_can_compile_fullgraph", False))


def draw(
    logits: torch.Tensor,  # (rows, V) float32
    noise: torch.Tensor,  # (rows, V) Exponential(1) samples
    temperature: float,
    top_k: int,
    top_p: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(tokens, their log-probs, entropies), each (rows,): one token per row, as sample_group.

    torch.multinomial(p, 1) draws argmax(p / q) with q ~ Exponential(1) (an exponential race):
    given the same noise, this is its draw, and it needs no host sync.
    """
    logprobs = torch.log_softmax(sampling_logits(logits, temperature, top_k, top_p), dim=-1)
    tokens = (logprobs.exp() / noise).argmax(dim=-1)  # (rows,)
    # TRL's entropy: of the tempered distribution, before top-k and top-p filter it.
    tempered = torch.log_softmax(logits / temperature, dim=-1)
    entropy = -(tempered.exp() * tempered).sum(dim=-1)
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1), entropy


class StaticCacheSampler:
    """Samples groups for one policy; called like sample_group (its first argument, the model,
    must be that policy or its DistributedDataParallel wrapper).

    After a call, `entropy` holds (N, L) entropies (0 after each completion's end) and
    `seconds` the time it took. Models without a static-cache path (see
    supports_static_cache) are sampled by sample_group itself, in eval mode.
    """

    def __init__(
        self,
        policy: torch.nn.Module,
        max_prompt_length: int = 0,  # prompts are left-padded to this width: fixed shapes
        check_every: int = 8,
        static: bool | None = None,  # None: the static cache where supported; False: never
        compile: bool = False,
        dtype: torch.dtype | None = None,  # a copy of the policy in this dtype samples
    ):
        if check_every < 1:
            raise ValueError(f"check_every must be at least 1, got {check_every}")
        self.policy = bare_model(policy)
        self.static = supports_static_cache(self.policy) and static is not False
        self.max_prompt_length = max_prompt_length
        self.check_every = check_every
        self.model = self.policy
        if self.static and dtype is not None and dtype != next(self.policy.parameters()).dtype:
            self.model = copy.deepcopy(self.policy).to(dtype).eval().requires_grad_(False)
        self.caches: dict[tuple[int, int], object] = {}  # (rows, length) -> a static cache
        self.compiled = compile and self.static
        self.decode = self._decode
        if self.compiled:
            self.decode = torch.compile(self._decode, mode="reduce-overhead", dynamic=False)
        self.entropy: torch.Tensor | None = None
        self.seconds = 0.0

    @torch.no_grad()
    def __call__(
        self,
        model: torch.nn.Module,
        prompt_ids: torch.Tensor,  # (B, P)
        num_generations: int,
        max_new_tokens: int,
        eos_ids: int | Sequence[int],
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
        prompt_mask: torch.Tensor | None = None,  # (B, P) left padding: 1 = real token
    ) -> SampledGroup:
        if bare_model(model) is not self.policy:
            raise ValueError("this sampler samples its own policy: build one for the other model")
        start = time.perf_counter()
        options = dict(temperature=temperature, top_k=top_k, top_p=top_p, generator=generator,
                       prompt_mask=prompt_mask)  # fmt: skip
        training = self.policy.training
        self.policy.eval()  # no dropout, and models that drop their cache to train keep it
        try:
            if self.static:
                self._refresh_copy()
                group = self._sample(
                    prompt_ids, num_generations, max_new_tokens, eos_ids, **options
                )
            else:
                group = sample_group(self.policy, prompt_ids, num_generations, max_new_tokens,
                                     eos_ids, **options)  # fmt: skip
                self.entropy = None
        finally:
            self.policy.train(training)
        if group.completion_ids.is_cuda:
            torch.cuda.synchronize(group.completion_ids.device)
        self.seconds = time.perf_counter() - start
        return group

    def _refresh_copy(self) -> None:
        """The sampling copy takes the policy's current weights (only trainable ones change)."""
        if self.model is self.policy:
            return
        for mine, theirs in zip(self.model.parameters(), self.policy.parameters(), strict=True):
            if theirs.requires_grad:
                mine.copy_(theirs)

    def _sample(self, prompt_ids, num_generations, max_new_tokens, eos_ids, temperature, top_k,
                top_p, generator, prompt_mask) -> SampledGroup:  # fmt: skip
        _check_arguments(prompt_ids, num_generations, max_new_tokens, temperature, top_k, top_p)
        if prompt_mask is not None:
            _check_prompt_mask(prompt_mask, prompt_ids)
        eos = eos_id_list(eos_ids)
        pad_id = eos[0]
        device = next(self.model.parameters()).device
        if generator is not None and generator.device.type != device.type:
            raise ValueError(f"the generator is on {generator.device} but the model on {device}")
        G = num_generations
        B, P_in = prompt_ids.shape
        # Left-pad every batch to one prompt width: the same shapes call after call.
        P = max(P_in, self.max_prompt_length)
        S, rows = P + max_new_tokens, B * G
        mask = torch.zeros(B, S, dtype=torch.long, device=device)  # (B, S) 1 = real token
        mask[:, P - P_in : P] = 1 if prompt_mask is None else prompt_mask.to(device).long()
        mask[:, P:] = 1  # generated tokens are always real
        sequences = torch.full((B, S), pad_id, dtype=torch.long, device=device)
        sequences[:, P - P_in : P] = prompt_ids.to(device)
        positions = position_ids(self.model, mask)  # (B, S), None for the kit's GPT

        # Each prompt is read once; its keys and values are then copied to its G rows.
        extra = {} if positions is None else {"position_ids": positions[:, :P]}
        prefill = self.model(sequences[:, :P], attention_mask=mask[:, :P], use_cache=True,
                             logits_to_keep=1, **extra)  # fmt: skip
        rows_of = torch.arange(rows, device=device) // G  # (rows,) the prompt of each row
        cache = self._cache(rows, S, prefill.past_key_values, rows_of, P)
        sequences, mask = sequences[rows_of], mask[rows_of]  # (rows, S)
        positions = None if positions is None else positions[rows_of]
        logits = prefill.logits[rows_of, -1].float()  # (rows, V)

        logprobs = torch.zeros(rows, max_new_tokens, device=device)
        entropy = torch.zeros(rows, max_new_tokens, device=device)
        eos_tensor = torch.tensor(eos, device=device)
        finished = torch.zeros(rows, dtype=torch.bool, device=device)
        for step in range(max_new_tokens):
            # The one host sync: every check_every tokens, have all completions ended?
            if step and step % self.check_every == 0 and bool(finished.all()):
                break
            noise = torch.empty_like(logits).exponential_(1, generator=generator)
            if step == 0:
                tokens, token_logprobs, step_entropy = draw(
                    logits, noise, temperature, top_k, top_p
                )
            else:
                at = P + step - 1  # the newest token, fed to the model
                step_positions = None if positions is None else positions[:, at : at + 1]
                if self.compiled:
                    torch.compiler.cudagraph_mark_step_begin()
                tokens, token_logprobs, step_entropy = self.decode(
                    sequences[:, at : at + 1], step_positions, mask, cache, noise,
                    temperature, top_k, top_p,
                )  # fmt: skip
            tokens = tokens.masked_fill(finished, pad_id)  # a finished completion only pads
            sequences[:, P + step] = tokens
            logprobs[:, step] = token_logprobs
            entropy[:, step] = step_entropy
            finished |= torch.isin(tokens, eos_tensor)

        completion_ids = sequences[:, P:]
        kept = completion_mask(completion_ids, eos)
        # where, not multiply: a token the filters removed has log-prob -inf, and -inf * 0 = nan.
        self.entropy = torch.where(kept.bool(), entropy, torch.zeros_like(entropy))
        logprobs = torch.where(kept.bool(), logprobs, torch.zeros_like(logprobs))
        return SampledGroup(completion_ids.contiguous(), kept, logprobs)

    def _decode(self, tokens, positions, mask, cache, noise, temperature, top_k, top_p):
        """One decoding step: (rows, 1) newest tokens -> draw() of the next ones."""
        extra = {} if positions is None else {"position_ids": positions}
        output = self.model(tokens, attention_mask=mask, past_key_values=cache, use_cache=True,
                            **extra)  # fmt: skip
        return draw(output.logits[:, -1].float(), noise, temperature, top_k, top_p)

    def _cache(self, rows: int, length: int, prefill, rows_of: torch.Tensor, P: int):
        """The static cache for (rows, length), allocated once, holding each row's prompt."""
        gpt = unwrap_model(self.model)
        if isinstance(gpt, GPT):
            keys = prefill[0][0]  # (B, n_head, P, head_dim)
            cache = self.caches.get((rows, length))
            if cache is None:
                cache = StaticKVCache(gpt.config, rows, length, keys.dtype, keys.device)
                self.caches[(rows, length)] = cache
                self._mark_static(cache.keys, cache.values, cache.length)
            for layer, (k, v) in enumerate(prefill):
                cache.keys[layer, :, :, :P] = k[rows_of]
                cache.values[layer, :, :, :P] = v[rows_of]
            cache.length.fill_(P)
            return cache

        from transformers import StaticCache

        cache = self.caches.get((rows, length))
        first = prefill.layers[0].keys  # (B, heads, P, head_dim)
        if cache is None:
            cache = StaticCache(config=self.model.config, max_cache_len=length)
            cache.early_initialization(rows, first.shape[1], first.shape[3], first.dtype,
                                       first.device)  # fmt: skip
            self.caches[(rows, length)] = cache
        for layer, source in zip(cache.layers, prefill.layers, strict=True):
            layer.keys[:, :, :P] = source.keys[rows_of]
            layer.values[:, :, :P] = source.values[rows_of]
            layer.cumulative_length.fill_(P)
        return cache

    def _mark_static(self, *tensors: torch.Tensor) -> None:
        """Tell torch.compile these buffers keep their address (no copy into the CUDA graph)."""
        if self.compiled:
            for tensor in tensors:
                torch._dynamo.mark_static_address(tensor)
