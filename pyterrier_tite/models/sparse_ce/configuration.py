"""The sparse cross-encoder's configuration, in the reference's ``config.json`` layout (``model_type`` "bert")."""

from __future__ import annotations

from transformers import PretrainedConfig

FLAGS = (
    "cls_query_attention",
    "cls_doc_attention",
    "query_cls_attention",
    "query_doc_attention",
    "doc_cls_attention",
    "doc_query_attention",
)


class SparseCrossEncoderConfig(PretrainedConfig):
    """BERT fields plus the reference's six attention flags, window size and special token ids. The defaults make a
    plain BERT cross-encoder (released checkpoints: w=4, the query attends to itself only). ``model_type`` is "bert"
    like the reference's, so ``AutoConfig`` would give a ``BertConfig``: load this class explicitly.
    """

    model_type = "bert"

    def __init__(
        self,
        vocab_size: int = 30522,
        hidden_size: int = 768,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 12,
        intermediate_size: int = 3072,
        hidden_act: str = "gelu",
        hidden_dropout_prob: float = 0.1,
        attention_probs_dropout_prob: float = 0.1,
        max_position_embeddings: int = 512,
        type_vocab_size: int = 2,
        initializer_range: float = 0.02,
        layer_norm_eps: float = 1e-12,
        pad_token_id: int = 0,
        cls_token_id: int = 101,
        sep_token_id: int = 102,
        position_embedding_type: str = "absolute",
        token_type_embedding: bool = True,
        attention_window_size: int | None = None,
        cls_query_attention: bool = True,
        cls_doc_attention: bool = True,
        query_cls_attention: bool = True,
        query_doc_attention: bool = True,
        doc_cls_attention: bool = True,
        doc_query_attention: bool = True,
        depth: int = 100,
        **kwargs,
    ):
        fields = {k: v for k, v in locals().items() if k not in ("self", "kwargs", "__class__", "pad_token_id")}
        if "id2label" not in kwargs:
            kwargs.setdefault("num_labels", 1)
        super().__init__(pad_token_id=pad_token_id, **kwargs)
        if hidden_size % num_attention_heads:
            raise ValueError(
                f"hidden_size {hidden_size} is not a multiple of num_attention_heads {num_attention_heads}"
            )
        window = attention_window_size  # the one place the window is checked (``SparseCE(w=...)`` arrives here)
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
            raise ValueError(
                f"the attention window w must be None (full attention) or an int >= 0 (attention_window_size), "
                f"got {window!r}"
            )
        if position_embedding_type != "absolute":
            raise ValueError(f"only absolute position embeddings are supported, got {position_embedding_type!r}")
        for name, value in fields.items():  # every field of the signature, as given
            setattr(self, name, value)

    @property
    def shares_query(self) -> bool:
        """The query sees only itself, so one encoding per query serves all its docs."""
        return not (self.query_cls_attention or self.query_doc_attention)
