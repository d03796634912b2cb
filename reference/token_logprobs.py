"""Reference solution: the log-probability of each completion token under a causal LM.

The model's logits at position t are its prediction for the token at position t + 1, so the
completion tokens input_ids[:, P:] are scored by logits[:, P - 1 : T - 1]. Array-API generic:
the trainer calls it on torch logits and differentiates through it.
"""

from array_api_compat import array_namespace


def _check(logits, input_ids, prompt_length: int, temperature: float) -> None:
    if logits.ndim != 3 or input_ids.ndim != 2:
        raise ValueError(
            f"expected logits of shape (B, T, V) and input_ids of shape (B, T), got "
            f"{tuple(logits.shape)} and {tuple(input_ids.shape)}"
        )
    if tuple(logits.shape[:2]) != tuple(input_ids.shape):
        raise ValueError(
            f"logits {tuple(logits.shape)} and input_ids {tuple(input_ids.shape)} must agree "
            "on (B, T): pass the logits of the whole sequence, prompt included"
        )
    T = input_ids.shape[1]
    if not 1 <= prompt_length < T:
        # The first token has no prediction, and a completion needs at least one token.
        raise ValueError(f"prompt_length must be in [1, T - 1] = [1, {T - 1}], got {prompt_length}")
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")


def token_logprobs(logits, input_ids, prompt_length: int, temperature: float = 1.0):
    """log pi(input_ids[:, t] | input_ids[:, :t]) for every completion position t >= prompt_length.

    Returns an array of shape (B, T - prompt_length) in the logits' floating dtype.
    """
    xp = array_namespace(logits, input_ids)
    _check(logits, input_ids, prompt_length, temperature)
    # A Python number: numpy scalars (np.float64(0.7), np.int64(2)) would promote float32 logits.
    temperature = float(temperature)

    # Shift by one: the logits at t - 1 predict the token at t.
    scores = logits[:, prompt_length - 1 : -1, :] / temperature
    targets = input_ids[:, prompt_length:]

    # log softmax = x - logsumexp(x); subtracting the row maximum first keeps exp() <= 1, so
    # logits of any size never overflow. The maximum cancels out of the result.
    shift = xp.max(scores, axis=-1, keepdims=True)
    log_norm = xp.log(xp.sum(xp.exp(scores - shift), axis=-1, keepdims=True)) + shift
    # Gather the chosen token's score instead of building the whole (B, L, V) log-softmax.
    chosen = xp.take_along_axis(scores, xp.expand_dims(targets, axis=-1), axis=-1)
    return (chosen - log_norm)[..., 0]
