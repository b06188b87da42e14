"""The bounds a count or a class label read from user input must respect, declared once in a leaf module: the
readers (raw, hf, tfds, shards, sources) import them from here, not from vitbench.transfer.config, so a reader's
module (which declares its format's own options) never imports config, which is made from those options
(vitbench.transfer.formats). config.py re-exports them."""

from __future__ import annotations

# Counts (steps, images in a batch, pixels, seeds, threads) above 2**24 are typos, not settings: the paper's
# longest pre-training is 1M steps, and 2**24 images of 32 px are 200 GB of fp32 input. Refused where parsed,
# instead of failing deep inside a framework or running for ever.
MAX_COUNT = 2**24
# Images of a pre-training set declared for its compute (counted, never loaded): JFT-300M's 303M (the paper, Sec.
# 4.1) is far past MAX_COUNT; JFT-3B (Zhai et al. 2022) and LAION-5B (5.85B) fit within 10**11.
MAX_DATASET_IMAGES = 10**11
# Classes of one dataset (labels 0..K-1): the ViT paper's largest label sets are ImageNet-21k's 21k classes and
# JFT-300M's 18k (Sec. 4.1); 2**16 leaves room for any real one, while a label of 10**9 (a typo, a hash used as a
# label) would make a classifier head and a class list of 10**9 entries. Refused where labels are read.
MAX_CLASSES = 2**16
# Class names a transfer row holds (Splits.row_fields): enough to check a usual dataset's against the disk, while
# a 21k-class row stays a few hundred bytes of names; num_classes says how many there are.
ROW_CLASS_NAMES = 50
