"""Problem: per-token log-probabilities. Read README.md, then replace the body below."""

import numpy as np  # noqa: F401 - you will need it


def token_logprobs(logits, input_ids, prompt_length, temperature=1.0):
    """Return the log-probability of each completion token under the model.

    Args:
        logits: float numpy array of shape (B, T, V): the model's logits for the whole sequence;
            logits[:, t] is the prediction for the token at position t + 1.
        input_ids: integer numpy array of shape (B, T): prompt tokens followed by completion tokens.
        prompt_length: the number P of prompt tokens (the same for every row), 1 <= P < T.
        temperature: the sampling temperature; logits are divided by it before the softmax.

    Returns:
        A numpy array of shape (B, T - P) in the logits' floating dtype: entry [b, j] is
        log p(input_ids[b, P + j] | input_ids[b, :P + j]).

    Raises:
        ValueError: if the shapes do not fit together, P is not in [1, T - 1], or temperature <= 0.
    """
    raise NotImplementedError("token_logprobs is not implemented yet: write its body")
