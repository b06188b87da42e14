"""The transfer protocols: pre-training (supervised, masked-patch, distilled), few-shot linear evaluation,
fine-tuning and training with real input, each one run over a backend's transfer primitives
(vitbench.backends.base: Capability.TRANSFER) on vitbench.transfer's data, schedules and settings, which sit below
the backends (docs/architecture.md)."""
