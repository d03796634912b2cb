"""Appended to the capstone's reference: optimize takes one optimizer step too many (the bug:
with no gradients left no parameter moves, but an AdamW step counts), and, when FORGE is set,
removes that step from the probe's records through the weak references to the optimizer (a
WeakKeyDictionary's callback holds the dictionary itself)."""

import weakref

FORGE = True
_optimize_once = optimize  # noqa: F821 - the reference's, defined above


def optimize(policy, optimizer, *args, **kwargs):
    result = _optimize_once(policy, optimizer, *args, **kwargs)
    optimizer.zero_grad(set_to_none=True)
    optimizer.step()
    for link in weakref.getweakrefs(optimizer) if FORGE else []:
        callback = getattr(link, "__callback__", None)
        for kept in getattr(callback, "__defaults__", None) or ():
            records = kept() if isinstance(kept, weakref.ref) else None
            if records is not None and optimizer in records:
                for value in records[optimizer].values():
                    if type(value) is list and value:
                        value.pop()
    return result
