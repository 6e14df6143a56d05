"""Style counts of model answers, the schema both apps share.

LMArena's style control needs, per answer, its tokens, markdown headers, list items and bold
spans (``counts``), summed per side into a battle's ``conv_metadata`` (``schema``). The arena
counts an answer when it saves it and sums a battle's answers into its vote; the rating engine
reads the same keys. Django-free: this package imports neither Django, ``arena`` nor
``ratings``.
"""

from .counts import ENCODING_NAME, count_tokens, markdown_counts, strip_code_blocks, style_counts
from .schema import (
    ANSWER_KEYS,
    CONV_METADATA_KEYS,
    STYLE_COLUMNS,
    STYLE_ELEMENTS,
    AnswerStyle,
    ConvMetadata,
    conv_metadata,
)

__all__ = [
    "ANSWER_KEYS",
    "CONV_METADATA_KEYS",
    "ENCODING_NAME",
    "STYLE_COLUMNS",
    "STYLE_ELEMENTS",
    "AnswerStyle",
    "ConvMetadata",
    "conv_metadata",
    "count_tokens",
    "markdown_counts",
    "strip_code_blocks",
    "style_counts",
]
