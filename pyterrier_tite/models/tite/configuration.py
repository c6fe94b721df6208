"""TiteConfig: the reference (webis-de/tite) config fields and defaults, so its ``config.json`` files load unchanged."""

from __future__ import annotations

import math
from collections.abc import Sequence

from transformers import PretrainedConfig
from transformers.activations import ACT2FN

POOLING_LOCATIONS = ("pre", "intra", "post")
NORM_LOCATIONS = ("pre", "qkv", "post")
NORM_TYPES = ("layer", "rms")
ABSOLUTE_POSITIONS = ("learned", None)
RELATIVE_POSITIONS = ("rotary", None)
IMPLEMENTATIONS = ("eager", "triton")  # reference kernel choices; ours are picked by device, so both are accepted
#: options the reference TiteConfig offers that this package does not implement (value -> what it would need)
UNSUPPORTED = {
    ("relative_positional_embedding_type", "alibi"): "ALiBi attention biases are not implemented",
}


def pooled_length(length: int, kernel: int | None, stride: int | None) -> int:
    """Length after one pooling layer: ``ceil(max(0, L - k) / s) + 1`` (0 stays 0; no pooling when k or s is None)."""
    if kernel is None or stride is None or length <= 1:
        return length
    return math.ceil(max(0, length - kernel) / stride) + 1


def output_shapes(max_length: int, kernel_sizes: Sequence[int | None], strides: Sequence[int | None]) -> list[int]:
    """Maximum length after each stage (entry 0 is the input)."""
    shapes = [max_length]
    for k, s in zip(kernel_sizes, strides, strict=True):
        shapes.append(pooled_length(shapes[-1], k, s))
    return shapes


def _none(value: str | None) -> str | None:
    """``"none"`` (written by earlier versions of this package) means what the reference's ``None`` means."""
    return None if value is None or str(value).lower() == "none" else value


def _per_layer(value, n: int, name: str) -> list:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * n
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries, expected num_hidden_layers = {n}")
    return values


class TiteConfig(PretrainedConfig):
    """Per-layer sizes and pooling of a TITE encoder, with the reference's field names and defaults. Every reference
    option works or raises ``ValueError("not supported: ...")``. The ``*_implementation`` fields are stored but
    ignored (kernels are picked by device, same maths); ``None`` and ``"none"`` switch a positional embedding off; the
    legacy ``positional_embedding_type`` of older checkpoints maps onto the two current fields.
    """

    model_type = "tite"

    def __init__(
        self,
        vocab_size: int = 30522,
        num_hidden_layers: int = 12,
        hidden_sizes: Sequence[int] | int = 768,
        num_attention_heads: Sequence[int] | int = 12,
        intermediate_sizes: Sequence[int] | int = 3072,
        kernel_sizes: Sequence[int | None] | int | None = None,
        strides: Sequence[int | None] | int | None = None,
        dropout_prob: float = 0.1,
        max_position_embeddings: int = 512,
        initializer_range: float = 0.02,
        layer_norm_eps: float = 1e-12,
        pad_token_id: int | None = 0,
        hidden_act: str = "gelu_pytorch_tanh",
        absolute_positional_embedding_type: str | None = None,
        relative_positional_embedding_type: str | None = "rotary",
        pooling_location: str = "intra",
        rotary_interleaved: bool = True,
        norm_location: str = "pre",
        norm_type: str = "rms",
        pooling_implementation: str = "triton",
        rope_implementation: str = "eager",
        **kwargs,
    ):
        fields = {k: v for k, v in locals().items() if k not in ("self", "kwargs", "__class__", "pad_token_id")}
        legacy = kwargs.pop("positional_embedding_type", None)
        if legacy is not None:  # reference: "absolute" -> learned table only, anything else -> that relative type
            fields["absolute_positional_embedding_type"] = "learned" if legacy == "absolute" else None
            fields["relative_positional_embedding_type"] = None if legacy == "absolute" else legacy
        for name in ("hidden_sizes", "num_attention_heads", "intermediate_sizes", "kernel_sizes", "strides"):
            values = _per_layer(fields[name], num_hidden_layers, name)
            fields[name] = values if name in ("kernel_sizes", "strides") else [int(v) for v in values]
        for name in ("absolute_positional_embedding_type", "relative_positional_embedding_type"):
            fields[name] = _none(fields[name])
        for name, value in fields.items():  # every field of the signature, per layer where it may be
            setattr(self, name, value)
        super().__init__(pad_token_id=pad_token_id, **kwargs)
        self._validate()

    def _validate(self) -> None:
        self._validate_choices()
        for i, (h, heads) in enumerate(zip(self.hidden_sizes, self.num_attention_heads, strict=True)):
            if h % heads:
                raise ValueError(f"layer {i}: hidden size {h} is not a multiple of {heads} heads")
            if self.relative_positional_embedding_type == "rotary" and (h // heads) % 2:
                raise ValueError(f"layer {i}: RoPE needs an even head dim, got {h // heads}")
        if any(b < a for a, b in zip(self.hidden_sizes, self.hidden_sizes[1:], strict=False)):
            raise ValueError(f"hidden_sizes may only grow (upscaling), got {self.hidden_sizes}")
        for i, (k, s) in enumerate(zip(self.kernel_sizes, self.strides, strict=True)):
            if (k is None) != (s is None):
                raise ValueError(f"layer {i}: set both kernel size and stride or neither, got k={k}, s={s}")
            if k is not None and not 1 <= s <= k:
                raise ValueError(f"layer {i}: need 1 <= stride <= kernel, got k={k}, s={s}")
        shapes = self.output_shapes
        if shapes[-1] != shapes[0] and shapes[-1] != 1:
            raise ValueError(
                f"pooling must reduce max_position_embeddings ({shapes[0]}) to exactly one vector or not at all; "
                f"lengths per stage would be {shapes}"
            )

    def _validate_choices(self) -> None:
        """Each enumerated option is one we implement."""
        for name, allowed in [
            ("pooling_location", POOLING_LOCATIONS),
            ("norm_location", NORM_LOCATIONS),
            ("norm_type", NORM_TYPES),
            ("absolute_positional_embedding_type", ABSOLUTE_POSITIONS),
            ("relative_positional_embedding_type", RELATIVE_POSITIONS),
            ("pooling_implementation", IMPLEMENTATIONS),
            ("rope_implementation", IMPLEMENTATIONS),
        ]:
            value = getattr(self, name)
            if (name, value) in UNSUPPORTED:
                raise ValueError(f"not supported: {name}={value!r} ({UNSUPPORTED[name, value]}); use one of {allowed}")
            if value not in allowed:
                raise ValueError(f"not supported: {name}={value!r}; must be one of {allowed}")
        if self.hidden_act != "swiglu" and self.hidden_act not in ACT2FN:
            raise ValueError(f"not supported: hidden_act={self.hidden_act!r} (neither 'swiglu' nor a transformers one)")

    @property
    def output_shapes(self) -> list[int]:
        """Maximum length after each stage, from ``max_position_embeddings``."""
        return output_shapes(self.max_position_embeddings, self.kernel_sizes, self.strides)

    @property
    def hidden_size(self) -> int:
        """Width of the output vectors (the last layer's hidden size)."""
        return self.hidden_sizes[-1]
