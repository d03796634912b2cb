"""The exercises, one folder each, and `support`, the helpers their tests and probes share."""
