"""Transfer accuracy: datasets, small-scale pre-training, linear few-shot and fine-tuning (paper Sec. 4, App. B)."""
