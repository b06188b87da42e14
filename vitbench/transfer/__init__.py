"""Transfer accuracy: datasets, small-scale pre-training, linear few-shot, fine-tuning (paper Sec. 4, App. B)."""
