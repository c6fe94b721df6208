"""TiteModel: a Token-Independent Text Encoder, its hidden states packed (``[T, H]`` + ``cu_seqlens``) from the
embeddings to the output, in the reference's (webis-de/tite) checkpoint format. Where the reference differs: the
embedding output is one hidden state, not two, and intra-pooled query rows get the RoPE position of the window centre
``j * stride + (kernel - 1) / 2`` (the reference passes the kernel as the stride: the same when kernel == stride)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, PreTrainedModel
from transformers.utils import ModelOutput

from pyterrier_tite.models.backbone import reference_init
from pyterrier_tite.models.packing import PackedLayout
from pyterrier_tite.models.tite.configuration import TiteConfig
from pyterrier_tite.models.tite.convert import load_tite_model, tite_config
from pyterrier_tite.models.tite.layers import RMSNorm, RopeCache, TiteEmbeddings, TiteEncoder
from pyterrier_tite.ops import pooled_lengths


@dataclass
class TiteModelOutput(ModelOutput):
    """``last_hidden_state [B, L_out, H]`` (empty sequences are zero rows); with ``output_hidden_states``, every
    stage's packed ``hidden_states`` and their ``hidden_cu_seqlens``."""

    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    hidden_cu_seqlens: tuple[torch.Tensor, ...] | None = None

    def split_hidden_states(self) -> list[list[torch.Tensor]]:
        """Per stage, the per-sequence ``[len, H]`` tensors (the layout of the parity ``hidden_states.json``)."""
        if self.hidden_states is None:
            raise ValueError("call the model with output_hidden_states=True")
        return [
            list(torch.split(h, torch.diff(cu.cpu().long()).tolist()))
            for h, cu in zip(self.hidden_states, self.hidden_cu_seqlens, strict=True)
        ]


@dataclass
class TitePackedOutput(ModelOutput):
    """Packed result: ``last_hidden_state [T_out, H]`` with ``cu_seqlens`` (int32) of the final stage."""

    last_hidden_state: torch.Tensor | None = None
    cu_seqlens: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    hidden_cu_seqlens: tuple[torch.Tensor, ...] | None = None


class TitePreTrainedModel(PreTrainedModel):
    config_class = TiteConfig
    base_model_prefix = "tite"
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True

    def _init_weights(self, module: nn.Module) -> None:
        reference_init(module, self.config.initializer_range, norms=(nn.LayerNorm, RMSNorm))


