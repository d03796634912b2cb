"""Properties of the reference sample_group, on random tiny models and settings (hypothesis)."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.sample_group import sample_group, sampling_logits


class TableLM(torch.nn.Module):
    """Next-token logits from a seeded random bigram table."""

    def __init__(self, vocab: int, seed: int):
        super().__init__()
        table = torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(seed)) * 2
        self.table = torch.nn.Parameter(table)

    def forward(self, input_ids, attention_mask=None):
        return self.table[input_ids]


SETTINGS = st.fixed_dictionaries(
    {
        "temperature": st.floats(0.1, 3.0),
        "top_k": st.integers(0, 8),
        "top_p": st.floats(0.05, 1.0),
    }
)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 8),
    st.integers(0, 1000),
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(1, 6),
    st.lists(st.integers(0, 7), min_size=1, max_size=2),
    SETTINGS,
)
def test_layout_masks_and_logprobs_are_consistent(vocab, seed, batch, group, steps, eos, knobs):
    model = TableLM(vocab, seed)
    eos = [e % vocab for e in eos]  # EOS ids, the pad among them, are tokens of the vocabulary
    prompts = torch.randint(0, vocab, (batch, 2), generator=torch.Generator().manual_seed(seed))
    out = sample_group(
        model, prompts, group, steps, eos, generator=torch.Generator().manual_seed(1), **knobs
    )
    ids, mask, logprobs = out.completion_ids, out.completion_mask, out.logprobs
    assert ids.shape == mask.shape == logprobs.shape == (batch * group, steps)
    is_eos = torch.isin(ids, torch.tensor(eos))
    for row in range(batch * group):
        ends = torch.nonzero(is_eos[row]).flatten()
        length = int(ends[0]) + 1 if len(ends) else steps
        assert mask[row].tolist() == [1] * length + [0] * (steps - length)
        assert torch.all(ids[row, length:] == eos[0])
    assert torch.all(torch.isfinite(logprobs)) and torch.all(logprobs <= 0)
    assert torch.all(logprobs[mask == 0] == 0)
    # Every sampled token lies inside the filtered distribution of its context.
    context = torch.cat([prompts.repeat_interleave(group, 0)[:, -1:], ids[:, :-1]], dim=1)
    kept = torch.isfinite(sampling_logits(model.table[context].detach(), **knobs))
    chosen = kept.gather(-1, ids[..., None])[..., 0]
    assert torch.all(chosen[mask == 1])


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 50), st.integers(0, 1000), SETTINGS)
def test_filtered_distribution_keeps_the_top_token_and_respects_top_k(vocab, seed, knobs):
    logits = torch.randn(3, vocab, generator=torch.Generator().manual_seed(seed))
    filtered = sampling_logits(logits, **knobs)
    kept = torch.isfinite(filtered)
    assert torch.all(kept.gather(-1, logits.argmax(-1, keepdim=True)))
    if knobs["top_k"] > 0:
        assert torch.all(kept.sum(-1) <= knobs["top_k"])
    # The nucleus reaches top_p of the tempered, top-k-filtered mass.
    tempered = torch.softmax(sampling_logits(logits, knobs["temperature"], knobs["top_k"]), -1)
    assert torch.all((tempered * kept).sum(-1) >= knobs["top_p"] - 1e-6)
