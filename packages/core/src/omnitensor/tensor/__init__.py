"""The lazy `Tensor`, its creation functions, realization and `compile`."""
