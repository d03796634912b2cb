"""A small GPT, the default policy of the trainer: trained from scratch, no download needed.

It follows the Hugging Face causal-LM calling convention, so the trainer and
`reference.sample_group.sample_group` treat it exactly like a transformers model:

    out = model(input_ids, attention_mask=mask, past_key_values=cache, use_cache=True)
    out.logits             (B, T, vocab_size)
    out.past_key_values    one (k, v) pair per layer, each (B, n_head, T_past + T, head_dim)

or, for fast generation, a `StaticKVCache` allocated once and written in place (fixed shapes,
so a CUDA graph can replay the decoding step). `logits_to_keep=n` computes the logits of the
last n positions only, as in transformers.

`GPTConfig` and the state_dict are enough to rebuild a model (see `GPT.from_checkpoint`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

KVCache = tuple[tuple[torch.Tensor, torch.Tensor], ...]


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int = 32  # longest sequence (prompt + completion) the model accepts
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64


@dataclass
class CausalLMOutput:
    logits: torch.Tensor  # (B, T, vocab_size)
    past_key_values: KVCache | None = None


class StaticKVCache:
    """Keys and values of `max_len` positions, preallocated and written in place.

    The attention mask passed with it covers all max_len positions; `length` (a 0-d tensor, so
    reading it needs no host sync) counts the positions written so far.
    """

    def __init__(self, config: GPTConfig, batch_size: int, max_len: int, dtype, device):
        shape = (config.n_layer, batch_size, config.n_head, max_len, config.n_embd // config.n_head)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.length = torch.zeros((), dtype=torch.long, device=device)

    @property
    def max_len(self) -> int:
        return self.keys.shape[3]

    def write(self, layer: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """Store (B, n_head, T, head_dim) keys and values at `positions` (T,); return all of them."""
        self.keys[layer].index_copy_(2, positions, k.to(self.keys.dtype))
        self.values[layer].index_copy_(2, positions, v.to(self.values.dtype))
        return self.keys[layer], self.values[layer]


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(
        self,
        x: torch.Tensor,  # (B, T, C)
        allowed: torch.Tensor | None,  # (B, 1, T, S) bool: may query t see key s; None: causal
        past: tuple[torch.Tensor, torch.Tensor] | None,
        static: tuple[StaticKVCache, int, torch.Tensor] | None = None,  # cache, layer, positions
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, n_head, T, head_dim)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if static is not None:
            cache, layer, positions = static
            k, v = cache.write(layer, positions, k, v)  # (B, n_head, max_len, head_dim)
            k, v = k.to(q.dtype), v.to(q.dtype)
        elif past is not None:
            k = torch.cat([past[0], k], dim=2)  # (B, n_head, S, head_dim), S = T_past + T
            v = torch.cat([past[1], v], dim=2)
        y = F.scaled_dot_product_attention(  # (B, n_head, T, head_dim)
            q, k, v, attn_mask=allowed, is_causal=allowed is None
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y), (k, v)


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
        )

    def forward(self, x, allowed, past, static=None):
        attended, present = self.attn(self.ln_1(x), allowed, past, static)
        x = x + attended
        x = x + self.mlp(self.ln_2(x))
        return x, present


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying: fewer parameters, learns faster
        self.apply(self._init_weights)
        # GPT-2's scaled init of the residual projections keeps the residual stream's variance flat.
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T) the new tokens only when past_key_values is given
        attention_mask: torch.Tensor | None = None,  # (B, S) 1 = real, 0 = padding; S = T_past + T
        past_key_values: KVCache | StaticKVCache | None = None,
        use_cache: bool = False,
        logits_to_keep: int = 0,  # > 0: the logits of the last logits_to_keep positions only
    ) -> CausalLMOutput:
        B, T = input_ids.shape
        device = input_ids.device
        static = past_key_values if isinstance(past_key_values, StaticKVCache) else None
        if static is not None:  # S = max_len: the mask covers the whole cache
            past_len, S = static.length, static.max_len
        else:
            past_len = 0 if past_key_values is None else past_key_values[0][0].shape[2]
            S = past_len + T
        if self.config.block_size < S:
            raise ValueError(
                f"sequence of {S} tokens is longer than block_size={self.config.block_size}: "
                "build the model with a larger GPTConfig.block_size"
            )
        if attention_mask is None:
            attention_mask = torch.ones(B, S, dtype=torch.long, device=device)
        query_index = past_len + torch.arange(T, device=device)  # (T,) where the new tokens go
        # Positions count real tokens only, so a left-padded prompt starts at position 0.
        positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, S)
        positions = positions.gather(1, query_index.expand(B, T))  # (B, T)
        if static is None and past_len == 0 and bool(attention_mask.all()):
            allowed = None  # plain causal attention: the fast fused kernel
        else:
            keys = attention_mask.bool()  # (B, S)
            key_index = torch.arange(S, device=device)[None, :]  # (1, S)
            causal = key_index <= query_index[:, None]  # (T, S)
            # A query may always see itself: a padding query with no visible key would give NaN.
            allowed = causal & (keys[:, None, :] | (key_index == query_index[:, None]))  # (B, T, S)
            allowed = allowed[:, None]  # (B, 1, T, S), broadcast over heads

        x = self.wte(input_ids) + self.wpe(positions)  # (B, T, C)
        presents = []
        for i, block in enumerate(self.blocks):
            if static is not None:
                x, present = block(x, allowed, None, (static, i, query_index))
            else:
                past = None if past_key_values is None else past_key_values[i]
                x, present = block(x, allowed, past)
            presents.append(present)
        if static is not None:
            static.length.add_(T)
        if logits_to_keep > 0:
            x = x[:, -logits_to_keep:]
        logits = self.lm_head(self.ln_f(x))  # (B, T or logits_to_keep, vocab_size)
        if static is not None:
            return CausalLMOutput(logits, static if use_cache else None)
        return CausalLMOutput(logits, tuple(presents) if use_cache else None)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def checkpoint(self) -> dict:
        """Everything needed to rebuild this model: its config and its weights."""
        return {"config": asdict(self.config), "state_dict": self.state_dict()}

    @classmethod
    def from_checkpoint(cls, checkpoint: dict) -> GPT:
        model = cls(GPTConfig(**checkpoint["config"]))
        model.load_state_dict(checkpoint["state_dict"])
        return model
