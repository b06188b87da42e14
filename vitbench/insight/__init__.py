"""What a ViT learned (paper Sec. 4.5, Fig. 6, 7, 11): mean attention distance, position-embedding similarity,
embedding-filter principal components and attention rollout. The core is framework-free numpy; attention maps
come from a backend's `attention_maps` (vitbench.backends.base.Backend; the `attention` capability)."""

from vitbench.insight.distance import mean_attention_distance, prefix_attention_share
from vitbench.insight.filters import FilterComponents, embedding_filter_components
from vitbench.insight.layout import TokenLayout
from vitbench.insight.markdown import to_markdown
from vitbench.insight.pictures import Picture, distance_figure, write_pictures
from vitbench.insight.posemb import posemb_similarity
from vitbench.insight.rollout import attention_rollout, rollout_maps
from vitbench.insight.result import AttentionFn, InspectResult
from vitbench.insight.run import inspect_model

__all__ = ["AttentionFn", "FilterComponents", "InspectResult", "Picture", "TokenLayout", "attention_rollout",
           "distance_figure", "embedding_filter_components", "inspect_model", "mean_attention_distance",
           "posemb_similarity", "prefix_attention_share", "rollout_maps", "to_markdown", "write_pictures"]
