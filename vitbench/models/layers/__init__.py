"""The layers more than one model family builds with, one module per framework: flax.py (the exact LayerNorm of
the ViT and Axial models) and torch.py (the GELU of a flavour, timm's ViT's and Axial's). A layer one family
alone uses lives in that family's package (vitbench.models.families.<name>); a family built on another's model
(the hybrid: bit's ResNet, vit's transformer) imports that family's modules."""
