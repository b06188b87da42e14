"""vitbench: honest throughput, memory, FLOPs and transfer-accuracy measurements for ViT, BiT and hybrids."""

__version__ = "0.1.0"