class TiteModel(TitePreTrainedModel):
    """TITE encoder. ``forward(input_ids [B, L], attention_mask [B, L])`` or ``forward_packed(ids [T], cu_seqlens)``."""

    def __init__(self, config: TiteConfig):
        super().__init__(config)
        self.embeddings = TiteEmbeddings(config)
        self.encoder = TiteEncoder(config)
        self.post_init()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, config=None, **kwargs):
        """A folder or hub id of any TITE layout, loaded exactly: a missing or unused tensor raises
        ``CheckpointError`` instead of ``PreTrainedModel``'s logged random init. Keyword arguments override stored
        config fields; ``dtype`` / ``torch_dtype`` cast the result; ``attn_implementation`` and unset hub options
        are accepted and ignored."""
        if model_args:
            raise TypeError(f"{cls.__name__}.from_pretrained takes no positional model arguments")
        if config is not None and not isinstance(config, TiteConfig):
            raise TypeError(f"config must be a TiteConfig, got {type(config).__name__}")
        loading_info = kwargs.pop("output_loading_info", False)
        dtype = kwargs.pop("dtype", None) or kwargs.pop("torch_dtype", None)
        overrides = _config_overrides(kwargs)
        if config is not None and overrides:
            config, overrides = tite_config(config.to_dict(), **overrides), {}
        model = load_tite_model(pretrained_model_name_or_path, config=config, model_class=cls, **overrides)
        if dtype not in (None, "auto"):
            model = model.to(getattr(torch, dtype) if isinstance(dtype, str) else dtype)
        if loading_info:
            return model, {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": [], "error_msgs": []}
        return model

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    def plan_layouts(self, lengths: torch.Tensor, device: torch.device | str) -> list[PackedLayout]:
        """Layout of every stage (input, then each layer's); a layer that does not pool reuses its input's."""
        layouts = [PackedLayout.from_lengths(lengths, device)]
        for k, s in zip(self.config.kernel_sizes, self.config.strides, strict=True):
            current = layouts[-1]
            if k is None or current.max_len <= 1:
                layouts.append(current)
            else:
                layouts.append(PackedLayout.from_lengths(pooled_lengths(current.lengths, k, s), device))
        return layouts

    def forward_packed(
        self,
        input_ids: torch.Tensor,
        cu_seqlens: torch.Tensor,
        positions: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> TitePackedOutput:
        """Encode packed token ids ``[T]`` with offsets ``cu_seqlens [B+1]``; positions default to 0..n-1."""
        layouts = self.plan_layouts(_lengths(cu_seqlens), input_ids.device)
        longest, table = layouts[0].max_len, self.config.max_position_embeddings
        if self.embeddings.position_embeddings is not None and longest > table:
            raise ValueError(f"sequence of {longest} tokens exceeds max_position_embeddings = {table}")
        x = self.embeddings(input_ids, layouts[0].positions if positions is None else positions)
        states = [x] if output_hidden_states else None
        rope = RopeCache()
        for layer, layout_in, layout_out in zip(self.encoder.layers, layouts[:-1], layouts[1:], strict=False):
            if layout_in.total:
                x = layer(x, layout_in, layout_out, rope)
            else:  # nothing to encode: keep the (empty) rows at the layer's width
                x = x.new_zeros(0, layer.mlp.out_dense.out_features)
            if states is not None:
                states.append(x)
        return TitePackedOutput(
            last_hidden_state=self.encoder.norm(x),
            cu_seqlens=layouts[-1].cu_seqlens,
            hidden_states=tuple(states) if states is not None else None,
            hidden_cu_seqlens=tuple(lay.cu_seqlens for lay in layouts) if states is not None else None,
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        token_type_ids: torch.Tensor | None = None,
        **kwargs,
    ) -> TiteModelOutput | tuple:
        """Encode ``input_ids [B, L]``; ``attention_mask`` selects the tokens (positions count the kept ones). Other
        tokenizer outputs are ignored, so ``model(**tokenizer(texts, return_tensors="pt"))`` works."""
        if output_hidden_states is None:
            output_hidden_states = bool(self.config.output_hidden_states)
        packed = self.forward_packed(*pack_padded(input_ids, attention_mask), output_hidden_states=output_hidden_states)
        final = PackedLayout.from_lengths(_lengths(packed.cu_seqlens), input_ids.device)
        out = packed.last_hidden_state
        padded = final.pad(out) if final.max_len else out.new_zeros(final.batch_size, 1, out.shape[-1])
        result = TiteModelOutput(padded, packed.hidden_states, packed.hidden_cu_seqlens)
        return result.to_tuple() if return_dict is False else result


def pack_padded(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A padded batch ``[B, L]`` as :meth:`TiteModel.forward_packed` takes it: kept ids, ``cu_seqlens``, positions."""
    mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    cu = torch.zeros(mask.shape[0] + 1, dtype=torch.int32, device=input_ids.device)
    cu[1:] = torch.cumsum(mask.sum(1), 0)
    return input_ids[mask], cu, (torch.cumsum(mask, 1) - 1)[mask]


def _lengths(cu_seqlens: torch.Tensor) -> torch.Tensor:
    return torch.diff(cu_seqlens.detach().to("cpu", torch.int64))


#: ``from_pretrained`` options without effect here: the attention implementation (kernels are picked by device), auto
#: class bookkeeping, remote code (there is none)
_DROPPED_OPTIONS = frozenset({"attn_implementation", "trust_remote_code", "_from_auto", "_commit_hash"})
#: hub / placement options that we do not honour: accepted only while unset (a set one raises)
_UNSET_OPTIONS = frozenset(
    {"cache_dir", "force_download", "local_files_only", "proxies", "subfolder", "token", "use_safetensors",
     "device_map", "low_cpu_mem_usage", "adapter_kwargs", "code_revision", "key_mapping", "revision"}
)  # fmt: skip


def _config_overrides(kwargs: dict) -> dict:
    """``from_pretrained``'s config overrides; an option we would not honour raises ``TypeError``."""
    overrides = {}
    for name, value in kwargs.items():
        value = getattr(value, "initial", value)  # AutoModel passes the revision as a ResolvedRevision
        if name in _DROPPED_OPTIONS or (name in _UNSET_OPTIONS and value in (None, False, "", "main", {})):
            continue
        if name in _UNSET_OPTIONS:
            raise TypeError(f"TiteModel.from_pretrained does not support {name}={value!r}")
        if name not in TiteConfig().to_dict() and name != "positional_embedding_type":
            raise TypeError(f"TiteModel.from_pretrained got an unexpected keyword argument {name!r}")
        overrides[name] = value
    return overrides


# ``AutoConfig`` / ``AutoModel.from_pretrained(folder)`` resolve model_type "tite" once this package is imported.
AutoConfig.register("tite", TiteConfig, exist_ok=True)
AutoModel.register(TiteConfig, TiteModel, exist_ok=True)
